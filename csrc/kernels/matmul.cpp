// The matmul: checks, tiling and scheduling. The kernels live in matmul_f32.cpp (f32 activations)
// and matmul_q8.cpp (8-bit activations); see matmul.h for the batch-invariance contract.
//
// Work items are (activation row block, weight, output chunk) triples:
//
//   row block 0: | wq chunk 0 | wq chunk 1 | ... | wk chunk 0 | ... | wv chunk 0 | ... |
//   row block 1: | ...                                                               |
//
// A row block (k_row_block activation rows) stays in L2 while the threads sweep the weights; inside
// an item, tiles of activation rows reuse each decoded weight block.
#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <string>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "kernels/matmul_kernels.h"
#include "kernels/parallel.h"
#include "util/error.h"

namespace ossa {
namespace {

constexpr int64_t k_out_chunk = 16;   // output rows per work item (a multiple of every tile's mo)
constexpr int64_t k_row_block = 64;   // activation rows per work item
constexpr int k_max_targets = 8;

int64_t block_elems(DType t) {
  switch (t) {
    case DType::Q4_K:
    case DType::Q6_K: return 256;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q8_0: return 32;
    case DType::F32:
    case DType::F16:
    case DType::BF16: return 1;
  }
  throw ModelError("matmul: unsupported weight type " + std::to_string(static_cast<int>(t)));
}

void check(const TensorView& w, const MatmulInput& x) {
  const int64_t be = block_elems(w.type);
  if (w.cols != x.cols) throw ModelError("matmul: weight has " + std::to_string(w.cols) +
                                         " columns, activations " + std::to_string(x.cols));
  if (w.cols % be != 0)
    throw ModelError("matmul: row length " + std::to_string(w.cols) + " is not a multiple of the " +
                     std::string(dtype_name(w.type)) + " block size");
}

std::atomic<bool> g_quantized_activations{false};

// Decode (one activation row) streams the weights once: ask for rows a few tiles ahead, which keeps
// more requests in flight than the hardware prefetcher does on its own.
constexpr int64_t k_prefetch_rows = 8;
inline void prefetch_rows(const TensorView& w, int64_t begin, int64_t end) {
#if defined(__SSE__)
  if (end > w.rows) end = w.rows;
  if (begin >= end) return;
  const char* p = reinterpret_cast<const char*>(w.row(begin));
  const char* stop = reinterpret_cast<const char*>(w.row(end));
  for (; p < stop; p += 64) _mm_prefetch(p, _MM_HINT_T0);
#endif
}

// Output rows [o_begin, o_end) for activation rows [r_begin, r_end).
void compute(const TensorView& w, const MatmulInput& x, int64_t r_begin, int64_t r_end, float* y,
             int64_t ldy, int64_t o_begin, int64_t o_end) {
  if (dtype_quantized(w.type) && x.q8 != nullptr) {
    const int64_t nb = x.cols / k_qblock;
    const Q8DotFn dot4 = q8_dot(w.type, 4), dot1 = q8_dot(w.type, 1);
    const BlockQ8* rows[4];
    float out[4];
    for (int64_t r0 = r_begin; r0 < r_end; r0 += 4) {
      const int rt = static_cast<int>(std::min<int64_t>(4, r_end - r0));
      for (int r = 0; r < rt; ++r) rows[r] = x.q8 + (r0 + r) * nb;
      for (int64_t o = o_begin; o < o_end; ++o) {
        if (rt == 4) {
          dot4(w.row(o), rows, nb, out);
        } else {
          for (int r = 0; r < rt; ++r) dot1(w.row(o), rows + r, nb, out + r);
        }
        for (int r = 0; r < rt; ++r) y[(r0 + r) * ldy + o] = out[r];
      }
    }
    return;
  }
  const int max_rows = f32_tile_max_rows();
  const float* rows[16];
  const uint8_t* w_rows[8];
  float out[64];
  for (int64_t r0 = r_begin; r0 < r_end; r0 += max_rows) {
    const int rt = static_cast<int>(std::min<int64_t>(max_rows, r_end - r0));
    const F32Tile tile = f32_tile(w.type, rt);
    for (int r = 0; r < rt; ++r) rows[r] = x.f32 + (r0 + r) * x.cols;
    for (int64_t o = o_begin; o < o_end; o += tile.mo) {
      if (rt == 1) prefetch_rows(w, o + k_prefetch_rows, o + k_prefetch_rows + tile.mo);
      // Past the end, a tile repeats the last row (its results are dropped).
      for (int i = 0; i < tile.mo; ++i) w_rows[i] = w.row(std::min(o + i, o_end - 1));
      tile.fn(w_rows, rows, x.cols, out);
      const int valid = static_cast<int>(std::min<int64_t>(tile.mo, o_end - o));
      for (int i = 0; i < valid; ++i)
        for (int r = 0; r < rt; ++r) y[(r0 + r) * ldy + o + i] = out[i * rt + r];
    }
  }
}

}  // namespace

void set_quantized_activations(bool on) { g_quantized_activations = on; }
bool quantized_activations() { return g_quantized_activations; }

void matmul_range(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy, int64_t o_begin,
                  int64_t o_end) {
  check(w, x);
  compute(w, x, 0, x.n_rows, y, ldy, o_begin, o_end);
}

void matmul_many(const MatmulTarget* targets, int n_targets, const MatmulInput& x) {
  OSSA_ASSERT(n_targets >= 1 && n_targets <= k_max_targets);
  // first_chunk[t]: index of target t's first output chunk within a row block.
  int64_t first_chunk[k_max_targets + 1] = {0};
  for (int t = 0; t < n_targets; ++t) {
    check(*targets[t].w, x);
    first_chunk[t + 1] = first_chunk[t] + (targets[t].w->rows + k_out_chunk - 1) / k_out_chunk;
  }
  const int64_t chunks_per_block = first_chunk[n_targets];
  const int64_t n_row_blocks = (x.n_rows + k_row_block - 1) / k_row_block;
  if (chunks_per_block == 0 || n_row_blocks == 0) return;
  parallel_for(n_row_blocks * chunks_per_block, 1, parallel_threads(),
               [&](int64_t begin, int64_t end, int) {
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t rb = item / chunks_per_block, c = item % chunks_per_block;
                   int t = 0;
                   while (c >= first_chunk[t + 1]) ++t;
                   const MatmulTarget& tg = targets[t];
                   const int64_t o = (c - first_chunk[t]) * k_out_chunk;
                   const int64_t r = rb * k_row_block;
                   compute(*tg.w, x, r, std::min(x.n_rows, r + k_row_block), tg.y, tg.ldy, o,
                           std::min(tg.w->rows, o + k_out_chunk));
                 }
               });
}

void matmul(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy) {
  const MatmulTarget t{&w, y, ldy};
  matmul_many(&t, 1, x);
}

}  // namespace ossa
