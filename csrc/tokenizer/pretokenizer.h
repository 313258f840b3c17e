#pragma once
// Pre-tokenization: splitting text into the pieces BPE runs on. The split regexes of GPT-2, Llama
// 3, Qwen2, o200k (Phi-4-mini) and Tekken (Mistral NeMo) are run by hand-written matchers that
// follow the regex's alternation order and backtracking exactly (there is no general regex engine);
// an unknown regex is rejected by name.
#include <optional>
#include <string_view>
#include <vector>

namespace ossa {

enum class SplitPattern { GPT2, LLAMA3, QWEN2, O200K, TEKKEN, QWEN35, BLOOM };

// The pattern a regex string (as written in tokenizer.json) denotes, or nullopt.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);
const char* split_pattern_regex(SplitPattern pattern);

struct PreTokenizerStep {
  enum Kind { REGEX, DIGITS_INDIVIDUAL, DIGITS_CONTIGUOUS };
  Kind kind = REGEX;
  SplitPattern pattern = SplitPattern::GPT2;  // for REGEX
};

// Splits valid UTF-8 text with each step in turn (each step splits the previous step's pieces, as
// Hugging Face's Sequence pre-tokenizer does) and appends the non-empty pieces to out.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view text,
                  std::vector<std::string_view>& out);

// One step over one piece.
void split_regex(SplitPattern pattern, std::string_view text, std::vector<std::string_view>& out);
void split_digits(bool individual, std::string_view text, std::vector<std::string_view>& out);

}  // namespace ossa
