#include "engine/logits_plan.h"

#include <algorithm>

namespace ossa {

void LogitsPlan::plan(const SchedulerOutput& so, std::span<const int32_t> prompt_len, Batch& b) {
  has_prompt_rows_ = false;
  bool has_fork = false;
  for (size_t si = 0; si < so.seqs.size(); ++si) {
    const ScheduledSeq& s = so.seqs[si];
    has_prompt_rows_ = has_prompt_rows_ || s.num_computed < prompt_len[si];
    has_fork = has_fork || (s.num_samples > 1 && s.num_draft == 0);
  }
  remapped_ = has_prompt_rows_ || has_fork;
  prompt_row_of_.clear();
  if (!remapped_) return;
  sample_rows_.assign(b.logits_rows.begin(), b.logits_rows.end());
  sample_src_.resize(sample_rows_.size());
  b.logits_rows.clear();
  size_t next_sample = 0;
  for (size_t si = 0; si < so.seqs.size(); ++si) {
    const ScheduledSeq& s = so.seqs[si];
    const int32_t start = b.seq_start[si];
    for (int32_t j = 0; j < s.num_tokens && s.num_computed + j + 1 < prompt_len[si]; ++j) {
      b.logits_rows.push_back(start + j);
      prompt_row_of_.emplace_back(s.request_id, s.num_computed + j + 1);
    }
    // Distinct forward rows: one shared by a fork's n samples, or one per verified position.
    const int32_t distinct = s.num_draft > 0 ? s.num_samples : std::min(s.num_samples, 1);
    const int32_t per_row = s.num_draft > 0 ? 1 : s.num_samples;
    for (int32_t d = 0; d < distinct; ++d) {
      b.logits_rows.push_back(sample_rows_[next_sample]);
      prompt_row_of_.emplace_back(-1, -1);
      for (int32_t k = 0; k < per_row; ++k)
        sample_src_[next_sample++] = static_cast<int32_t>(b.logits_rows.size() - 1);
    }
  }
}

const float* LogitsPlan::sample_logits(const float* logits, int n_vocab) {
  if (!remapped_) return logits;
  const size_t v = static_cast<size_t>(n_vocab);
  gathered_.resize(sample_src_.size() * v);
  for (size_t i = 0; i < sample_src_.size(); ++i)
    std::copy_n(logits + static_cast<size_t>(sample_src_[i]) * v, v, gathered_.data() + i * v);
  return gathered_.data();
}

}  // namespace ossa
