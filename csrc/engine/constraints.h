#pragma once
// Structured output in the decode loop: the rows of a batch that carry a grammar get a token mask
// from a ConstraintHost (Python's ossa.structured, which drives llguidance; the core includes no
// Python), and the sampler applies it before every other stage of its chain.
//
// One step, only when some sampled row is constrained (or a constrained request ended since the
// last call, so its matchers can be dropped):
//
//   engine thread:  schedule -> stage.launch(batch) -> forward ............ -> stage.wait() ->
//   sample stage worker:                   host.compute(feed previous tokens, masks) |
//
// So there is at most one crossing into the host per step for all constrained rows together, and
// the mask work overlaps the forward pass. A batch names each row's matcher by (handle, child), the
// tokens it has to consume first (those sampled since its last mask: normally the one from the
// previous step), and the handles released since the last call. Masks depend only on a row's own
// tokens, so they keep results batch invariant.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ossa {

struct ConstraintBatch {
  int32_t words = 0;                  // mask words per row: ceil(vocab / 32)
  std::vector<int64_t> handles;       // per row: the request's constraint handle
  std::vector<int32_t> children;      // per row: the child (n > 1 samples) whose matcher it is
  std::vector<int32_t> feed_offsets;  // rows + 1 entries: row i feeds feed_tokens[off[i], off[i+1])
  std::vector<int32_t> feed_tokens;
  std::vector<int64_t> released;  // handles of requests that ended since the last call

  size_t size() const { return handles.size(); }
  void clear();
};

// What the engine needs from a grammar library. compute() runs on the stage's worker thread.
class ConstraintHost {
 public:
  virtual ~ConstraintHost() = default;
  // Drops the released matchers, feeds each row its tokens, then writes row i's next-token mask to
  // masks + i * batch.words. errors[i] (sized to the rows, empty) gets a message for a row whose
  // matcher cannot continue; its mask is then ignored.
  virtual void compute(const ConstraintBatch& batch, uint32_t* masks,
                       std::vector<std::string>& errors) = 0;
};

class ConstraintStage {
 public:
  ConstraintStage() = default;
  ~ConstraintStage();
  ConstraintStage(const ConstraintStage&) = delete;
  ConstraintStage& operator=(const ConstraintStage&) = delete;

  // overlap: compute on the worker thread while the forward runs; otherwise in wait(), inline.
  void set_host(std::shared_ptr<ConstraintHost> host, bool overlap);
  bool has_host() const { return host_ != nullptr; }

  // The engine fills batch() (after clear()), then launch(); wait() before reading masks/errors.
  ConstraintBatch& batch() { return batch_; }
  void release(int64_t handle) { released_.push_back(handle); }
  bool has_released() const { return !released_.empty(); }
  void launch();
  // Rethrows what the host threw (the whole batch failed).
  void wait();
  bool launched() const { return launched_; }

  const uint32_t* mask(size_t row) const { return masks_.data() + row * size_t(batch_.words); }
  const std::string& error(size_t row) const { return errors_[row]; }
  double compute_seconds() const { return compute_seconds_; }  // host time, summed over calls

 private:
  void run();
  void worker_loop();

  std::shared_ptr<ConstraintHost> host_;
  bool overlap_ = true;
  ConstraintBatch batch_;
  std::vector<int64_t> released_;
  std::vector<uint32_t> masks_;
  std::vector<std::string> errors_;
  bool launched_ = false;
  double compute_seconds_ = 0;  // written by run(), read after wait()

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool pending_ = false, done_ = false, quit_ = false;
  std::exception_ptr error_;
};

}  // namespace ossa
