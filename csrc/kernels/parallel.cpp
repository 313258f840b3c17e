#include "kernels/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ossa {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Sleeps while *word == expected (a futex on Linux; a yield loop elsewhere).
void wait_while_equal(std::atomic<uint32_t>& word, uint32_t expected) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  while (word.load(std::memory_order_acquire) == expected) std::this_thread::yield();
#endif
}

void wake_all(std::atomic<uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 0x7fffffff, nullptr,
          nullptr, 0);
#else
  (void)word;
#endif
}

// The claim word packs the job's generation, its chunk count and the next unclaimed chunk, so one
// compare-exchange both checks that the job is still the current one and claims a chunk:
//
//   | generation: 24 bits | n_chunks: 20 bits | next chunk: 20 bits |
constexpr int k_chunk_bits = 20;
constexpr uint64_t k_chunk_mask = (uint64_t{1} << k_chunk_bits) - 1;
constexpr int64_t k_max_chunks = static_cast<int64_t>(k_chunk_mask);
constexpr uint32_t k_gen_mask = (1u << 24) - 1;

uint64_t pack(uint32_t gen, uint64_t n_chunks, uint64_t next) {
  return (static_cast<uint64_t>(gen & k_gen_mask) << (2 * k_chunk_bits)) |
         (n_chunks << k_chunk_bits) | next;
}

// Spins before a worker sleeps: long enough to cover the gap between two kernels of one forward,
// short enough not to burn a shared core between steps.
constexpr int k_spin_iterations = 4000;
constexpr int k_max_workers = 255;

thread_local bool t_in_task = false;

struct Pool {
  std::mutex owner;  // held by the thread whose job is running
  std::vector<std::thread> workers;
  std::atomic<uint32_t> generation{0};  // bumped (and futex-woken) to start a job
  std::atomic<uint64_t> claim{0};
  std::atomic<int64_t> done{0};  // chunks finished in the current job
  std::atomic<int> sleepers{0};
  std::atomic<int> job_threads{1};
  // The current job; written by the owner before it publishes the generation, read by a worker
  // only after it claimed a chunk of that generation (the job cannot finish before that chunk).
  ParallelTask task = nullptr;
  void* ctx = nullptr;
  int64_t n = 0, grain = 1;
  uint64_t max_claim = 1, claim_div = 2;  // chunks per claim: see parallel_run

  // Claims and runs chunks of job `gen` until none are left.
  void run_chunks(uint32_t gen, int thread) {
    for (;;) {
      uint64_t c = claim.load(std::memory_order_acquire);
      if ((c >> (2 * k_chunk_bits)) != (gen & k_gen_mask)) return;
      const uint64_t next = c & k_chunk_mask, n_chunks = (c >> k_chunk_bits) & k_chunk_mask;
      if (next >= n_chunks) return;
      const uint64_t take = std::clamp<uint64_t>((n_chunks - next) / claim_div, 1, max_claim);
      if (!claim.compare_exchange_weak(c, c + take, std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
        continue;
      const int64_t begin = static_cast<int64_t>(next) * grain;
      task(ctx, begin, std::min(n, begin + static_cast<int64_t>(take) * grain), thread);
      done.fetch_add(static_cast<int64_t>(take), std::memory_order_release);
    }
  }

  void worker_main(int id) {
    t_in_task = true;
    uint32_t seen = generation.load(std::memory_order_acquire);
    for (;;) {
      uint32_t gen;
      int spins = 0;
      while ((gen = generation.load(std::memory_order_acquire)) == seen) {
        if (++spins < k_spin_iterations) {
          cpu_relax();
          continue;
        }
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        if (generation.load(std::memory_order_seq_cst) == seen) wait_while_equal(generation, seen);
        sleepers.fetch_sub(1, std::memory_order_relaxed);
        spins = 0;
      }
      seen = gen;
      if (id < job_threads.load(std::memory_order_relaxed)) run_chunks(gen, id);
    }
  }
};

// Never destroyed: workers sleep in the futex at exit and die with the process.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

void run_inline(int64_t n, int64_t grain, ParallelTask task, void* ctx) {
  for (int64_t b = 0; b < n; b += grain) task(ctx, b, std::min(n, b + grain), 0);
}

}  // namespace

int parallel_threads() { return std::max(1, omp_get_max_threads()); }

void parallel_run(int64_t n, int64_t grain, int max_threads, ParallelTask task, void* ctx,
                  int64_t max_claim) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t n_chunks = (n + grain - 1) / grain;
  if (n_chunks > k_max_chunks) {
    grain = (n + k_max_chunks - 1) / k_max_chunks;
    n_chunks = (n + grain - 1) / grain;
  }
  max_threads = std::min<int>(max_threads, k_max_workers + 1);
  if (max_threads <= 1 || n_chunks == 1 || t_in_task) return run_inline(n, grain, task, ctx);
  Pool& p = pool();
  std::unique_lock<std::mutex> lock(p.owner, std::try_to_lock);
  if (!lock.owns_lock()) return run_inline(n, grain, task, ctx);

  while (static_cast<int>(p.workers.size()) < max_threads - 1) {
    const int id = static_cast<int>(p.workers.size()) + 1;
    p.workers.emplace_back([&p, id] { p.worker_main(id); });
    p.workers.back().detach();
  }
  p.task = task;
  p.ctx = ctx;
  p.n = n;
  p.grain = grain;
  p.max_claim = static_cast<uint64_t>(std::max<int64_t>(max_claim, 1));
  p.claim_div = 2 * static_cast<uint64_t>(max_threads);
  p.job_threads.store(max_threads, std::memory_order_relaxed);
  p.done.store(0, std::memory_order_relaxed);
  const uint32_t gen = p.generation.load(std::memory_order_relaxed) + 1;
  p.claim.store(pack(gen, static_cast<uint64_t>(n_chunks), 0), std::memory_order_release);
  p.generation.store(gen, std::memory_order_seq_cst);
  if (p.sleepers.load(std::memory_order_seq_cst) > 0) wake_all(p.generation);

  t_in_task = true;
  p.run_chunks(gen, 0);
  t_in_task = false;
  // A worker may still be inside a chunk it claimed: wait for it (spin, then give the core away).
  for (int spins = 0; p.done.load(std::memory_order_acquire) < n_chunks; ++spins) {
    if (spins < 2000) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace ossa
