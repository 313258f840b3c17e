#include "tokenizer/sentencepiece.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "util/error.h"

namespace ossa {

std::vector<std::pair<std::string, std::string>> derive_merges_from_scores(
    const std::vector<std::string>& vocab, const std::vector<float>& scores) {
  if (scores.size() != vocab.size())
    throw ModelError("tokenizer scores and tokens differ in length");
  // Python dict semantics: a repeated token keeps its first position but its last id and score.
  // Keys and merge parts are views into vocab (no copies until the result is built).
  struct Entry {
    size_t id;
    float score;
  };
  std::unordered_map<std::string_view, Entry> of;
  of.reserve(vocab.size());
  std::vector<const std::string*> order;
  order.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    auto [it, fresh] = of.try_emplace(vocab[i], Entry{i, scores[i]});
    if (fresh)
      order.push_back(&vocab[i]);
    else
      it->second = Entry{i, scores[i]};
  }
  struct Merge {
    size_t left_id, right_id;
    float score;
    size_t left_len, right_len, seq;
    std::string_view left, right;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (const std::string* token : order) {
    local.clear();
    const std::string_view t = *token;
    const float score = of.find(t)->second.score;
    size_t cps_before = 0;
    size_t total_cps = 0;
    for (unsigned char c : t) total_cps += (c & 0xC0) != 0x80;
    for (size_t i = 1; i < t.size(); ++i) {
      if ((static_cast<unsigned char>(t[i - 1]) & 0xC0) != 0x80) ++cps_before;
      if ((static_cast<unsigned char>(t[i]) & 0xC0) == 0x80)
        continue;  // split only between code points
      const std::string_view left = t.substr(0, i), right = t.substr(i);
      auto l = of.find(left);
      if (l == of.end()) continue;
      auto r = of.find(right);
      if (r == of.end()) continue;
      local.push_back(Merge{l->second.id, r->second.id, score, cps_before, total_cps - cps_before,
                            0, left, right});
    }
    std::stable_sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left_id != b.left_id ? a.left_id < b.left_id : a.right_id < b.right_id;
    });
    for (auto& m : local) {
      m.seq = merges.size();
      merges.push_back(std::move(m));
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_len != b.left_len) return a.left_len > b.left_len;
    return a.right_len > b.right_len;
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const auto& m : merges) out.emplace_back(std::string(m.left), std::string(m.right));
  return out;
}

}  // namespace ossa
