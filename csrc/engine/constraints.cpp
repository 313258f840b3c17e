#include "engine/constraints.h"

#include <chrono>
#include <utility>

#include "engine/engine.h"
#include "util/error.h"

namespace ossa {

void ConstraintBatch::clear() {
  handles.clear();
  children.clear();
  feed_offsets.assign(1, 0);
  feed_tokens.clear();
  released.clear();
}

ConstraintStage::~ConstraintStage() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
}

void ConstraintStage::set_host(std::shared_ptr<ConstraintHost> host, bool overlap) {
  OSSA_ASSERT(!launched_);
  host_ = std::move(host);
  overlap_ = overlap;
  if (host_ && overlap_ && !worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
}

void ConstraintStage::run() {
  masks_.assign(batch_.size() * size_t(batch_.words), ~0u);
  errors_.assign(batch_.size(), std::string());
  const auto t0 = std::chrono::steady_clock::now();
  host_->compute(batch_, masks_.data(), errors_);
  compute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ConstraintStage::launch() {
  OSSA_ASSERT(host_ != nullptr && !launched_);
  OSSA_ASSERT(batch_.feed_offsets.size() == batch_.size() + 1);
  batch_.released.swap(released_);
  released_.clear();
  launched_ = true;
  if (!overlap_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = true;
    done_ = false;
    error_ = nullptr;
  }
  cv_.notify_all();
}

void ConstraintStage::wait() {
  OSSA_ASSERT(launched_);
  launched_ = false;
  if (!overlap_) {
    run();
    return;
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ConstraintStage::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || pending_; });
    if (quit_) return;
    pending_ = false;
    lock.unlock();
    std::exception_ptr error;
    try {
      run();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace ossa

// -- the engine's side
// -------------------------------------------------------------------------------

namespace ossa {

bool Engine::prepare_constraints(const SchedulerOutput& so) {
  if (!constraints_.has_host()) return false;
  ConstraintBatch& b = constraints_.batch();
  b.clear();
  b.words = (n_vocab_ + 31) / 32;
  constraint_rows_.clear();
  size_t next = 0;
  for (const ScheduledSeq& s : so.seqs) {
    RequestState& r = *requests_.at(s.request_id);
    if (r.params.constraint < 0) {
      next += static_cast<size_t>(s.num_samples);
      continue;
    }
    for (int32_t k = 0; k < s.num_samples; ++k, ++next) {
      const int32_t child = s.num_samples > 1 ? k : s.child;
      ChildState& c = r.children[child];
      b.handles.push_back(r.params.constraint);
      b.children.push_back(child);
      b.feed_tokens.insert(b.feed_tokens.end(),
                           c.output_tokens.begin() + static_cast<ptrdiff_t>(c.constraint_fed),
                           c.output_tokens.end());
      c.constraint_fed = c.output_tokens.size();
      b.feed_offsets.push_back(static_cast<int32_t>(b.feed_tokens.size()));
      constraint_rows_.push_back(next);
    }
  }
  return b.size() > 0 || constraints_.has_released();
}

void Engine::apply_constraints(std::vector<std::pair<int64_t, std::string>>& failed,
                               const std::vector<std::pair<int64_t, int32_t>>& row_child) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::string batch_error;
  try {
    constraints_.wait();
  } catch (const std::exception& e) {
    batch_error = e.what();  // no masks at all: every constrained row fails with it
  }
  stats_.time_constraint_wait += std::chrono::duration<double>(clock::now() - t0).count();
  stats_.time_constraint = constraints_.compute_seconds();
  ++stats_.constraint_calls;
  for (size_t j = 0; j < constraint_rows_.size(); ++j) {
    const size_t row = constraint_rows_[j];
    const std::string& error = batch_error.empty() ? constraints_.error(j) : batch_error;
    if (error.empty()) {
      rows_[row].token_mask = constraints_.mask(j);
    } else {
      rows_[row].token_mask = nullptr;  // sampled unconstrained, then dropped with its request
      failed.emplace_back(row_child[row].first, "structured output: " + error);
    }
  }
}

}  // namespace ossa
