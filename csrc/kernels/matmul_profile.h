#pragma once
// OSSA_PROFILE=1: where the matmuls' time goes by weight type. Each work item's time is added to
// its weight's type (thread time), with the bytes of the weight rows it read; printed to stderr at
// exit as GB/s = bytes / (thread time / threads), split into one-row calls (decode: the kernel
// streams the weights once) and calls of more rows. Off by default; then each call costs one
// branch.
#include <cstdint>

#include "formats/tensor.h"

namespace ossa {

bool matmul_profiling();
// One work item: weight type t, n_rows activation rows, bytes of weights read, ns of this thread.
void matmul_profile_item(DType t, int64_t n_rows, int64_t bytes, int64_t ns);
// The thread count of the calls profiled (the pool's, for the GB/s of the summary).
void matmul_profile_threads(int threads);

}  // namespace ossa
