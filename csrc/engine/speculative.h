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
// Proposer: n-gram prompt lookup. The longest suffix of the child's tokens (prompt + outputs) of n
// in [prompt_lookup_min, prompt_lookup_max] tokens that occurred earlier; the draft is what
// followed its most recent earlier occurrence.
//
// How many (SpecControl): k adapts to the child's own acceptance history, deterministically, so a
// request's schedule depends on nothing but its own tokens: after a verification that accepted a of
// d drafts, the next k is a + 1 (k + 1 when all were accepted), capped at num_speculative_tokens;
// after one that accepted none k halves, and from the second such in a row the child pauses
// speculation for 2^misses of its steps (at most 64) and then re-probes with k = 1.
// Twin: src/ossa/reference/speculative.py.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ossa {

enum class SpecMethod : int8_t { None, Ngram };

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::None;
  int32_t num_speculative_tokens = 0;
  int32_t prompt_lookup_min = 5;
  int32_t prompt_lookup_max = 5;

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

// One child's speculation length (see above).
struct SpecControl {
  int32_t k = -1;      // drafts to propose next; -1: not started (num_speculative_tokens)
  int32_t misses = 0;  // verifications in a row that accepted nothing
  int32_t pause = 0;   // the child's steps left without speculation

  // Drafts to propose at this step of the child (0: none); call once per step it decodes.
  int32_t next(int32_t k_max);
  // After a verification of `drafted` tokens that accepted `accepted`.
  void record(int32_t drafted, int32_t accepted, int32_t k_max);
};

// Counters, vLLM's spec-decode metrics.
struct SpecStats {
  int64_t num_drafts = 0;                 // verifications (one per child step with a draft)
  int64_t num_draft_tokens = 0;           // tokens proposed and verified
  int64_t num_accepted_tokens = 0;        // of which accepted
  std::vector<int64_t> accepted_per_pos;  // [i]: verifications that accepted draft position i
};

}  // namespace ossa
