// Tokenizer::from_gguf: a TokenizerSpec from tokenizer.ggml.* metadata. The rules follow
// transformers' GGUF tokenizer conversion (integrations/gguf/gguf_tokenizer_mapping.py), which is
// the oracle the tests compare against, except where it departs from both llama.cpp and the
// model's own tokenizer.json, where this follows those two (each place says so): Phi-3's rstrip,
// the end-of-generation texts, and BOS / ignore_merges of Llama 3-style and Tekken vocabularies.
//  - tokenizer.ggml.model "gpt2": byte-level BPE. A token spelled outside the byte alphabet is
//    re-spelled from its UTF-8 bytes. The pre-tokenizer comes from tokenizer.ggml.pre, with the
//    names llama.cpp gives each regex: the Llama 3 family ("llama3", "llama-bpe", ...), the Qwen2
//    family ("qwen2", ...), o200k ("gpt-4o": Phi-4-mini; "llama4", ...) and "tekken" (Mistral
//    NeMo, Ministral, Mistral Small 3), "bloom" (BLOOM, Poro, GPT-3 Finnish: a run of anything
//    but white space and a few punctuation marks, the text between runs kept whole) and "qwen35"
//    (Qwen3.5, with the NFC normalizer of its tokenizer.json, which transformers' conversion does
//    not know) use their split regex -- the
//    one in the tokenizer.json the file was converted from; anything else ("gpt2", "smollm",
//    absent, ...) gets GPT-2's byte-level split, as GPT2Tokenizer does.
//    The Llama 3 names and "tekken" also mean ignore_merges, and BOS when add_bos_token is absent.
//  - "llama": SentencePiece-style BPE with byte fallback, Metaspace prefix on the first segment
//    (none if tokenizer.ggml.add_space_prefix is false), merges from the file or derived from
//    scores. BOS is added unless tokenizer.ggml.add_bos_token says otherwise. Architecture phi3:
//    a prefix on every segment (Phi-3's Prepend normalizer); gemma, gemma2, gemma3, gemma3n: no
//    prefix and no leading-space strip on decode, whitespace tokens holding a space respelled as
//    U+2581 runs, merges derived from the token order instead of the scores (transformers' GGUF
//    builders).
//  - token_type 3 (control) and 2 (unknown: <unk>, which transformers registers as its unk_token
//    and llama.cpp matches in text like a control token) tokens become special added tokens (in a
//    byte-level vocabulary only those spelled in the byte alphabet); type 4 (user-defined) become
//    plain added tokens.
//  - EOS-like ids (eos_ids): tokenizer.ggml.eos_token_id, tokenizer.ggml.eot_token_id and
//    tokenizer.ggml.eom_token_id when present, the newer tokenizer.ggml.eos_token_ids list, and the
//    tokens whose text is one llama.cpp ends generation on (<|im_end|>, <end_of_turn>, <|end|>,
//    ...)
//    -- GGUF carries no generation_config, and this is the set llama.cpp itself stops on.
#include <algorithm>
#include <set>
#include <unordered_set>

#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ossa {

namespace {

const std::set<std::string>& llama3_pre_names() {
  static const std::set<std::string> s = {
      "llama3", "llama-v3",     "llama-bpe", "falcon3",   "falcon-h1",   "pixtral", "midm-2.0",
      "lfm2",   "jina-v5-nano", "dbrx",      "smaug-bpe", "chatglm-bpe", "glm4"};
  return s;
}
// The names for which llama.cpp adds BOS when the file does not say (tokenizer.ggml.add_bos_token
// absent, as in Meta's Llama 3 conversions) and applies ignore_merges, as the tokenizer.json files
// of Llama 3 and Tekken do.
bool bos_and_ignore_merges(const std::string& pre) {
  static const std::set<std::string> s = {"llama3",   "llama-v3",  "llama-bpe",
                                          "falcon3",  "falcon-h1", "pixtral",
                                          "midm-2.0", "lfm2",      "tekken"};
  return s.count(pre) > 0;
}
const std::set<std::string>& qwen2_pre_names() {
  static const std::set<std::string> s = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2",
                                          "megrez"};
  return s;
}
const std::set<std::string>& o200k_pre_names() {
  static const std::set<std::string> s = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"};
  return s;
}
const std::set<std::string>& bloom_pre_names() {
  static const std::set<std::string> s = {"bloom", "poro-chat", "gpt3-finnish"};
  return s;
}
const std::set<std::string>& unsupported_pre_names() {
  static const std::set<std::string> s = {};
  return s;
}

// Code points of a token that is all white space (as Python's str.isspace has it: White_Space and
// U+001C..U+001F) with at least one ' ' -- how Gemma GGUF files store the space-run tokens that
// transformers spells as U+2581 runs -- or 0.
size_t space_run_length(const std::string& t) {
  if (t.find(' ') == std::string::npos || utf8_valid_prefix(t) != t.size()) return 0;
  auto p = reinterpret_cast<const unsigned char*>(t.data());
  size_t n = 0;
  for (size_t i = 0; i < t.size(); ++n) {
    uint32_t c;
    i += utf8_decode(p + i, c);
    if (!(unicode_flags(c) & k_white_space) && !(c >= 0x1C && c <= 0x1F)) return 0;
  }
  return n;
}

// Token texts that end generation whatever the file's eos/eot/eom keys say: llama.cpp's list (its
// end-of-generation set is found by these texts too; the last is DeepSeek's end of sentence), so
// that a Phi-3 file whose eos is <|endoftext|> stops at <|end|>, and a Gemma file whose eos is
// <eos> at <end_of_turn>.
const std::set<std::string>& end_of_generation_texts() {
  static const std::set<std::string> s = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<end_of_turn>",
                                          "<turn|>",  // (Gemma 4's)
                                          "<|endoftext|>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<\xef\xbd\x9c"
                                          "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};
  return s;
}

bool spelled_in_byte_alphabet(const std::string& s) {
  std::string raw;
  return byte_level_decode(s, raw);
}

}  // namespace

std::shared_ptr<Tokenizer> Tokenizer::from_gguf(const std::string& path) {
  const GGUFModelFiles files =
      open_gguf_model(path);  // a split model's metadata is in its first shard
  const GGUFFile& g = files.metadata();
  std::string model = g.get_string("tokenizer.ggml.model");
  if (model.empty())
    throw ModelError(path + ": no tokenizer in this GGUF (tokenizer.ggml.model is missing)");
  std::string arch = g.get_string("general.architecture");
  TokenizerSpec spec;
  std::vector<std::string> tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (tokens.empty()) throw ModelError(path + ": tokenizer.ggml.tokens is missing or empty");
  std::vector<int64_t> types = g.get_int_array("tokenizer.ggml.token_type");
  std::vector<std::string> merges = g.get_string_array("tokenizer.ggml.merges");
  bool byte_level = model == "gpt2";
  bool add_bos = false;

  if (byte_level) {
    spec.model = TokenizerSpec::Model::BYTE_LEVEL_BPE;
    std::string pre = g.get_string("tokenizer.ggml.pre");
    if (unsupported_pre_names().count(pre))
      throw ModelError(path + ": unsupported GGUF pre-tokenizer '" + pre + "'");
    PreTokenizerStep step;
    step.pattern = llama3_pre_names().count(pre)  ? SplitPattern::LLAMA3
                   : qwen2_pre_names().count(pre) ? SplitPattern::QWEN2
                   : o200k_pre_names().count(pre) ? SplitPattern::O200K
                   : pre == "tekken"              ? SplitPattern::TEKKEN
                   : pre == "qwen35"              ? SplitPattern::QWEN35
                   : bloom_pre_names().count(pre) ? SplitPattern::BLOOM
                                                  : SplitPattern::GPT2;
    spec.pre_tokenizer.push_back(step);
    spec.nfc = pre == "qwen35";
    spec.vocab.reserve(tokens.size());
    for (const auto& t : tokens)
      spec.vocab.push_back(spelled_in_byte_alphabet(t) ? t : byte_level_encode(t));
    spec.ignore_merges = bos_and_ignore_merges(pre);
    add_bos = g.get_bool("tokenizer.ggml.add_bos_token", spec.ignore_merges);
  } else if (model == "llama") {
    // SentencePiece-style BPE. The pipeline around it is not in the file; transformers picks it by
    // architecture, and so does this: Llama 2 / Mistral (Metaspace, prefix on the first segment),
    // Phi-3 (a Prepend normalizer: a prefix on every segment between added tokens) and Gemma (no
    // prefix, space runs respelled, merges in the file's token order).
    const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3" || arch == "gemma3n";
    spec.model = TokenizerSpec::Model::SENTENCEPIECE_BPE;
    spec.vocab = tokens;
    spec.byte_fallback = true;
    spec.fuse_unk = true;
    if (gemma) {
      for (std::string& t : spec.vocab)
        if (size_t n = space_run_length(t)) {
          t.clear();
          for (size_t k = 0; k < n; ++k) t += "\xe2\x96\x81";  // U+2581
        }
      spec.prefix = TokenizerSpec::Prefix::NEVER;
      spec.strip_leading_space = false;
    } else {
      spec.prefix = arch == "phi3" ? TokenizerSpec::Prefix::PREPEND
                    : g.get_bool("tokenizer.ggml.add_space_prefix", true)
                        ? TokenizerSpec::Prefix::FIRST
                        : TokenizerSpec::Prefix::NEVER;
      spec.strip_leading_space = true;
    }
    if (merges.empty()) {
      if (gemma) {
        // Gemma's scores do not follow its merge order; the token order does: a token's score is
        // minus its index (derive_merges_from_scores keeps the last of equal spellings).
        spec.scores.resize(tokens.size());
        for (size_t i = 0; i < spec.scores.size(); ++i) spec.scores[i] = -static_cast<double>(i);
      } else {
        std::vector<double> scores = g.get_float_array("tokenizer.ggml.scores");
        if (scores.size() != tokens.size())
          throw ModelError(path + ": tokenizer.ggml.scores is missing or has the wrong length");
        spec.scores.assign(scores.begin(), scores.end());
      }
    }
    add_bos = g.get_bool("tokenizer.ggml.add_bos_token", true);
  } else if (model == "gemma4") {
    // Gemma 4 (llama.cpp's converter: the tokenizer.json's BPE, tokens as it spells them, its
    // merges): GemmaTokenizer's pipeline, as transformers' GGUF conversion builds it -- spaces as
    // U+2581, no prefix, byte fallback -- and no BOS whatever the file says: the model's own
    // tokenizer adds none, its chat template writes <bos> (llama.cpp forces BOS on; transformers
    // follows the model, and so does this).
    spec.model = TokenizerSpec::Model::SENTENCEPIECE_BPE;
    spec.vocab = tokens;
    spec.byte_fallback = true;
    spec.fuse_unk = true;
    spec.prefix = TokenizerSpec::Prefix::NEVER;
    spec.strip_leading_space = false;
    if (merges.empty()) {  // (as Gemma's: the token order is the merge order)
      spec.scores.resize(tokens.size());
      for (size_t i = 0; i < spec.scores.size(); ++i) spec.scores[i] = -static_cast<double>(i);
    }
    add_bos = false;
  } else {
    throw ModelError(path + ": unsupported GGUF tokenizer model '" + model +
                     "' (supported: gpt2, llama, gemma4)");
  }
  for (const auto& m : merges) {
    size_t sp = m.find(' ');
    if (sp == std::string::npos) throw ModelError(path + ": malformed merge '" + m + "'");
    spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  auto id_key = [&](const char* key) {
    int64_t id = g.get_int(key, -1);
    if (id < -1 || id >= static_cast<int64_t>(tokens.size()))
      throw ModelError(path + ": " + key + " is out of range");
    return static_cast<int32_t>(id);
  };
  spec.bos_id = id_key("tokenizer.ggml.bos_token_id");
  spec.eos_id = id_key("tokenizer.ggml.eos_token_id");
  spec.pad_id = id_key("tokenizer.ggml.padding_token_id");
  if (!byte_level) spec.unk_id = id_key("tokenizer.ggml.unknown_token_id");
  auto add_eos = [&](int64_t id) {
    if (id >= 0 && std::find(spec.eos_ids.begin(), spec.eos_ids.end(), id) == spec.eos_ids.end())
      spec.eos_ids.push_back(static_cast<int32_t>(id));
  };
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"})
    add_eos(id_key(key));
  for (int64_t id : g.get_int_array("tokenizer.ggml.eos_token_ids")) {  // newer files: the list
    if (id < 0 || id >= static_cast<int64_t>(tokens.size()))
      throw ModelError(path + ": tokenizer.ggml.eos_token_ids holds an out-of-range id");
    add_eos(id);
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (end_of_generation_texts().count(tokens[id])) add_eos(static_cast<int64_t>(id));
  // gpt-oss's harmony vocabulary: <|end|> closes each message of a reply (its reasoning, then the
  // answer), <|return|> and <|call|> the reply; so <|end|> does not end generation (llama.cpp's
  // rule).
  const auto find = [&](const char* t) { return std::find(tokens.begin(), tokens.end(), t); };
  if (find("<|return|>") != tokens.end() && find("<|call|>") != tokens.end() &&
      find("<|end|>") != tokens.end()) {
    const auto end = static_cast<int32_t>(find("<|end|>") - tokens.begin());
    spec.eos_ids.erase(std::remove(spec.eos_ids.begin(), spec.eos_ids.end(), end),
                       spec.eos_ids.end());
  }
  if (add_bos && spec.bos_id >= 0) spec.prefix_ids.push_back(spec.bos_id);
  if (g.get_bool("tokenizer.ggml.add_eos_token", false) && spec.eos_id >= 0)
    spec.suffix_ids.push_back(spec.eos_id);

  // A user-defined token is added when its spelling is in the vocabulary (not so for a Gemma
  // space run, which the vocabulary now spells with U+2581), as transformers does.
  std::unordered_set<std::string_view> vocab_set;
  auto in_vocab = [&](const std::string& t) {
    if (vocab_set.empty()) {
      vocab_set.reserve(spec.vocab.size());
      vocab_set.insert(spec.vocab.begin(), spec.vocab.end());
    }
    return vocab_set.count(t) > 0;
  };
  for (size_t id = 0; id < tokens.size() && id < types.size(); ++id) {
    if ((types[id] == 3 || types[id] == 2) &&
        (!byte_level || spelled_in_byte_alphabet(tokens[id]))) {
      AddedTokenSpec t;
      t.id = static_cast<int32_t>(id);
      t.content = tokens[id];
      t.special = true;
      spec.added_tokens.push_back(t);
    } else if (types[id] == 4 && (!byte_level || spelled_in_byte_alphabet(tokens[id])) &&
               (spec.vocab[id] == tokens[id] || in_vocab(tokens[id]))) {
      AddedTokenSpec t;
      t.id = static_cast<int32_t>(id);
      t.content = tokens[id];
      t.special = false;
      spec.added_tokens.push_back(t);
    }
  }
  // Phi-3's added tokens take the white space after them (rstrip in its tokenizer.json); a GGUF
  // file does not say so, and llama.cpp keys it on the model's name, as this does: every added
  // token but <unk>, <s> and <|endoftext|>, when general.name holds "phi-3" or "phi3" (ASCII case
  // ignored).
  std::string name = g.get_string("general.name");
  std::transform(name.begin(), name.end(), name.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos)
    for (AddedTokenSpec& t : spec.added_tokens)
      t.rstrip = t.content != "<unk>" && t.content != "<s>" && t.content != "<|endoftext|>";
  try {
    return std::make_shared<Tokenizer>(std::move(spec));
  } catch (const ModelError& e) {
    throw ModelError(path + ": tokenizer.ggml.tokens/merges: " + e.what());
  }
}

}  // namespace ossa
