#pragma once
// A small fork-join pool for the forward pass, used instead of OpenMP parallel regions.
//
// Why not OpenMP: each `#pragma omp parallel` costs a team wake-up, and libgomp's idle threads spin
// hard between regions; on a shared, oversubscribed machine a forward with ~7 regions per layer
// spent most of its time in libgomp. Here the caller always works too, and items are claimed one
// chunk at a time from a shared counter, so a worker that the OS has not scheduled yet costs
// nothing: the caller (or the other workers) simply take its chunks. Idle workers spin briefly,
// then sleep on a futex.
//
// Determinism: which thread runs a chunk is not fixed, so a task must compute each item the same
// way whichever thread runs it (the kernels do: an output element is one thread's fixed sequence of
// operations). The thread index passed to the task is only for per-thread scratch buffers.
#include <cstdint>
#include <type_traits>

namespace ossa {

// Threads a parallel_for started from this thread may use: the OpenMP setting of the calling thread
// (omp_set_num_threads / OMP_NUM_THREADS), so core.set_num_threads keeps working.
int parallel_threads();

using ParallelTask = void (*)(void* ctx, int64_t begin, int64_t end, int thread);

// Runs task(ctx, begin, end, thread) over [0, n) in chunks of `grain` items, on the calling thread
// plus up to max_threads - 1 pool workers; thread < max_threads. Returns when every chunk is done.
// Runs inline (one chunk after another, thread 0) when only one thread is allowed, when called from
// inside a task, or while another caller holds the pool.
//
// A thread claims up to max_claim neighbouring chunks at a time: the chunks left divided by twice
// the threads, at least one (guided self-scheduling). Long contiguous runs first, which a core's
// hardware prefetcher streams, and single chunks at the end, so that the threads finish together
// instead of one waiting out the other's last long run. max_claim = 1: one chunk per claim.
void parallel_run(int64_t n, int64_t grain, int max_threads, ParallelTask task, void* ctx,
                  int64_t max_claim = 1);

// Convenience wrapper: f(begin, end, thread).
template <class F>
void parallel_for(int64_t n, int64_t grain, int max_threads, F&& f, int64_t max_claim = 1) {
  using Fn = std::remove_reference_t<F>;
  parallel_run(
      n, grain, max_threads,
      [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<Fn*>(ctx))(b, e, t); },
      const_cast<void*>(static_cast<const void*>(&f)), max_claim);
}

}  // namespace ossa
