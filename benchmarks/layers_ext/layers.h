#pragma once
// Kernels for benchmarks/layers.py, the experiments that show why ossa is Python over C++: the same
// work as a pure-Python loop, NumPy, a plain C++ loop and a better C++ kernel. Nothing in the
// engine calls these; they exist to be measured.
#include <cstdint>

namespace ossa {

// y[i] = 2 x[i] + 1, one thread.
void bench_affine_serial(const double* x, double* y, int64_t n);
// The same loop split over `threads` OpenMP threads (<= 0: all of them).
void bench_affine_parallel(const double* x, double* y, int64_t n, int threads);

// Does nothing; never inlined, so a call through the bindings measures the crossing alone.
void bench_empty();

// Single-head attention softmax(Q K^T / sqrt(d)) V in float64, written as the textbook triple loop
// (no blocking, no SIMD intrinsics): q, k, v, out are [seq, d] row-major.
void bench_naive_attention(const double* q, const double* k, const double* v, int64_t seq,
                           int64_t d, double* out);

// The same single head through the production kernel (ossa::paged_attention, float32): K/V are
// copied into a paged cache of 16-slot blocks and every query row attends to all seq positions
// (no causal mask), as the experiment asks. threads <= 0: all of them.
void bench_paged_attention(const float* q, const float* k, const float* v, int64_t seq, int64_t d,
                           int threads, float* out);

}  // namespace ossa
