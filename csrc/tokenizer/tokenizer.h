#pragma once
// The tokenizer: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) and SentencePiece-style BPE with
// byte fallback (Llama 2, Mistral), with added/special tokens, built from a TokenizerSpec (which
// Python fills from a tokenizer.json, or from_gguf fills from GGUF metadata). Ids are identical to
// Hugging Face `tokenizers` for the components the spec can express; anything else is rejected when
// the spec is built, naming the component.
//
// Encoding:  text -> split out added tokens -> per remaining segment: [metaspace: ' ' -> U+2581,
//            prefix] -> pre-tokenizer pieces -> BPE per piece (word cache) -> ids (+ prefix/suffix
//            ids)
// Decoding:  ids -> token bytes (byte-level alphabet undone, U+2581 -> ' ', <0xXX> -> byte) ->
// UTF-8
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace ossa {

struct AddedTokenSpec {
  int32_t id = 0;
  std::string content;
  bool special = true;
  bool lstrip = false, rstrip = false, normalized = false, single_word = false;
};

struct TokenizerSpec {
  enum class Model { BYTE_LEVEL_BPE, SENTENCEPIECE_BPE };
  // How a SentencePiece-style model puts U+2581 before a segment (spaces become U+2581 in all
  // cases): FIRST/ALWAYS are Metaspace's prepend_scheme (only if the segment does not already start
  // with U+2581; FIRST only for the segment at the start of the text), PREPEND is the Prepend
  // normalizer (always), NEVER adds nothing.
  enum class Prefix { NEVER, FIRST, ALWAYS, PREPEND };

  Model model = Model::BYTE_LEVEL_BPE;
  std::vector<std::string> vocab;  // id -> token as the file spells it ("" for an unused id)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // SentencePiece-style files without merges (llama GGUF): merges are derived from the scores.
  std::vector<float> scores;
  std::vector<AddedTokenSpec> added_tokens;

  std::vector<PreTokenizerStep> pre_tokenizer;
  bool add_prefix_space = false;  // byte-level: a space before a segment not starting with one
  Prefix prefix = Prefix::NEVER;  // SentencePiece-style
  bool metaspace_split = false;   // split before every U+2581

  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  // The NFC normalizer (tokenizer/normalize.h): applied to the text between raw added tokens,
  // before normalized added tokens are split out and before the pre-tokenizer.
  bool nfc = false;
  int32_t unk_id = -1;

  std::vector<int32_t> prefix_ids, suffix_ids;  // added when add_special_tokens is set
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::vector<int32_t> eos_ids;  // ids that end generation (eos_id first)

  // Decoder: remove one leading space from the decoded text (SentencePiece's Strip / Metaspace).
  bool strip_leading_space = false;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);
  // From a GGUF file's tokenizer.ggml.* metadata, following transformers' GGUF conversion (so ids
  // match AutoTokenizer.from_pretrained(dir, gguf_file=...)). See tokenizer_gguf.cpp for the rules.
  static std::shared_ptr<Tokenizer> from_gguf(const std::string& path);

  // utf8 must be valid UTF-8 (InputError otherwise). Thread-safe.
  std::vector<int32_t> encode(std::string_view utf8, bool add_special_tokens) const;
  void encode_into(std::string_view utf8, bool add_special_tokens, std::vector<int32_t>& out) const;
  // Unknown ids decode to nothing (as in tokenizers); invalid UTF-8 becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  // The bytes a token stands for in decoded output (before the leading-space strip); byte-fallback
  // tokens give their single byte. Empty for an unknown id.
  const std::string& token_bytes(int32_t id) const;
  // The token as the vocabulary spells it.
  const std::string& token_string(int32_t id) const;
  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  int vocab_size() const { return static_cast<int>(token_bytes_.size()); }
  bool is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && is_special_[static_cast<size_t>(id)];
  }
  // True for <0xXX> tokens of a byte-fallback vocabulary (their runs decode as a unit).
  bool is_byte_token(int32_t id) const {
    return id >= 0 && id < vocab_size() && is_byte_token_[static_cast<size_t>(id)];
  }
  bool strip_leading_space() const { return spec_.strip_leading_space; }

  const TokenizerSpec& spec() const { return spec_; }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t pad_id() const { return spec_.pad_id; }
  const std::vector<int32_t>& eos_ids() const { return spec_.eos_ids; }
  bool is_eos(int32_t id) const;

 private:
  struct AddedMatch {
    size_t start, end;
    int32_t id;
  };
  struct Trie;
  void split_added(std::string_view text, bool normalized_pass, std::vector<AddedMatch>& out) const;
  void encode_segment(std::string_view segment, bool at_text_start,
                      std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_piece(std::string_view piece, std::vector<int32_t>& out) const;

  TokenizerSpec spec_;
  uint64_t instance_id_ = 0;  // keys the per-thread word cache
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> is_special_, is_byte_token_;
  StringIdMap vocab_;    // BPE key space: raw bytes (byte-level) or U+2581 pieces
  StringIdMap spelled_;  // token as spelled -> id (model vocab and added tokens)
  MergeTable merges_;
  int32_t byte_ids_[256];  // byte-level: id of each byte; SentencePiece: id of <0xXX> or -1
  std::shared_ptr<Trie> trie_raw_, trie_normalized_;
  std::vector<AddedTokenSpec> added_by_index_;
};

}  // namespace ossa
