#include "engine/output_processor.h"

#include <algorithm>

namespace ossa {

namespace {

// Largest prefix length of s (<= limit) that ends on a UTF-8 character boundary.
size_t utf8_floor(const std::string& s, size_t limit) {
  if (limit >= s.size()) return s.size();
  while (limit > 0 && (static_cast<unsigned char>(s[limit]) & 0xC0) == 0x80) --limit;
  return limit;
}

int32_t raw_rank(const float* row, int vocab, int32_t token) {
  const float x = row[token];
  int32_t greater = 0;
  for (int i = 0; i < vocab; ++i) greater += row[i] > x;
  return greater + 1;
}

}  // namespace

StopStrings::StopStrings(std::vector<std::string> stop, bool include, int64_t min_tokens_)
    : strings(std::move(stop)), include_in_output(include), min_tokens(min_tokens_) {
  for (const std::string& s : strings) max_len = std::max(max_len, s.size());
}

bool append_token(CompletionState& c, const StopStrings& stops, int32_t token,
                  const float* logprob) {
  c.new_tokens.push_back(token);
  c.output_tokens.push_back(token);
  c.dirty = true;
  if (logprob != nullptr) c.cumulative_logprob += *logprob;
  const size_t old_len = c.text.size();
  c.detok->push(token, c.text);
  const bool past_min = static_cast<int64_t>(c.output_tokens.size()) > stops.min_tokens;
  if (stops.max_len == 0 || !past_min || c.text.size() == old_len) return false;
  // A stop string can only newly appear in a window ending in the new text.
  const size_t from = old_len >= stops.max_len - 1 ? old_len - (stops.max_len - 1) : 0;
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops.strings) {
    const size_t p = c.text.find(s, from);
    if (p != std::string::npos && p < best) {
      best = p;
      best_stop = &s;
    }
  }
  if (best_stop == nullptr) return false;
  c.stop_str = *best_stop;
  c.text.resize(stops.include_in_output ? best + best_stop->size() : best);
  if (c.emitted > c.text.size()) c.emitted = c.text.size();
  finish_completion(c, "stop");
  return true;
}

void finish_completion(CompletionState& c, const std::string& reason) {
  c.finished = true;
  c.dirty = true;
  c.finish_reason = reason;
  // A stop string already truncated the text; anything held back after it is not output.
  if (reason != "stop" || c.stop_str.empty()) c.detok->flush(c.text);
}

CompletionDelta take_delta(CompletionState& c, const StopStrings& stops, int32_t index) {
  CompletionDelta d;
  d.index = index;
  d.token_ids = std::move(c.new_tokens);
  c.new_tokens.clear();
  d.logprobs = std::move(c.new_logprobs);
  c.new_logprobs.clear();
  // Hold back text that could still be the start of a stop string.
  size_t limit = c.text.size();
  if (!c.finished && stops.max_len > 1)
    limit = utf8_floor(
        c.text, c.text.size() >= stops.max_len - 1 ? c.text.size() - (stops.max_len - 1) : 0);
  if (limit > c.emitted) {
    d.text.assign(c.text, c.emitted, limit - c.emitted);
    c.emitted = limit;
  }
  d.cumulative_logprob = c.cumulative_logprob;
  if (c.finished && !c.reported_finish) {
    d.finish_reason = c.finish_reason;
    d.stop_str = c.stop_str;
    d.stop_token = c.stop_token;
    c.reported_finish = true;
  }
  c.dirty = false;
  return d;
}

TokenLogprobs token_logprobs(const SampleResult& r, int32_t token, const float* row, int vocab) {
  TokenLogprobs t;
  t.token = token;
  t.logprob = r.logprob;
  t.rank = raw_rank(row, vocab, token);
  t.top.reserve(r.n_top);
  for (int i = 0; i < r.n_top; ++i) t.top.emplace_back(r.top_ids[i], r.top_logprobs[i]);
  return t;
}

}  // namespace ossa
