#include "engine/constraints.h"

#include <chrono>
#include <utility>

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
