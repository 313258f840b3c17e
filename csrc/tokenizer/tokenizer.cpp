#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalize.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ossa {

namespace {

constexpr std::string_view k_metaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// "<0xHH>" -> the byte, or -1.
int parse_byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Per-thread word cache: piece -> ids, one per tokenizer instance (keyed by instance id, since an
// address can be reused after a tokenizer is freed). Bounded: cleared when full.
struct WordCache {
  StringIdMap index;  // piece -> offset into ids; the entry at that offset is the length
  std::vector<int32_t> ids;
};
constexpr size_t k_cache_entries_max = 1 << 17;
constexpr size_t k_cache_piece_max = 64;

WordCache& word_cache(uint64_t instance) {
  thread_local std::unordered_map<uint64_t, WordCache> caches;
  if (caches.size() > 8 && !caches.count(instance)) caches.clear();
  return caches[instance];
}

std::atomic<uint64_t> g_next_instance{1};

bool is_white_space_at(std::string_view s, size_t i, int& len) {
  uint32_t cp;
  len = utf8_decode(reinterpret_cast<const unsigned char*>(s.data()) + i, cp);
  return (unicode_flags(cp) & k_white_space) != 0;
}

// Start of the last code point before end.
size_t prev_cp_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// \w as Rust's regex has it, approximately: letters, marks, numbers and '_' (single_word tokens).
bool is_word_cp(std::string_view s, size_t i) {
  uint32_t cp;
  utf8_decode(reinterpret_cast<const unsigned char*>(s.data()) + i, cp);
  return cp == '_' || (unicode_flags(cp) & (k_letter | k_number | k_mark)) != 0;
}

}  // namespace

// Added-token matcher: a byte trie, searched leftmost-longest like tokenizers' Aho-Corasick.
struct Tokenizer::Trie {
  struct Node {
    std::map<unsigned char, int32_t> next;
    int32_t token = -1;  // index into added_by_index_
  };
  std::vector<Node> nodes{1};
  bool first_byte[256] = {};
  bool empty() const { return nodes.size() == 1; }
  void add(std::string_view s, int32_t token) {
    if (s.empty()) return;
    int32_t at = 0;
    for (unsigned char c : s) {
      auto it = nodes[at].next.find(c);
      if (it == nodes[at].next.end()) {
        nodes.push_back(Node{});
        int32_t child = static_cast<int32_t>(nodes.size() - 1);
        nodes[at].next.emplace(c, child);
        at = child;
      } else {
        at = it->second;
      }
    }
    if (nodes[at].token < 0) nodes[at].token = token;
    first_byte[static_cast<unsigned char>(s[0])] = true;
  }
  // Longest token starting at i: (length, token) or (0, -1).
  std::pair<size_t, int32_t> longest(std::string_view s, size_t i) const {
    std::pair<size_t, int32_t> best{0, -1};
    int32_t at = 0;
    for (size_t k = i; k < s.size(); ++k) {
      auto it = nodes[at].next.find(static_cast<unsigned char>(s[k]));
      if (it == nodes[at].next.end()) break;
      at = it->second;
      if (nodes[at].token >= 0) best = {k + 1 - i, nodes[at].token};
    }
    return best;
  }
};

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  instance_id_ = g_next_instance.fetch_add(1);
  size_t n = spec_.vocab.size();
  for (const auto& t : spec_.added_tokens) {
    if (t.id < 0) throw ModelError("added token '" + t.content + "' has a negative id");
    n = std::max(n, static_cast<size_t>(t.id) + 1);
  }
  const bool byte_level = spec_.model == TokenizerSpec::Model::BYTE_LEVEL_BPE;
  token_bytes_.assign(n, std::string());
  is_special_.assign(n, 0);
  is_byte_token_.assign(n, 0);
  std::vector<std::string> spelled(n);
  for (size_t id = 0; id < spec_.vocab.size(); ++id) spelled[id] = spec_.vocab[id];
  for (const auto& t : spec_.added_tokens) spelled[t.id] = t.content;

  for (size_t id = 0; id < n; ++id) {
    const std::string& s = spelled[id];
    if (s.empty()) continue;
    if (byte_level) {
      std::string raw;
      token_bytes_[id] = byte_level_decode(s, raw) ? raw : s;
    } else {
      int b = spec_.byte_fallback ? parse_byte_token(s) : -1;
      if (b >= 0) {
        token_bytes_[id] = std::string(1, static_cast<char>(b));
        is_byte_token_[id] = 1;
      } else {
        std::string out;
        for (size_t i = 0; i < s.size();) {
          if (s.compare(i, 3, k_metaspace) == 0) {
            out.push_back(' ');
            i += 3;
          } else {
            out.push_back(s[i++]);
          }
        }
        token_bytes_[id] = out;
      }
    }
  }
  // Model vocabulary in BPE key space.
  StringIdMap model_spelled;
  model_spelled.reserve(spec_.vocab.size() + spec_.added_tokens.size());
  vocab_.reserve(spec_.vocab.size());
  // A spelling listed twice (a GGUF file can do that) means its last id, as in the dict
  // transformers and llama.cpp build from the list.
  for (size_t id = 0; id < spec_.vocab.size(); ++id) {
    const std::string& s = spec_.vocab[id];
    if (s.empty()) continue;
    model_spelled.insert_or_assign(s, static_cast<int32_t>(id));
    if (byte_level) {
      std::string raw;
      if (byte_level_decode(s, raw)) vocab_.insert_or_assign(raw, static_cast<int32_t>(id));
    } else {
      vocab_.insert_or_assign(s, static_cast<int32_t>(id));
    }
  }
  // Merges, by rank.
  auto id_of = [&](const std::string& s, const char* what) {
    auto it = model_spelled.find(s);
    if (it == model_spelled.end())
      throw ModelError(std::string("BPE merge ") + what + " '" + s + "' is not in the vocabulary");
    return it->second;
  };
  std::vector<std::pair<std::string, std::string>> derived;
  const auto* merge_list = &spec_.merges;
  if (spec_.merges.empty() && !byte_level && !spec_.scores.empty()) {
    derived = derive_merges_from_scores(spec_.vocab, spec_.scores);
    merge_list = &derived;
  }
  merges_.reserve(merge_list->size());
  for (size_t r = 0; r < merge_list->size(); ++r) {
    const auto& [a, b] = (*merge_list)[r];
    merges_.insert(id_of(a, "part"), id_of(b, "part"), static_cast<int32_t>(r),
                   id_of(a + b, "result"));
  }
  spelled_ = std::move(model_spelled);  // the merges above name model tokens only
  for (const auto& t : spec_.added_tokens) spelled_[t.content] = t.id;

  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = -1;
    if (byte_level) {
      auto it = vocab_.find(std::string(1, static_cast<char>(b)));
      if (it != vocab_.end()) byte_ids_[b] = it->second;
    } else if (spec_.byte_fallback) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = vocab_.find(std::string_view(name));
      if (it != vocab_.end()) byte_ids_[b] = it->second;
    }
  }

  trie_raw_ = std::make_shared<Trie>();
  trie_normalized_ = std::make_shared<Trie>();
  added_by_index_ = spec_.added_tokens;
  for (size_t i = 0; i < added_by_index_.size(); ++i) {
    const auto& t = added_by_index_[i];
    if (t.special) is_special_[t.id] = 1;
    if (t.normalized && spec_.prefix == TokenizerSpec::Prefix::PREPEND)
      throw ModelError("added token '" + t.content +
                       "' is normalized=true with a Prepend normalizer: unsupported");
    (t.normalized ? *trie_normalized_ : *trie_raw_).add(t.content, static_cast<int32_t>(i));
  }
  auto check_id = [&](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int32_t>(n))
      throw ModelError(std::string(what) + " id " + std::to_string(id) + " is out of range");
  };
  check_id(spec_.bos_id, "bos");
  check_id(spec_.eos_id, "eos");
  check_id(spec_.pad_id, "pad");
  check_id(spec_.unk_id, "unk");
  for (int32_t id : spec_.prefix_ids) check_id(id, "special prefix");
  for (int32_t id : spec_.suffix_ids) check_id(id, "special suffix");
  for (int32_t id : spec_.eos_ids) check_id(id, "eos");
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string empty;
  return id >= 0 && id < vocab_size() ? token_bytes_[id] : empty;
}

const std::string& Tokenizer::token_string(int32_t id) const {
  static const std::string empty;
  if (id < 0) return empty;
  for (const auto& t : added_by_index_)
    if (t.id == id) return t.content;
  return static_cast<size_t>(id) < spec_.vocab.size() ? spec_.vocab[id] : empty;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = spelled_.find(token);
  return it == spelled_.end() ? -1 : it->second;
}

bool Tokenizer::is_eos(int32_t id) const {
  return std::find(spec_.eos_ids.begin(), spec_.eos_ids.end(), id) != spec_.eos_ids.end();
}

void Tokenizer::split_added(std::string_view text, bool normalized_pass,
                            std::vector<AddedMatch>& out) const {
  const Trie& trie = normalized_pass ? *trie_normalized_ : *trie_raw_;
  if (trie.empty()) return;
  size_t start_offset = 0, i = 0;
  while (i < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    auto [len, index] = trie.longest(text, i);
    if (len == 0) {
      ++i;
      continue;
    }
    const AddedTokenSpec& t = added_by_index_[index];
    size_t start = i, stop = i + len;
    i = stop;  // matches do not overlap: the search resumes after this one
    if (t.single_word) {
      bool left_ok = start == 0 || !is_word_cp(text, prev_cp_start(text, start));
      bool right_ok = stop == text.size() || !is_word_cp(text, stop);
      if (!left_ok || !right_ok) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      int len_cp;
      while (s > start_offset) {
        size_t p = prev_cp_start(text, s);
        if (!is_white_space_at(text, p, len_cp)) break;
        s = p;
      }
      start = s;
    }
    if (t.rstrip) {
      int len_cp;
      while (stop < text.size() && is_white_space_at(text, stop, len_cp)) stop += len_cp;
      i = stop;
    }
    out.push_back(AddedMatch{start, stop, t.id});
    start_offset = stop;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view utf8, bool add_special_tokens) const {
  std::vector<int32_t> out;
  encode_into(utf8, add_special_tokens, out);
  return out;
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens,
                            std::vector<int32_t>& out) const {
  size_t valid = utf8_valid_prefix(text);
  if (valid != text.size())
    throw InputError("text is not valid UTF-8 (first bad byte at offset " + std::to_string(valid) +
                     ")");
  if (add_special_tokens) out.insert(out.end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
  std::vector<AddedMatch> raw, normalized;
  split_added(text, false, raw);
  size_t pos = 0;
  auto encode_gap = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    std::string_view gap = text.substr(begin, end - begin);
    std::string composed;
    if (spec_.nfc && !nfc_trivially_stable(gap)) {
      composed = nfc(gap);
      gap = composed;
    }
    normalized.clear();
    split_added(gap, true, normalized);
    size_t p = 0;
    for (const auto& m : normalized) {
      if (p < m.start) encode_segment(gap.substr(p, m.start - p), begin + p == 0, out);
      out.push_back(m.id);
      p = m.end;
    }
    if (p < gap.size()) encode_segment(gap.substr(p), begin + p == 0, out);
  };
  for (const auto& m : raw) {
    encode_gap(pos, m.start);
    out.push_back(m.id);
    pos = m.end;
  }
  encode_gap(pos, text.size());
  if (add_special_tokens) out.insert(out.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
}

void Tokenizer::encode_segment(std::string_view segment, bool at_text_start,
                               std::vector<int32_t>& out) const {
  thread_local std::vector<std::string_view> pieces;
  if (spec_.model == TokenizerSpec::Model::BYTE_LEVEL_BPE) {
    std::string prefixed;
    if (spec_.add_prefix_space && segment[0] != ' ') {
      prefixed = " ";
      prefixed.append(segment);
      segment = prefixed;
    }
    pieces.clear();
    pre_tokenize(spec_.pre_tokenizer, segment, pieces);
    for (std::string_view piece : pieces) encode_piece(piece, out);
    return;
  }
  // SentencePiece-style: spaces become U+2581, then the prefix rule.
  std::string normalized;
  normalized.reserve(segment.size() + 8);
  for (char c : segment) {
    if (c == ' ')
      normalized.append(k_metaspace);
    else
      normalized.push_back(c);
  }
  bool starts_with_metaspace = normalized.compare(0, 3, k_metaspace) == 0;
  bool prepend =
      spec_.prefix == TokenizerSpec::Prefix::PREPEND ||
      (spec_.prefix == TokenizerSpec::Prefix::ALWAYS && !starts_with_metaspace) ||
      (spec_.prefix == TokenizerSpec::Prefix::FIRST && !starts_with_metaspace && at_text_start);
  if (prepend) normalized.insert(0, k_metaspace);
  std::string_view text = normalized;
  if (!spec_.metaspace_split) {
    encode_piece(text, out);
    return;
  }
  size_t start = 0;
  for (size_t i = 1; i + 3 <= text.size(); ++i) {
    if (text.compare(i, 3, k_metaspace) == 0) {
      encode_piece(text.substr(start, i - start), out);
      start = i;
      i += 2;
    }
  }
  encode_piece(text.substr(start), out);
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (spec_.ignore_merges) {
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > k_cache_piece_max) {
    bpe_piece(piece, out);
    return;
  }
  WordCache& cache = word_cache(instance_id_);
  auto it = cache.index.find(piece);
  if (it != cache.index.end()) {
    const int32_t* p = cache.ids.data() + it->second;
    out.insert(out.end(), p + 1, p + 1 + p[0]);
    return;
  }
  size_t before = out.size();
  bpe_piece(piece, out);
  if (cache.index.size() >= k_cache_entries_max) {
    cache.index.clear();
    cache.ids.clear();
  }
  cache.index.emplace(std::string(piece), static_cast<int32_t>(cache.ids.size()));
  cache.ids.push_back(static_cast<int32_t>(out.size() - before));
  cache.ids.insert(cache.ids.end(), out.begin() + before, out.end());
}

void Tokenizer::bpe_piece(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  bool last_unk = false;
  auto push_unk = [&]() {
    if (spec_.unk_id < 0) return;  // no unk token: the symbol is dropped, as in tokenizers
    if (!(spec_.fuse_unk && last_unk)) symbols.push_back(spec_.unk_id);
    last_unk = true;
  };
  if (spec_.model == TokenizerSpec::Model::BYTE_LEVEL_BPE) {
    for (unsigned char b : piece) {
      int32_t id = byte_ids_[b];
      if (id < 0) {
        push_unk();
      } else {
        symbols.push_back(id);
        last_unk = false;
      }
    }
  } else {
    auto p = reinterpret_cast<const unsigned char*>(piece.data());
    for (size_t i = 0; i < piece.size();) {
      uint32_t cp;
      int len = utf8_decode(p + i, cp);
      auto it = vocab_.find(piece.substr(i, len));
      if (it != vocab_.end()) {
        symbols.push_back(it->second);
        last_unk = false;
      } else {
        bool all_bytes = spec_.byte_fallback;
        for (int k = 0; k < len && all_bytes; ++k) all_bytes = byte_ids_[p[i + k]] >= 0;
        if (all_bytes) {
          for (int k = 0; k < len; ++k) symbols.push_back(byte_ids_[p[i + k]]);
          last_unk = false;
        } else {
          push_unk();
        }
      }
      i += len;
    }
  }
  bpe_merge(merges_, symbols, out);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  std::string run;  // pending byte-fallback bytes, decoded as a unit
  auto flush_run = [&]() {
    if (run.empty()) return;
    if (utf8_valid_prefix(run) == run.size()) {
      bytes += run;
    } else {
      for (size_t k = 0; k < run.size(); ++k) bytes += "\xEF\xBF\xBD";
    }
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && is_special_[id]) continue;
    if (is_byte_token_[id]) {
      run += token_bytes_[id];
      continue;
    }
    flush_run();
    bytes += token_bytes_[id];
  }
  flush_run();
  std::string text = utf8_lossy(bytes);
  if (spec_.strip_leading_space && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace ossa
