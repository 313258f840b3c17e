#include "tokenizer/pretokenizer.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace ossa {
namespace {

constexpr const char* k_gpt2_regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* k_llama3_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* k_qwen2_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5: Qwen2's with combining marks (\p{M}) in the letter runs and out of the punctuation runs.
constexpr const char* k_qwen35_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k (tiktoken's o200k_base, Phi-4-mini): letter runs split by case, contractions as suffixes.
constexpr const char* k_o200k_regex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Tekken (Mistral NeMo, Ministral, Mistral Small 3): o200k's letter branches without the
// contraction suffixes, and digits one at a time.
constexpr const char* k_tekken_regex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// BLOOM (and llama.cpp's "bloom", "poro-chat", "gpt3-finnish"): an optional space and a run of
// anything but white space and ( | ) . , ! ? … 。 ， 、 । ۔ ، -- the text between matches kept as
// pieces of its own (Split's Isolated behaviour). tokenizer.json nests the punctuation in a class
// of its own; llama.cpp writes it flat (the same set).
constexpr const char* k_bloom_regex = R"( ?[^(\s|[.,!?…。，、।۔،])]+)";
constexpr const char* k_bloom_flat_regex = R"( ?[^(\s|.,!?…。，、।۔،)]+)";

// The text decoded once: code points, their flags and byte offsets (offset[n] = text size).
struct Decoded {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> flags;
  std::vector<uint32_t> offset;
  void decode(std::string_view text) {
    cp.clear();
    flags.clear();
    offset.clear();
    auto p = reinterpret_cast<const unsigned char*>(text.data());
    size_t i = 0;
    while (i < text.size()) {
      uint32_t c;
      int len = utf8_decode(p + i, c);
      cp.push_back(c);
      flags.push_back(unicode_flags(c));
      offset.push_back(static_cast<uint32_t>(i));
      i += len;
    }
    offset.push_back(static_cast<uint32_t>(text.size()));
  }
};

bool is_other(uint8_t f) { return (f & (k_letter | k_number | k_white_space)) == 0; }
bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

// Case-insensitive letter match as Unicode simple case folding does it for the contraction letters:
// only 's' has an extra fold (U+017F LATIN SMALL LETTER LONG S).
bool ci_eq(uint32_t c, char lower) {
  if (c == static_cast<uint32_t>(lower) || c == static_cast<uint32_t>(lower - 'a' + 'A'))
    return true;
  return lower == 's' && c == 0x17F;
}

// Length (in code points) of a contraction match at i, or 0.
size_t match_contraction(const Decoded& d, size_t i, size_t n, bool ignore_case) {
  if (d.cp[i] != '\'' || i + 1 >= n) return 0;
  auto eq = [&](size_t k, char lower) {
    return k < n && (ignore_case ? ci_eq(d.cp[k], lower) : d.cp[k] == static_cast<uint32_t>(lower));
  };
  // 's|'t|'re|'ve|'m|'ll|'d: the letters after the quote are all distinct, so order does not
  // matter.
  if (eq(i + 1, 's') || eq(i + 1, 't') || eq(i + 1, 'm') || eq(i + 1, 'd')) return 2;
  if ((eq(i + 1, 'r') || eq(i + 1, 'v')) && eq(i + 2, 'e')) return 3;
  if (eq(i + 1, 'l') && eq(i + 2, 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a white-space code point: the run, less its last code point when a non-space
// follows and the run is longer than one.
size_t match_space_run(const Decoded& d, size_t i, size_t n) {
  size_t k = i;
  while (k < n && (d.flags[k] & k_white_space)) ++k;
  if (k < n && k - i >= 2) return k - 1 - i;
  return k - i;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at a white-space code point (Llama 3's and o200k's patterns): up to and
// including the last CR/LF of the run when it holds one, else match_space_run.
size_t match_space_lines(const Decoded& d, size_t i, size_t n) {
  size_t k = i, last_crlf = n;
  while (k < n && (d.flags[k] & k_white_space)) {
    if (is_crlf(d.cp[k])) last_crlf = k;
    ++k;
  }
  if (last_crlf != n) return last_crlf + 1 - i;
  return match_space_run(d, i, n);
}

// One match of the GPT-2 pattern at i; returns its length in code points (>= 1).
size_t match_gpt2(const Decoded& d, size_t i, size_t n) {
  if (size_t m = match_contraction(d, i, n, false)) return m;
  size_t j = d.cp[i] == ' ' ? i + 1 : i;
  if (j < n) {
    uint8_t f = d.flags[j];
    auto run = [&](auto pred) {
      size_t k = j;
      while (k < n && pred(d.flags[k])) ++k;
      return k - i;
    };
    if (f & k_letter) return run([](uint8_t g) { return (g & k_letter) != 0; });
    if (f & k_number) return run([](uint8_t g) { return (g & k_number) != 0; });
    if (is_other(f)) return run(is_other);
  }
  if (d.flags[i] & k_white_space) return match_space_run(d, i, n);
  return 1;  // unreachable: every code point is a letter, number, space or other
}

// One match of the Llama 3 (max_digits = 3) or Qwen2 (max_digits = 1) pattern at i; with marks
// (Qwen3.5), combining marks count as letters in the letter runs and leave the punctuation runs.
size_t match_llama3(const Decoded& d, size_t i, size_t n, size_t max_digits, bool marks = false) {
  if (size_t m = match_contraction(d, i, n, true)) return m;
  uint8_t f = d.flags[i];
  const uint8_t word = marks ? k_letter | k_mark : k_letter;
  // [^\r\n\p{L}\p{N}]?\p{L}+ (Qwen3.5: [\p{L}\p{M}]+, and a mark that fails as the lead starts
  // the run itself when the regex backtracks)
  {
    size_t j = i;
    if (!is_crlf(d.cp[i]) && !(f & (k_letter | k_number))) j = i + 1;
    if (!(j < n && (d.flags[j] & word)) && (f & word)) j = i;
    if (j < n && (d.flags[j] & word)) {
      size_t k = j;
      while (k < n && (d.flags[k] & word)) ++k;
      return k - i;
    }
  }
  // \p{N}{1,max_digits}
  if (f & k_number) {
    size_t k = i;
    while (k < n && k - i < max_digits && (d.flags[k] & k_number)) ++k;
    return k - i;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]* (Qwen3.5: [^\s\p{L}\p{M}\p{N}])
  {
    auto other = [marks](uint8_t g) { return is_other(g) && !(marks && (g & k_mark)); };
    size_t j = d.cp[i] == ' ' ? i + 1 : i;
    if (j < n && other(d.flags[j])) {
      size_t k = j;
      while (k < n && other(d.flags[k])) ++k;
      while (k < n && is_crlf(d.cp[k])) ++k;
      return k - i;
    }
  }
  if (f & k_white_space) return match_space_lines(d, i, n);
  return 1;
}

// The o200k pattern's classes: "upper" [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], "lower"
// [\p{Ll}\p{Lm}\p{Lo}\p{M}] (they share Lm, Lo and marks), and the optional lead [^\r\n\p{L}\p{N}].
bool is_upper_class(uint8_t f) { return ((f & k_letter) && !(f & k_lower)) || (f & k_mark); }
bool is_lower_class(uint8_t f) { return ((f & k_letter) && !(f & k_upper)) || (f & k_mark); }
bool is_lead(const Decoded& d, size_t i) {
  return !is_crlf(d.cp[i]) && !(d.flags[i] & (k_letter | k_number));
}

// One match of the o200k pattern (contractions = true, max_digits = 3) or the Tekken pattern
// (false, 1) at i, following the regex's backtracking: each letter branch tries with the optional
// lead, then without; lead? upper* lower+ gives back upper-class code points (from the right) until
// a lower-class one follows.
size_t match_o200k(const Decoded& d, size_t i, size_t n, bool contractions, size_t max_digits) {
  auto run = [&](size_t k, bool (*cls)(uint8_t)) {
    while (k < n && cls(d.flags[k])) ++k;
    return k;
  };
  auto suffix = [&](size_t k) {
    return contractions && k < n ? k + match_contraction(d, k, n, true) : k;
  };
  const size_t starts[2] = {i + 1, i};                  // with the lead, then without
  for (size_t s = is_lead(d, i) ? 0 : 1; s < 2; ++s) {  // [lead]? upper* lower+ contraction?
    const size_t j = starts[s];
    for (size_t k = run(j, is_upper_class) + 1; k-- > j;)
      if (k < n && is_lower_class(d.flags[k])) return suffix(run(k, is_lower_class)) - i;
  }
  for (size_t s = is_lead(d, i) ? 0 : 1; s < 2; ++s) {  // [lead]? upper+ lower* contraction?
    const size_t j = starts[s];
    if (j < n && is_upper_class(d.flags[j]))
      return suffix(run(run(j, is_upper_class), is_lower_class)) - i;
  }
  const uint8_t f = d.flags[i];
  if (f & k_number) {  // \p{N}{1,3} (o200k) or \p{N} (Tekken)
    size_t k = i;
    while (k < n && k - i < max_digits && (d.flags[k] & k_number)) ++k;
    return k - i;
  }
  {  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
    size_t j = d.cp[i] == ' ' ? i + 1 : i;
    if (j < n && is_other(d.flags[j])) {
      size_t k = run(j, is_other);
      while (k < n && (is_crlf(d.cp[k]) || d.cp[k] == '/')) ++k;
      return k - i;
    }
  }
  if (f & k_white_space) return match_space_lines(d, i, n);  // as in Llama 3's pattern
  return 1;
}

// BLOOM's pattern at i: its length, or 0 where nothing matches there.
bool bloom_char(const Decoded& d, size_t i) {
  const uint32_t c = d.cp[i];
  if (d.flags[i] & k_white_space) return false;
  switch (c) {
    case '(':
    case '|':
    case ')':
    case '.':
    case ',':
    case '!':
    case '?':
    case 0x2026:
    case 0x3002:
    case 0xFF0C:
    case 0x3001:
    case 0x0964:
    case 0x06D4:
    case 0x060C:
      return false;
    default:
      return true;
  }
}
size_t match_bloom(const Decoded& d, size_t i, size_t n) {
  size_t j = i + (d.cp[i] == ' ' && i + 1 < n && bloom_char(d, i + 1) ? 1 : 0);
  if (!bloom_char(d, j)) return 0;
  while (j < n && bloom_char(d, j)) ++j;
  return j - i;
}

thread_local Decoded t_decoded;

}  // namespace

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == k_gpt2_regex) return SplitPattern::GPT2;
  if (regex == k_llama3_regex) return SplitPattern::LLAMA3;
  if (regex == k_qwen2_regex) return SplitPattern::QWEN2;
  if (regex == k_o200k_regex) return SplitPattern::O200K;
  if (regex == k_tekken_regex) return SplitPattern::TEKKEN;
  if (regex == k_qwen35_regex) return SplitPattern::QWEN35;
  if (regex == k_bloom_regex || regex == k_bloom_flat_regex) return SplitPattern::BLOOM;
  return std::nullopt;
}

const char* split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::GPT2:
      return k_gpt2_regex;
    case SplitPattern::LLAMA3:
      return k_llama3_regex;
    case SplitPattern::QWEN2:
      return k_qwen2_regex;
    case SplitPattern::O200K:
      return k_o200k_regex;
    case SplitPattern::TEKKEN:
      return k_tekken_regex;
    case SplitPattern::QWEN35:
      return k_qwen35_regex;
    case SplitPattern::BLOOM:
      return k_bloom_regex;
  }
  return "";
}

void split_regex(SplitPattern pattern, std::string_view text, std::vector<std::string_view>& out) {
  Decoded& d = t_decoded;
  d.decode(text);
  size_t n = d.cp.size(), i = 0, gap = 0;  // (gap: where the text no match took begins)
  auto piece = [&](size_t a, size_t b) {
    out.push_back(text.substr(d.offset[a], d.offset[b] - d.offset[a]));
  };
  while (i < n) {
    size_t m = pattern == SplitPattern::GPT2     ? match_gpt2(d, i, n)
               : pattern == SplitPattern::LLAMA3 ? match_llama3(d, i, n, 3)
               : pattern == SplitPattern::O200K  ? match_o200k(d, i, n, true, 3)
               : pattern == SplitPattern::TEKKEN ? match_o200k(d, i, n, false, 1)
               : pattern == SplitPattern::QWEN35 ? match_llama3(d, i, n, 1, true)
               : pattern == SplitPattern::BLOOM  ? match_bloom(d, i, n)
                                                 : match_llama3(d, i, n, 1);
    if (m == 0) {  // (BLOOM: a character no match starts at joins the text between matches)
      ++i;
      continue;
    }
    if (gap < i) piece(gap, i);
    piece(i, i + m);
    i += m;
    gap = i;
  }
  if (gap < n) piece(gap, n);
}

void split_digits(bool individual, std::string_view text, std::vector<std::string_view>& out) {
  auto p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, start = 0;
  bool in_digits = false;
  while (i < text.size()) {
    uint32_t c;
    int len = utf8_decode(p + i, c);
    bool digit = (unicode_flags(c) & k_number) != 0;
    if (digit && individual) {
      if (start < i) out.push_back(text.substr(start, i - start));
      out.push_back(text.substr(i, len));
      start = i + len;
    } else if (!individual && digit != in_digits) {
      if (start < i) out.push_back(text.substr(start, i - start));
      start = i;
    }
    in_digits = digit;
    i += len;
  }
  if (start < text.size()) out.push_back(text.substr(start));
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view text,
                  std::vector<std::string_view>& out) {
  if (text.empty()) return;
  if (steps.empty()) {
    out.push_back(text);
    return;
  }
  thread_local std::vector<std::string_view> current, next;
  current.assign(1, text);
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<std::string_view>& dst = s + 1 == steps.size() ? out : next;
    if (&dst == &next) next.clear();
    for (std::string_view piece : current) {
      if (steps[s].kind == PreTokenizerStep::REGEX)
        split_regex(steps[s].pattern, piece, dst);
      else
        split_digits(steps[s].kind == PreTokenizerStep::DIGITS_INDIVIDUAL, piece, dst);
    }
    if (&dst == &next) current.swap(next);
  }
}

}  // namespace ossa
