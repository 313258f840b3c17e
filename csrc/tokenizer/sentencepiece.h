#pragma once
// SentencePiece-style vocabularies that carry scores instead of merges (a llama-type GGUF).
#include <string>
#include <utility>
#include <vector>

namespace ossa {

// The merges a scored vocabulary implies, in rank order, exactly as transformers' generate_merges
// derives them (so ids match its GGUF conversion): every split of a token into two vocabulary
// tokens is a merge; merges are ordered by the token's score (descending), then by the length in
// code points of the left and then the right part (descending), ties kept in vocabulary order with
// the splits of one token ordered by (left id, right id).
std::vector<std::pair<std::string, std::string>> derive_merges_from_scores(
    const std::vector<std::string>& vocab, const std::vector<float>& scores);

}  // namespace ossa
