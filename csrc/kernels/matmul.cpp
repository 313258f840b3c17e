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
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "formats/dequantize.h"
#include "kernels/matmul_kernels.h"
#include "kernels/matmul_profile.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

constexpr int64_t k_out_chunk = 16;  // output rows per work item (a multiple of every tile's mo)
constexpr int64_t k_row_block = 64;  // activation rows per work item
constexpr int k_max_targets = 8;

int64_t block_elems(DType t) {
  switch (t) {
    case DType::Q4_K:
    case DType::Q6_K:
      return 256;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q8_0:
      return 32;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q5_K:
    case DType::IQ4_XS:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
      return 256;
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::MXFP4:
      return 32;
    case DType::BITNET:
      return 64;
    case DType::FP8:
      return 128;
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return 1;
  }
  throw ModelError("matmul: unsupported weight type " + std::to_string(static_cast<int>(t)));
}

void check(const TensorView& w, const MatmulInput& x) {
  const int64_t be = block_elems(w.type);
  if (w.cols != x.cols)
    throw ModelError("matmul: weight has " + std::to_string(w.cols) + " columns, activations " +
                     std::to_string(x.cols));
  if (w.cols % be != 0)
    throw ModelError("matmul: row length " + std::to_string(w.cols) + " is not a multiple of the " +
                     std::string(dtype_name(w.type)) + " block size");
}

constexpr int64_t k_amx_row_block = 256;   // activation rows per AMX work item (a multiple of 16)
constexpr int64_t k_amx_out_chunk = 48;    // output rows per AMX work item (three 16-row groups)
constexpr int64_t k_bf16c_out_chunk = 32;  // bfloat16 compute on AMX: two 16-row groups...
constexpr int64_t k_bf16c_row_block =
    512;  // ...by a whole 512-token step (measured a few % faster than 256)

// How a call cuts its work into items: out_chunk output rows (a multiple of 16) by row_block
// activation rows; the AMX kernels take larger items.
struct ItemShape {
  int64_t out_chunk, row_block;
  int64_t chunks(int64_t out_rows) const { return (out_rows + out_chunk - 1) / out_chunk; }
  int64_t row_blocks(int64_t n_rows) const { return (n_rows + row_block - 1) / row_block; }
};
ItemShape item_shape(bool amx, bool bf16c) {
  // bfloat16 on VDPBF16PS (no AMX): 32 output rows, so that a gate/up item writes whole 32-column
  // steps of the bf16 tiles the down matmul reads (matmul_gate_up_swiglu's out_tiles).
  if (amx && bf16c && !amx_available()) return ItemShape{2 * k_out_chunk, k_row_block};
  // The AVX2 int8 kernels (no AMX) take the f32 kernels' items: 64 rows of pieces stay in L2.
  if (!amx || !amx_available()) return ItemShape{k_out_chunk, k_row_block};
  return bf16c ? ItemShape{k_bf16c_out_chunk, k_bf16c_row_block}
               : ItemShape{k_amx_out_chunk, k_amx_row_block};
}

// Items a thread claims at most at a time (parallel_for's max_claim: the claims shrink to single
// items at the end): runs of neighbouring items, so each thread streams one contiguous stretch of
// the weights (what its hardware prefetcher follows) instead of every other 16-row item. 1B Q4_K_M
// one-row products from DRAM, 2 threads: 13.7 GB/s item by item, 22.4 GB/s in runs of 64. Which
// thread computes an item never changes its result.
int64_t claim_grain(int64_t n_items, int threads) {
  return std::clamp<int64_t>(n_items / (4 * int64_t{threads}), 1, 64);
}

// True when this weight goes through the repacked kernels: it was repacked at load (its model was
// loaded with amx on), whatever the activations. With 8-bit activations the int8 kernels take the
// blocks as their first piece; the bf16-tile kernels (an AMX machine's Q4_0 / Q4_1 / Q8_0 / Q5_0
// / ...) keep their split inputs, because there matmul_q8.cpp's dot products would be the slower
// path (1B Q8_0 file, 2 threads: 74 against 323 prefill tok/s, 12 against 21 decode). So whether
// the call carries 8-bit blocks for other matrices never changes w's kernel.
bool uses_amx(const TensorView& w) { return w.packed != nullptr; }

// Activations split for AMX (bf16 hi/lo tiles and block sums), owned by the thread that called the
// matmul; workers only read them while that call is running.
thread_local AlignedVector<uint16_t> t_split;
thread_local AlignedVector<float> t_block_sum;

template <class T>
T* grow(AlignedVector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.assign(static_cast<size_t>(n), T{});
  return v.data();
}

// bfloat16 compute without AMX: the f32 kernels multiply the BF16 copy of the weights by the
// activations rounded to bf16 here (ties to even), into a buffer owned by the calling thread.
thread_local AlignedVector<float> t_rounded;
MatmulInput round_to_bf16(const MatmulInput& x) {
  float* out = grow(t_rounded, x.n_rows * x.cols);
  const int64_t n = x.n_rows * x.cols;
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x.f32[i]));
  MatmulInput r = x;
  r.f32 = out;
  r.q8 = nullptr;
  r.quantized = false;
  return r;
}

// work(begin, end, thread) over n rows of activations: inline for a few (decode), else in parallel.
template <class F>
void per_rows(int64_t n, int threads, const F& work) {
  if (n <= 4)
    work(0, n, 0);
  else
    parallel_for(n, 4, threads, work);
}

// compressed-tensors' dynamic token quantization (TensorView::act_quant), as its fake-quantizing
// forward computes it in float32: s = max |x| / 127.5 (int8; a symmetric range of 255 steps over
// two) or / 448 (FP8), 0 replaced by float32's epsilon; x / s (a division, not a product by the
// reciprocal) clamped to [-128, 127] and rounded half to even, or clamped to +-448 and rounded to
// the nearest E4M3 value (ties to even); then q * s (or, for repacked matrices, q with each output
// row scaled by s afterwards: act_quantized).
thread_local AlignedVector<float> t_act_quant, t_act_scale;
float e4m3_round(float t) {
  const float a = std::fabs(t);
  if (a < 0x1p-6f) return std::nearbyint(t * 512.0f) / 512.0f;  // (subnormals: steps of 2^-9)
  int e = 0;
  std::frexp(a, &e);                               // a in [2^(e-1), 2^e)
  const float step = std::ldexp(1.0f, e - 1 - 3);  // (3 mantissa bits)
  return std::nearbyint(t / step) * step;          // (exact: a power of two)
}
}  // namespace

void act_quantize_rows(const float* x, int64_t n_rows, int64_t cols, uint8_t mode, float scale,
                       float* out, float* row_scale) {
  OSSA_ASSERT(mode == k_act_quant_int8 || mode == k_act_quant_fp8);
  const bool fp8 = mode == k_act_quant_fp8;
  const float lim_hi = fp8 ? 448.0f : 127.0f, lim_lo = fp8 ? -448.0f : -128.0f;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* v = x + r * cols;
    float* o = out + r * cols;
    float s = scale;  // (static: the matrix's input_scale)
    if (s == 0.0f) {
      float amax = 0.0f;
      for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(v[k]));
      s = amax / (fp8 ? 448.0f : 127.5f);
      if (s == 0.0f) s = std::numeric_limits<float>::epsilon();
    }
    for (int64_t k = 0; k < cols; ++k) {
      const float t = std::clamp(v[k] / s, lim_lo, lim_hi);
      const float q = fp8 ? e4m3_round(t) : std::nearbyint(t);
      o[k] = row_scale != nullptr ? q : q * s;
    }
    if (row_scale != nullptr) row_scale[r] = s;
  }
}

namespace {

// Whether two matrices sharing an input quantize it alike (TensorView::act_quant / act_scale).
bool same_act_quant(const TensorView& a, const TensorView& b) {
  return a.act_quant == b.act_quant && a.act_scale == b.act_scale;
}

// Whether two matrices take their input in the same column order (TensorView::in_perm; the loader
// shares one array between matrices whose orders are equal).
bool same_in_perm(const TensorView& a, const TensorView& b) {
  if (a.in_perm == b.in_perm) return true;
  if (a.in_perm == nullptr || b.in_perm == nullptr || a.cols != b.cols) return false;
  return std::equal(a.in_perm, a.in_perm + a.cols, b.in_perm);
}

// The input of a call whose matrices store their columns reordered (TensorView::in_perm; GPTQ's
// act-order): each row gathered into that order (float32; 8-bit blocks and bf16 tiles are not taken
// by such matrices: takes_q8 / takes_bf16_tiles). Else x.
thread_local AlignedVector<float> t_in_perm;
MatmulInput in_permuted(const MatmulInput& x, const TensorView& w, int threads) {
  if (w.in_perm == nullptr) return x;
  if (x.f32 == nullptr)
    throw ModelError(
        "matmul: a matrix with reordered columns (GPTQ act-order) takes float32 inputs");
  float* out = grow(t_in_perm, x.n_rows * x.cols);
  const int32_t* perm = w.in_perm;
  const auto work = [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* src = x.f32 + r * x.cols;
      float* dst = out + r * x.cols;
      for (int64_t j = 0; j < x.cols; ++j) dst[j] = src[perm[j]];
    }
  };
  per_rows(x.n_rows, threads, work);
  MatmulInput r = x;
  r.f32 = out;
  r.q8 = nullptr;
  r.quantized = false;
  r.bf16_tiles = nullptr;
  return r;
}

// The input of a call whose matrices quantize their activations (all the same way): q * s, as the
// reference computes it, for the f32 kernels; for repacked (AMX / int8) matrices, whose activation
// splits would round q * s (bf16 hi + lo: ~2^-16 of it, which the next quantization's thresholds
// turn into whole steps on some tokens), q alone, exact in those splits, and each row's s in
// *row_scale (post_scale: the caller multiplies its outputs by it). Else x, and *row_scale null.
MatmulInput act_quantized(const MatmulInput& x, const TensorView& w, int threads,
                          const float** row_scale, bool post_scale) {
  const uint8_t mode = w.act_quant;
  *row_scale = nullptr;
  if (mode == k_act_quant_none) return x;
  if (x.f32 == nullptr || x.quantized)
    throw ModelError("matmul: activation-quantized (W8A8) matrices take float32 activations");
  float* out = grow(t_act_quant, x.n_rows * x.cols);
  float* scales = grow(t_act_scale, x.n_rows);
  if (post_scale) *row_scale = scales;
  const auto work = [&](int64_t begin, int64_t end, int) {
    act_quantize_rows(x.f32 + begin * x.cols, end - begin, x.cols, mode, w.act_scale,
                      out + begin * x.cols, post_scale ? scales + begin : nullptr);
  };
  per_rows(x.n_rows, threads, work);
  MatmulInput r = x;
  r.f32 = out;
  r.bf16_tiles = nullptr;
  return r;
}

// Which activation layouts the AMX weights of a call read: bf16 tiles (bfloat16 compute), the bf16
// hi/lo split (Q4_0, Q4_1, Q8_0, BF16) and the int8 pieces (Q4_K and Q6_K per 32 values, Q2_K per
// 64; Q8_0 without AMX: the int8 pieces with VNNI, as int16 on AVX2).
struct AmxNeeds {
  bool any = false, bf16c = false, split = false, i8 = false, i16 = false, q23k = false;
  void add(const TensorView& w, const MatmulInput& x) {
    if (!uses_amx(w)) return;
    any = true;
    if (w.bf16_compute)
      bf16c = true;
    else if (amx_i8_type(w.type) && amx_i8_takes_i16(w.type, x.quantized))
      i16 = true;  // (AVX2's Q8_0 / IQ4 kernels; with VNNI they take the int8 pieces)
    else if (amx_i8_type(w.type))
      i8 = true;
    else if (amx_q23k_type(w.type))
      q23k = true;
    else
      split = true;
  }
};

thread_local AlignedVector<int8_t> t_i8;
thread_local AlignedVector<float> t_i8_scale, t_i8_sum;
thread_local AlignedVector<int32_t> t_i8_isum16;
thread_local AlignedVector<int16_t> t_i16;
thread_local AlignedVector<int8_t> t_q23k;
thread_local AlignedVector<float> t_q23k_scale, t_q23k_xs;

// bf16c: the weights were rounded to bf16 (bfloat16 compute), so the activations are only rounded
// (one tile per block, no sums) rather than split.
AmxActivations prepare_amx(const MatmulInput& x, int threads, const AmxNeeds& need) {
  const bool bf16c = need.bf16c;
  AmxActivations out{nullptr, nullptr, x.n_rows, x.cols};
  if (bf16c && x.bf16_tiles != nullptr) {
    out.tiles = x.bf16_tiles;
    return out;
  }
  OSSA_ASSERT(x.f32 != nullptr);
  const int64_t n_blocks = (x.n_rows + 15) / 16, steps = x.cols / 32;
  const bool tiles_needed = bf16c || need.split;
  uint16_t* tiles = tiles_needed ? grow(t_split, n_blocks * (bf16c ? 16 : 32) * x.cols) : nullptr;
  float* sums = need.split && !bf16c ? grow(t_block_sum, x.n_rows * steps) : nullptr;
  int8_t* i8 = need.i8 ? grow(t_i8, n_blocks * 16 * 3 * x.cols) : nullptr;
  // 8-bit activations (quantized_activations): a0 alone. Every int8 matrix takes_q8, so a call
  // with one carries the blocks and the matrix always gets the one piece in such a model.
  const int pieces = x.quantized ? 1 : 3;
  int16_t* i16 = need.i16 ? grow(t_i16, x.n_rows * 2 * x.cols) : nullptr;
  float* i8_scale = need.i8 || need.i16 ? grow(t_i8_scale, x.n_rows * steps) : nullptr;
  float* i8_sum = need.i8 || need.i16 ? grow(t_i8_sum, x.n_rows * steps) : nullptr;
  int32_t* i8_isum16 = need.i8 ? grow(t_i8_isum16, x.n_rows * 2 * steps) : nullptr;
  int8_t* q23k = need.q23k ? grow(t_q23k, n_blocks * 16 * 3 * x.cols) : nullptr;
  float* q23k_scale = need.q23k ? grow(t_q23k_scale, x.n_rows * (x.cols / 64)) : nullptr;
  float* q23k_xs = need.q23k ? grow(t_q23k_xs, x.n_rows * (x.cols / 16)) : nullptr;
  auto work = [&](int64_t begin, int64_t end, int) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t r0 = b * 16, r1 = std::min(x.n_rows, b * 16 + 16);
      if (bf16c)
        amx_round_rows(x.f32, x.cols, r0, r1, tiles);
      else if (need.split)
        amx_split_rows(x.f32, x.cols, r0, r1, tiles, sums);
      if (need.i8)
        amx_i8_split_rows(x.f32, x.cols, r0, r1, i8, i8_scale, i8_sum, i8_isum16, pieces);
      if (need.i16) i8_avx2_split_rows16(x.f32, x.cols, r0, r1, i16, i8_scale, i8_sum, pieces);
      if (need.q23k) amx_q23k_split_rows(x.f32, x.cols, r0, r1, q23k, q23k_scale, q23k_xs);
    }
  };
  if (n_blocks == 1)
    work(0, 1, 0);
  else
    parallel_for(n_blocks, 1, threads, work);
  out.tiles = tiles;
  out.block_sum = sums;
  out.i8 = i8;
  out.i8_pieces = pieces;
  out.i8_scale = i8_scale;
  out.i8_sum = i8_sum;
  out.i8_isum16 = i8_isum16;
  out.i16 = i16;
  out.q23k = q23k;
  out.q23k_scale = q23k_scale;
  out.q23k_xs = q23k_xs;
  return out;
}

// Activation rows laid out for the AVX-512 K-quant kernels (kquant_prepare_row), one buffer per
// layout, owned by the thread that called the matmul (like t_split). Slots: 0 Q4_K and Q5_K (Q5_K's
// qs are Q4_K's, so a matmul with both lays the rows out once), 1 Q6_K, 2 IQ4_XS, 3 Q2_K and Q3_K,
// 4 BitNet's int8 rows (bitnet_prepare_row, every build).
struct KQuantRows {
  const float* rows[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  int64_t stride[5] = {0, 0, 0, 0, 0};
};
thread_local AlignedVector<float> t_kquant[5];
int kquant_slot(DType t) {
  if (t == DType::BITNET) return 4;
  if (t == DType::Q2_K || t == DType::Q3_K) return 3;
  return t == DType::Q4_K || t == DType::Q5_K ? 0
         : t == DType::Q6_K                   ? 1
         : t == DType::IQ4_XS                 ? 2
                                              : -1;
}

// Whether compute() runs w through the f32 tile kernels (not AMX, not 8-bit activations).
bool uses_f32_tiles(const TensorView& w, const MatmulInput& x) {
  return !uses_amx(w) && !(dtype_quantized(w.type) && x.quantized && !w.bf16_compute);
}

int64_t prepared_floats(DType t, int64_t cols) {
  return t == DType::BITNET ? bitnet_prepared_floats(cols) : kquant_prepared_floats(t, cols);
}

KQuantRows prepare_kquant(const TensorView* const* ws, int n_ws, const MatmulInput& x,
                          int threads) {
  KQuantRows out;
  for (int i = 0; i < n_ws; ++i) {
    const TensorView& w = *ws[i];
    const int slot = kquant_slot(w.type);
    if (slot < 0 || out.rows[slot] != nullptr || !uses_f32_tiles(w, x)) continue;
    const int64_t stride = prepared_floats(w.type, x.cols);
    if (stride == 0) continue;
    float* buf = grow(t_kquant[slot], stride * x.n_rows);
    const auto work = [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        if (w.type == DType::BITNET)
          bitnet_prepare_row(x.f32 + r * x.cols, x.cols, buf + r * stride);
        else
          kquant_prepare_row(w.type, x.f32 + r * x.cols, x.cols, buf + r * stride);
      }
    };
    if (x.n_rows <= 8)
      work(0, x.n_rows, 0);
    else
      parallel_for(x.n_rows, 8, threads, work);
    out.rows[slot] = buf;
    out.stride[slot] = stride;
  }
  return out;
}

// Decode (one activation row) streams the weights once: ask for rows a few tiles ahead, which keeps
// more requests in flight than the hardware prefetcher does on its own -- for narrow rows only (a
// tile of at most k_prefetch_tile_bytes: the default model's 576-column Q4_1 / Q8_0 rows, where it
// was measured to pay). Wide rows are left to the hardware prefetcher: prefetching tiles of them
// into L1 evicts the rows being read. Sapphire Rapids VM, 2 threads, one-row products from DRAM
// (benchmarks/kernel_rows.py's kind of measurement, GB/s without / with the prefetch): F16
// 15680 x 4480 30.7 / 18.7, 2048 x 8192 47.0 / 29.8; Q8_0 2048 x 8192 35.1 / 22.8; Q4_1
// 15680 x 4480 21.4 / 17.1.
constexpr int64_t k_prefetch_rows = 8;
constexpr size_t k_prefetch_tile_bytes = 4096;
inline void prefetch_rows(const TensorView& w, int64_t begin, int64_t end) {
#if defined(__SSE__)
  if (end > w.rows) end = w.rows;
  if (begin >= end) return;
  const char* p = reinterpret_cast<const char*>(w.row(begin));
  const char* stop = reinterpret_cast<const char*>(w.row(end));
  for (; p < stop; p += 64) _mm_prefetch(p, _MM_HINT_T0);
#endif
}

// OSSA_PROFILE=1 (kernels/matmul_profile.h): one work item's thread time, by weight type.
struct ItemTimer {
  bool on = matmul_profiling();
  std::chrono::steady_clock::time_point t0 =
      on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  void done(const TensorView& w, int64_t n_rows, int64_t out_rows) const {
    if (!on) return;
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    matmul_profile_item(w.type, n_rows, out_rows * static_cast<int64_t>(w.row_bytes), ns.count());
  }
};

// Many activation rows and a float weight (F16 / F32 / BF16 on AVX-512): the tiles run over chunks
// of this many columns, every weight row of the item in turn, so that the chunk of the activations
// (8 rows: 16 KiB) is read from L1 by each, not from L2 (F32ChunkFn; the same sums).
constexpr int64_t k_chunk_cols = 512;
thread_local AlignedVector<float> t_chunk_acc;

// Work items of at least this many activation rows take F32Tile::decode where the build has it.
constexpr int64_t k_decoded_min_rows = 4;
thread_local AlignedVector<float> t_decoded;

// Output rows [o_begin, o_end) for activation rows [r_begin, r_end).
void compute(const TensorView& w, const MatmulInput& x, int64_t r_begin, int64_t r_end, float* y,
             int64_t ldy, int64_t o_begin, int64_t o_end, const AmxActivations* amx,
             const KQuantRows& kq, bool accumulate = false) {
  if (w.type == DType::BITNET) {  // (its own int8 rows: matmul_bitnet.cpp)
    OSSA_ASSERT(!accumulate && kq.rows[4] != nullptr);
    bitnet_rows(w, kq.rows[4], kq.stride[4], r_begin, r_end, y, ldy, o_begin, o_end);
    return;
  }
  if (amx != nullptr && uses_amx(w)) {
    amx_compute_packed(w, *amx, r_begin, r_end, y, ldy, o_begin, o_end, accumulate);
    return;
  }
  OSSA_ASSERT(!accumulate);
  OSSA_ASSERT(!w.bf16_compute || w.type == DType::BF16);  // without tiles: the BF16 copy
  if (dtype_quantized(w.type) && x.quantized && !w.bf16_compute) {
    OSSA_ASSERT(x.q8 != nullptr);  // (matmul_input builds the blocks for needs_q8_blocks)
    const int64_t nb = x.cols / k_qblock;
    const Q8DotFn dot4 = q8_dot(w.type, 4), dot1 = q8_dot(w.type, 1);
    // (the i-quants: 8 activation rows a call as well, their codebooks decoded once for the 8;
    // every kernel gives each row the same sums, whatever the rows beside it)
    const Q8DotFn dot8 = q8_dot_iq23(w.type, 8);
    const int step = dot8 != nullptr ? 8 : 4;
    const BlockQ8* rows[8];
    float out[8];
    for (int64_t r0 = r_begin; r0 < r_end; r0 += step) {
      const int rt = static_cast<int>(std::min<int64_t>(step, r_end - r0));
      for (int r = 0; r < rt; ++r) rows[r] = x.q8 + (r0 + r) * nb;
      for (int64_t o = o_begin; o < o_end; ++o) {
        if (rt == 8) {
          dot8(w.row(o), rows, nb, out);
        } else {
          int r = 0;
          for (; r + 4 <= rt; r += 4) dot4(w.row(o), rows + r, nb, out + r);
          for (; r < rt; ++r) dot1(w.row(o), rows + r, nb, out + r);
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
  const int slot = kquant_slot(w.type);
  const bool prepared = slot >= 0 && kq.rows[slot] != nullptr;
  OSSA_ASSERT(prepared || prepared_floats(w.type, x.cols) == 0);
  if (const F32DecodeFn decode = f32_tile(w.type, 1).decode;
      decode != nullptr && !prepared && r_end - r_begin >= k_decoded_min_rows) {
    // Each weight row of the item decoded once for all its activation rows (the same sums): AVX2
    // builds, every quantized type; AVX-512, the types whose tiles set F32Tile::decode.
    const int64_t n_out = o_end - o_begin;
    float* wf = grow(t_decoded, n_out * x.cols);
    for (int64_t o = 0; o < n_out; ++o) decode(w.row(o_begin + o), x.cols, wf + o * x.cols);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += 16) {
      const int rt = static_cast<int>(std::min<int64_t>(16, r_end - r0));
      for (int r = 0; r < rt; ++r) rows[r] = x.f32 + (r0 + r) * x.cols;
      f32_decoded_rows(wf, x.cols, static_cast<int>(n_out), rows, rt, x.cols,
                       y + r0 * ldy + o_begin, ldy);
    }
    return;
  }
  for (int64_t r0 = r_begin; r0 < r_end; r0 += max_rows) {
    const int rt = static_cast<int>(std::min<int64_t>(max_rows, r_end - r0));
    const F32Tile tile = f32_tile(w.type, rt);
    for (int r = 0; r < rt; ++r)
      rows[r] = prepared ? kq.rows[slot] + (r0 + r) * kq.stride[slot] : x.f32 + (r0 + r) * x.cols;
    if (tile.chunk != nullptr && rt > 1 && x.cols > k_chunk_cols) {
      const int64_t n_tiles = (o_end - o_begin + tile.mo - 1) / tile.mo,
                    per_tile = tile.mo * rt * 16;
      float* acc = grow(t_chunk_acc, n_tiles * per_tile);
      std::fill(acc, acc + n_tiles * per_tile, 0.0f);
      for (int64_t k0 = 0; k0 < x.cols; k0 += k_chunk_cols) {
        const int64_t k1 = std::min(x.cols, k0 + k_chunk_cols);
        for (int64_t t = 0; t < n_tiles; ++t) {
          const int64_t o = o_begin + t * tile.mo;
          for (int i = 0; i < tile.mo; ++i) w_rows[i] = w.row(std::min(o + i, o_end - 1));
          tile.chunk(w_rows, rows, k0, k1, x.cols, acc + t * per_tile,
                     k1 == x.cols ? out : nullptr);
          if (k1 < x.cols) continue;
          const int valid = static_cast<int>(std::min<int64_t>(tile.mo, o_end - o));
          for (int i = 0; i < valid; ++i)
            for (int r = 0; r < rt; ++r) y[(r0 + r) * ldy + o + i] = out[i * rt + r];
        }
      }
      continue;
    }
    for (int64_t o = o_begin; o < o_end; o += tile.mo) {
      if (rt == 1 && w.row_bytes * static_cast<size_t>(tile.mo) <= k_prefetch_tile_bytes)
        prefetch_rows(w, o + k_prefetch_rows, o + k_prefetch_rows + tile.mo);
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

namespace {
bool amx_env_off() {
  const char* env = std::getenv("OSSA_AMX");
  return env != nullptr && std::string(env) == "0";
}
}  // namespace

bool amx_default() { return !amx_env_off() && amx_available(); }

bool repack_default() { return !amx_env_off() && (amx_available() || i8_avx2_available()); }

void matmul_many(const MatmulTarget* targets, int n_targets, const MatmulInput& x_in0) {
  OSSA_ASSERT(n_targets >= 1 && n_targets <= k_max_targets);
  for (int t = 1; t < n_targets; ++t)
    if (!same_in_perm(*targets[t].w, *targets[0].w)) {
      // (matrices ordering their input differently: one call each, the same results per matrix)
      for (int u = 0; u < n_targets; ++u) matmul_many(&targets[u], 1, x_in0);
      return;
    }
  const MatmulInput x_in = in_permuted(x_in0, *targets[0].w, parallel_threads());
  for (int t = 1; t < n_targets; ++t)
    if (!same_act_quant(*targets[t].w, *targets[0].w))
      throw ModelError(
          "matmul: matrices sharing an input quantize it differently (their input_scale differ)");
  const float* row_scale = nullptr;
  bool packed = true;
  for (int t = 0; t < n_targets; ++t) packed = packed && uses_amx(*targets[t].w);
  const MatmulInput x = act_quantized(x_in, *targets[0].w, parallel_threads(), &row_scale, packed);
  // first_chunk[t]: index of target t's first output chunk within a row block.
  int64_t first_chunk[k_max_targets + 1] = {0};
  bool bf16c = false;
  AmxNeeds need;
  for (int t = 0; t < n_targets; ++t) {
    check(*targets[t].w, x);
    if (targets[t].accumulate && !takes_bf16_tiles(*targets[t].w))
      throw ModelError("matmul: accumulate needs a weight that takes bf16 tiles");
    need.add(*targets[t].w, x);
    bf16c = bf16c || targets[t].w->bf16_compute;
  }
  const bool amx = need.any;
  const ItemShape shape = item_shape(amx, bf16c);
  const int64_t out_chunk = shape.out_chunk, row_block = shape.row_block;
  for (int t = 0; t < n_targets; ++t)
    first_chunk[t + 1] = first_chunk[t] + shape.chunks(targets[t].w->rows);
  const int64_t chunks_per_block = first_chunk[n_targets];
  const int64_t n_row_blocks = shape.row_blocks(x.n_rows);
  if (chunks_per_block == 0 || n_row_blocks == 0) return;
  const int threads = parallel_threads();
  if (matmul_profiling()) matmul_profile_threads(threads);
  AmxActivations amx_in;
  if (amx) amx_in = prepare_amx(x, threads, need);
  OSSA_ASSERT(x.f32 != nullptr || (amx && bf16c));
  const MatmulInput xin = bf16c && !amx ? round_to_bf16(x) : x;
  const TensorView* ws[k_max_targets];
  for (int t = 0; t < n_targets; ++t) ws[t] = targets[t].w;
  const KQuantRows kq = prepare_kquant(ws, n_targets, xin, threads);
  const int64_t n_items = n_row_blocks * chunks_per_block;
  parallel_for(
      n_items, 1, threads,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t rb = item / chunks_per_block, c = item % chunks_per_block;
          int t = 0;
          while (c >= first_chunk[t + 1]) ++t;
          const MatmulTarget& tg = targets[t];
          const int64_t o = (c - first_chunk[t]) * out_chunk;
          const int64_t r = rb * row_block, o_end = std::min(tg.w->rows, o + out_chunk);
          const int64_t r_end = std::min(x.n_rows, r + row_block);
          const ItemTimer timer;
          compute(*tg.w, xin, r, r_end, tg.y, tg.ldy, o, o_end, amx ? &amx_in : nullptr, kq,
                  tg.accumulate);
          if (row_scale != nullptr)  // (W8A8: the activations' scale, after the products)
            for (int64_t i = r; i < r_end; ++i)
              for (int64_t k = o; k < o_end; ++k) tg.y[i * tg.ldy + k] *= row_scale[i];
          timer.done(*tg.w, x.n_rows, o_end - o);
        }
      },
      claim_grain(n_items, threads));
}

bool takes_bf16_tiles(const TensorView& w) {
  return w.bf16_compute && w.packed != nullptr && w.in_perm == nullptr;
}

bool takes_q8(const TensorView& w) {
  if (w.empty() || w.bf16_compute || w.in_perm != nullptr) return false;
  return w.packed != nullptr ? amx_i8_type(w.type) : dtype_quantized(w.type);
}

bool needs_q8_blocks(const TensorView& w) { return takes_q8(w) && w.packed == nullptr; }

int64_t bf16_tiles_elems(int64_t n_rows, int64_t cols) { return (n_rows + 15) / 16 * 16 * cols; }

void bf16_tiles_row(const float* row, int64_t cols, int64_t r, uint16_t* tiles) {
  OSSA_ASSERT(cols % 32 == 0);
  amx_round_rows(row - r * cols, cols, r, r + 1, tiles);
}

void matmul_gate_up_swiglu(const TensorView& gate, const TensorView& up, const MatmulInput& x_in0,
                           float* out, int64_t ldo, uint16_t* out_tiles, Glu glu) {
  if (!same_in_perm(gate, up)) {
    // (gate and up ordering their input differently: each matrix on its own, then the GLU, the same
    // values as the fused path's)
    OSSA_ASSERT(out_tiles == nullptr);
    thread_local AlignedVector<float> g_buf, u_buf;
    float* g = grow(g_buf, x_in0.n_rows * gate.rows);
    float* u = grow(u_buf, x_in0.n_rows * up.rows);
    matmul(gate, x_in0, g, gate.rows);
    matmul(up, x_in0, u, up.rows);
    for (int64_t r = 0; r < x_in0.n_rows; ++r)
      glu_row(glu, g + r * gate.rows, u + r * up.rows, gate.rows, out + r * ldo);
    return;
  }
  const MatmulInput x_in = in_permuted(x_in0, gate, parallel_threads());
  if (!same_act_quant(gate, up))
    throw ModelError(
        "matmul: gate and up quantize their input differently (their input_scale differ)");
  const float* row_scale = nullptr;
  const MatmulInput x =
      act_quantized(x_in, gate, parallel_threads(), &row_scale, uses_amx(gate) && uses_amx(up));
  check(gate, x);
  check(up, x);
  OSSA_ASSERT(gate.rows == up.rows);
  AmxNeeds need;
  need.add(gate, x);
  need.add(up, x);
  const bool amx_any = need.any;
  const bool bf16c = gate.bf16_compute || up.bf16_compute;
  const ItemShape shape = item_shape(amx_any, bf16c);  // the same items as matmul_many
  const int64_t out_chunk = shape.out_chunk, row_block = shape.row_block;
  const int64_t n_chunks = shape.chunks(gate.rows), n_row_blocks = shape.row_blocks(x.n_rows);
  if (n_chunks == 0 || n_row_blocks == 0) return;
  const int threads = parallel_threads();
  AmxActivations amx_in;
  if (amx_any) amx_in = prepare_amx(x, threads, need);
  const MatmulInput xin = bf16c && !amx_any ? round_to_bf16(x) : x;
  OSSA_ASSERT(x.f32 != nullptr || (amx_any && bf16c));
  const TensorView* ws[2] = {&gate, &up};
  const KQuantRows kq = prepare_kquant(ws, 2, xin, threads);
  OSSA_ASSERT(out_tiles == nullptr || row_scale == nullptr);
  OSSA_ASSERT(out_tiles == nullptr || (takes_bf16_tiles(gate) && takes_bf16_tiles(up) &&
                                       out_chunk % 32 == 0 && gate.rows % 32 == 0));
  const int64_t tile_steps =
      gate.rows / 32;  // of the tiles written: the next matmul's 32-column steps
  const int64_t n_items = n_row_blocks * n_chunks;
  parallel_for(
      n_items, 1, threads,
      [&](int64_t begin, int64_t end, int) {
        thread_local AlignedVector<float> scratch;
        const int64_t need = 2 * row_block * out_chunk;
        if (static_cast<int64_t>(scratch.size()) < need)
          scratch.assign(static_cast<size_t>(need), 0.0f);
        float* g = scratch.data();
        float* u = g + row_block * out_chunk;
        for (int64_t item = begin; item < end; ++item) {
          const int64_t rb = item / n_chunks, o = (item % n_chunks) * out_chunk;
          const int64_t r0 = rb * row_block, r1 = std::min(x.n_rows, r0 + row_block);
          const int64_t o1 = std::min(gate.rows, o + out_chunk);
          // compute() writes y[r * ld + col] for the item's absolute rows and columns; the scratch
          // holds them from (r0, o) on, so it is passed as a base that many floats earlier (only
          // the item's own elements, all inside the scratch, are written).
          const int64_t ld = out_chunk;
          const auto base = [&](float* p) {
            return reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(p) -
                                            static_cast<uintptr_t>(r0 * ld + o) * sizeof(float));
          };
          const ItemTimer t_gate;
          compute(gate, xin, r0, r1, base(g), ld, o, o1, amx_any ? &amx_in : nullptr, kq);
          t_gate.done(gate, x.n_rows, o1 - o);
          const ItemTimer t_up;
          compute(up, xin, r0, r1, base(u), ld, o, o1, amx_any ? &amx_in : nullptr, kq);
          t_up.done(up, x.n_rows, o1 - o);
          if (out_tiles != nullptr) {
            alignas(64) float row[32];
            for (int64_t r = r0; r < r1; ++r)
              for (int64_t c = o; c < o1; c += 32) {
                glu_row(glu, g + (r - r0) * ld + (c - o), u + (r - r0) * ld + (c - o), 32, row);
                round_bf16_32(row,
                              out_tiles + ((r / 16) * tile_steps + c / 32) * 512 + (r % 16) * 32);
              }
            continue;
          }
          if (row_scale != nullptr)  // (W8A8: the activations' scale, before the GLU)
            for (int64_t r = r0; r < r1; ++r)
              for (int64_t k = 0; k < o1 - o; ++k) {
                g[(r - r0) * ld + k] *= row_scale[r];
                u[(r - r0) * ld + k] *= row_scale[r];
              }
          for (int64_t r = r0; r < r1; ++r)
            glu_row(glu, g + (r - r0) * ld, u + (r - r0) * ld, o1 - o, out + r * ldo + o);
        }
      },
      claim_grain(n_items, threads));
}

void matmul(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy) {
  const MatmulTarget t{&w, y, ldy};
  matmul_many(&t, 1, x);
}

}  // namespace ossa
