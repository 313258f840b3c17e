#pragma once
// Speculative decoding that never changes a token: what proposes draft tokens and how many.
//
// A child that decodes proposes up to k tokens to follow its current tokens; the scheduler then
// runs the k + 1 positions [last token, d1..dk] as one chunk with a logits row at each, and the
// engine samples row i exactly as plain decoding samples output index num_output + i (the same
// chain, the outputs so far plus d1..di for the penalties, the Philox draw of step num_output + i).
// d(i+1) is accepted only if it equals row i's draw; the first mismatch takes the drawn token and
// ends the run. A row's logits do not depend on the other rows of a step (batch invariance,
// chunking included), so every appended token is bitwise the token plain decoding appends, and EOS,
// stop ids, max_tokens, stop strings and logprobs are applied to the run token by token
// (scheduler/scheduler.h).
//
// Proposers: n-gram prompt lookup (the longest suffix of the child's tokens (prompt + outputs) of n
// in [prompt_lookup_min, prompt_lookup_max] tokens that occurred earlier; the draft is what
// followed its most recent earlier occurrence), or a draft model that shares the target's
// vocabulary, proposing greedily (engine/draft_model.h).
//
// How many (SpecControl): the child's per-token acceptance alpha is estimated from its own history
// (decayed counts of accepted drafts and of rejections, prior 2/3), and a draft position is worth
// verifying while its chance of being reached and accepted, alpha^i, exceeds the share of a step's
// cost one more position adds. A step over B decoding sequences costs about a + b * tokens (a:
// reading the weights, b: one position's arithmetic; a / b ~ 12 measured for the default model on 2
// cores), so one more position is worth B / (12 + B) of a step's tokens: k is the largest i <=
// k_max with alpha^i > B / (12 + B) + c, c a draft model's cost per position (draft_cost; 0 for
// n-gram lookup). A single stream speculates freely; a batch of 16 only where drafts are mostly
// right. A child whose k is 0 probes with k = 1 every 16th step, so it can
// recover. k never changes a token (every appended token is verified), only the cost; the rule is
// deterministic, so the twin's step traces equal the C++ engine's. Twin:
// src/ossa/reference/speculative.py.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ossa {

enum class SpecMethod : int8_t { None, Ngram, DraftModel };

// disable_by_batch_size when not given (measured: docs/speculative.md).
inline constexpr int32_t k_spec_default_disable_by_batch_size = 8;

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::None;
  int32_t num_speculative_tokens = 0;
  int32_t prompt_lookup_min = 5;
  int32_t prompt_lookup_max = 5;
  // No child drafts for a step when more than this many sequences run (vLLM's field; 0: never).
  int32_t disable_by_batch_size = k_spec_default_disable_by_batch_size;
  // Method "draft_model": what one draft position costs the draft, as a share of a target step
  // (ossa.config sets the ratio of their weight bytes: decode reads the weights once a step).
  double draft_cost = 0;

  bool enabled() const { return method != SpecMethod::None && num_speculative_tokens > 0; }
};

// InputError naming the field when the config is out of range.
void validate_speculative_config(const SpeculativeConfig& c);
const char* spec_method_name(SpecMethod m);
SpecMethod parse_spec_method(const std::string& name);

// The up to k tokens that followed the most recent earlier occurrence of the longest suffix of
// `tokens` of n in [min_n, max_n] tokens, written to `out` (cleared first; empty when none
// matches).
void ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k,
                   std::vector<int32_t>& out);

inline constexpr double k_spec_cost_ratio = 12.0;  // a / b above
inline constexpr int32_t k_spec_probe_interval = 16;

// One child's speculation length (see above). Counts are fixed point (256 = one), decayed by 1/8 a
// verification, so C++ and the twin compute them exactly alike.
struct SpecControl {
  int64_t accepted = 0;  // decayed accepted drafts
  int64_t rejected = 0;  // decayed verifications that ended on a rejected draft
  int32_t idle = 0;      // steps with k = 0 since the last probe

  // Drafts to propose at this step of the child, in a step of `batch` decoding sequences, each
  // draft position costing draft_cost of a step besides its verification.
  int32_t next(int32_t k_max, int32_t batch, double draft_cost = 0);
  // After a verification of `drafted` tokens that accepted `accepted`.
  void record(int32_t drafted, int32_t accepted);
};

// Counters, vLLM's spec-decode metrics.
struct SpecStats {
  int64_t num_drafts = 0;                 // verifications (one per child step with a draft)
  int64_t num_draft_tokens = 0;           // tokens proposed and verified
  int64_t num_accepted_tokens = 0;        // of which accepted
  std::vector<int64_t> accepted_per_pos;  // [i]: verifications that accepted draft position i
};

}  // namespace ossa
