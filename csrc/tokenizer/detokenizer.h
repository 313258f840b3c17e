#pragma once
// Streaming detokenization, one per request: ids in, complete UTF-8 text out. The deltas of push()
// followed by flush() concatenate to exactly Tokenizer::decode of the same ids, because the same
// rules apply with the undecidable tail held back: an incomplete UTF-8 sequence, a pending run of
// byte-fallback tokens (decoded as a unit), and the leading-space strip until text has started.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace ossa {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens);

  // Appends the text that became final with this token to out_delta.
  void push(int32_t id, std::string& out_delta);
  // The same, returning a view valid until the next call.
  std::string_view push(int32_t id);
  // Ends the stream: appends what was held back (an incomplete sequence becomes U+FFFD).
  void flush(std::string& out_delta);
  std::string_view flush();
  void reset();
  // Bytes held back (an incomplete character or byte-token run).
  size_t pending_bytes() const { return pending_.size() + run_.size(); }

 private:
  void flush_run();
  void emit(std::string& out, bool final);

  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes not yet converted
  std::string run_;      // byte-fallback bytes not yet resolved
  std::string delta_;
  bool started_ = false;  // some text has been emitted (the leading-space strip is decided)
};

}  // namespace ossa
