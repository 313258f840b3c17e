#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace ossa {

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                               bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

void IncrementalDetokenizer::reset() {
  pending_.clear();
  run_.clear();
  started_ = false;
}

void IncrementalDetokenizer::flush_run() {
  if (run_.empty()) return;
  if (utf8_valid_prefix(run_) == run_.size()) {
    pending_ += run_;
  } else {
    for (size_t k = 0; k < run_.size(); ++k) pending_ += "\xEF\xBF\xBD";
  }
  run_.clear();
}

void IncrementalDetokenizer::emit(std::string& out, bool final) {
  size_t before = out.size();
  if (final) {
    out += utf8_lossy(pending_);
    pending_.clear();
  } else {
    size_t used = utf8_lossy_stream(pending_, out);
    pending_.erase(0, used);
  }
  if (!started_ && out.size() > before) {
    started_ = true;
    if (tokenizer_->strip_leading_space() && out[before] == ' ') out.erase(before, 1);
  }
}

void IncrementalDetokenizer::push(int32_t id, std::string& out_delta) {
  const Tokenizer& t = *tokenizer_;
  if (id < 0 || id >= t.vocab_size()) return;
  if (skip_special_tokens_ && t.is_special(id)) return;
  if (t.is_byte_token(id)) {
    run_ += t.token_bytes(id);
    return;
  }
  flush_run();
  pending_ += t.token_bytes(id);
  emit(out_delta, false);
}

std::string_view IncrementalDetokenizer::push(int32_t id) {
  delta_.clear();
  push(id, delta_);
  return delta_;
}

void IncrementalDetokenizer::flush(std::string& out_delta) {
  flush_run();
  emit(out_delta, true);
}

std::string_view IncrementalDetokenizer::flush() {
  delta_.clear();
  flush(delta_);
  return delta_;
}

}  // namespace ossa
