#pragma once
// What a sampled token becomes for the caller: the output side of an engine step, apart from the
// scheduling, forward and sampling around it. Per completion of a request it keeps the incremental
// detokenizer and the decoded text, looks for stop strings in the only window the new text can
// complete, holds back text that could still be the start of one, records logprob entries and the
// finish reason, and cuts the CompletionDelta the caller receives. The engine calls append_token
// once per sampled token and take_delta once per output.
// Twin: src/ossa/reference/output_processor.py.
//
// Text is kept as UTF-8 bytes; deltas are cut on character boundaries, so each is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sampling/sampler.h"
#include "tokenizer/detokenizer.h"

namespace ossa {

// One position's logprob entry: the token's raw logprob and rank, and the top alternatives.
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 + the number of tokens with a strictly larger raw logit
  std::vector<std::pair<int32_t, float>> top;
};

// What one completion produced since the last output of its request.
struct CompletionDelta {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprobs> logprobs;  // one per new token when logprobs were asked for
  double cumulative_logprob = 0.0;
  // Empty while running; "stop", "length", "abort" or "error" (failed in the loop).
  std::string finish_reason;
  std::string stop_str;     // the stop string that ended it
  int32_t stop_token = -1;  // or the stop token id / EOS
};

// A request's stop strings, as its completions check them.
struct StopStrings {
  std::vector<std::string> strings;
  size_t max_len = 0;              // the longest: how much text may still be the start of one
  bool include_in_output = false;  // keep the stop string at the end of the text
  int64_t min_tokens = 0;          // as vLLM: they count only once more tokens than this are out

  StopStrings() = default;
  StopStrings(std::vector<std::string> stop, bool include, int64_t min_tokens);
};

// One completion's output state.
struct CompletionState {
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::string text;    // decoded text, truncated at a stop string
  size_t emitted = 0;  // bytes of text already reported
  std::vector<int32_t> new_tokens;
  std::vector<TokenLogprobs> new_logprobs;
  std::vector<int32_t> output_tokens;
  double cumulative_logprob = 0.0;
  bool finished = false;
  bool reported_finish = false;
  bool dirty = false;  // something to report
  std::string finish_reason, stop_str;
  int32_t stop_token = -1;
};

// Appends a sampled token (logprob: its raw logprob, when the request asked for logprobs) and
// detokenizes it. Returns true when a stop string ended the completion (then finished, its text cut
// at the stop string); the caller tells the scheduler.
bool append_token(CompletionState& c, const StopStrings& stops, int32_t token,
                  const float* logprob);

// Ends a completion ("stop", "length", "abort" or "error"): the detokenizer's held bytes are
// flushed unless a stop string already cut the text.
void finish_completion(CompletionState& c, const std::string& reason);

// The completion's delta since its last one: new tokens, logprob entries and text, less what
// could still be the start of a stop string while it runs; its finish reason the first time.
CompletionDelta take_delta(CompletionState& c, const StopStrings& stops, int32_t index);

// The logprob entry of `token` from its sampler result and its raw logits row.
TokenLogprobs token_logprobs(const SampleResult& r, int32_t token, const float* row, int vocab);

}  // namespace ossa
