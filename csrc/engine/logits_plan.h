#pragma once
// Which rows of logits one step's forward pass computes, and which of them each sampled token
// reads. build_batch lays out one logits row per sampled token: a forking sequence's n samples all
// name its last token, a verifying sequence one row per position. The runner wants distinct,
// ascending rows, and a request that asked for prompt logprobs also wants a row at each prompt
// position it computes this step (prompt token p + 1's logprob is read at position p). The plan
// rewrites the batch's logits_rows into the forward's rows and keeps the mapping both ways; its
// buffers keep their capacity across steps.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/batch.h"
#include "scheduler/scheduler.h"

namespace ossa {

class LogitsPlan {
 public:
  // b is so's batch as build_batch left it. prompt_len[si]: the prompt length of sequence si's
  // request when it wants prompt logprobs, else 0.
  void plan(const SchedulerOutput& so, std::span<const int32_t> prompt_len, Batch& b);

  // Whether the forward's rows differ from the sampling rows (a fork, or prompt logprob rows).
  bool remapped() const { return remapped_; }
  bool has_prompt_rows() const { return has_prompt_rows_; }
  // Per forward row: (request key, prompt position whose token's logprob the row gives), or
  // (-1, -1) for a sampling row. Filled only when remapped().
  const std::vector<std::pair<int64_t, int32_t>>& prompt_rows() const { return prompt_row_of_; }
  // The sampling rows' logits, one per sampled token, contiguous: logits itself when not
  // remapped, else gathered from the forward's rows into a buffer of the plan's.
  const float* sample_logits(const float* logits, int n_vocab);

 private:
  bool remapped_ = false, has_prompt_rows_ = false;
  std::vector<int32_t> sample_rows_;  // the batch's rows as build_batch made them
  std::vector<int32_t> sample_src_;   // the forward row each sampling row reads
  std::vector<std::pair<int64_t, int32_t>> prompt_row_of_;
  std::vector<float> gathered_;
};

}  // namespace ossa
