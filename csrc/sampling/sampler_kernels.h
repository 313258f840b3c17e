#pragma once
// The sampler's vector kernels (included by sampler.cpp only): exp_ref on a vector, the weight
// pass with its documented chunk/lane sums, the argmax and a lane mask test. GCC/Clang vector
// types of the machine's native width, so one source serves AVX-512, AVX2 and plain builds.
//
// Bitwise equality with ossa.reference.sampler needs every float64 operation rounded on its own,
// so FMA contraction is off here as in sampler.cpp.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// The 64-byte vector types pass by value between functions of sampler.cpp only (internal
// linkage), so GCC's note that their ABI differs without AVX-512 concerns nobody.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ossa::sampler_kernels {

constexpr float k_inf = std::numeric_limits<float>::infinity();
constexpr float k_max_logit = std::numeric_limits<float>::max();  // the largest finite logit
constexpr int k_chunk = 1024;  // ids per chunk of a vocabulary-wide sum
constexpr int k_lanes = 8;     // lanes per chunk: lane = id % 8
// GCC/Clang vector types of the machine's native width (64 bytes with AVX-512, else 32: wider
// generic vectors are split badly on AVX2), so one source serves -march=native, -DOSSA_PORTABLE=ON
// and anything else. A running scalar max or sum is a serial chain the compiler may not reorder
// (no -ffast-math); these make the lane order explicit, and it is the order the twin reproduces.
#if defined(__AVX512F__)
constexpr int k_width = 8;  // doubles per vector
#else
constexpr int k_width = 4;
#endif
using F32h = float __attribute__((vector_size(4 * k_width)));  // k_width floats
using F32v = float __attribute__((vector_size(8 * k_width)));  // 2 * k_width floats
using I32v = int32_t __attribute__((vector_size(8 * k_width)));
using F64v = double __attribute__((vector_size(8 * k_width)));
using I64v = int64_t __attribute__((vector_size(8 * k_width)));
constexpr int k_f32_width = 2 * k_width;
constexpr int k_vectors_per_group = k_lanes / k_width;  // a chunk's 8 lanes are these vectors
static_assert(k_lanes % k_width == 0);

// exp(z) for z <= 0: z = k ln2 + r (Cody-Waite), Taylor polynomial of degree 8 on |r| <= ln2 / 2
// (relative error < 3e-10, far below the float32 results), times 2^k built from its bits. Plain
// IEEE float64 operations only, in this order, so NumPy reproduces it exactly.
constexpr double k_log2e = 1.4426950408889634;
constexpr double k_shifter = 6755399441055744.0;         // 1.5 * 2^52: rounds to an integer
constexpr double k_ln2_hi = 6.93147180369123816490e-01;  // 32 bits: k * hi is exact
constexpr double k_ln2_lo = 1.90821492927058770002e-10;
constexpr double k_exp_c[9] = {1.0,         1.0,         1.0 / 2.0,    1.0 / 6.0,    1.0 / 24.0,
                               1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0, 1.0 / 40320.0};

inline double exp_one(double z) {
  const double zc = z < -708.0 ? -708.0 : z;
  const double t = zc * k_log2e;
  const double k = (t + k_shifter) - k_shifter;
  const double r = (zc - k * k_ln2_hi) - k * k_ln2_lo;
  double p = k_exp_c[8];
  for (int j = 7; j >= 0; --j) p = p * r + k_exp_c[j];
  const double scale = std::bit_cast<double>(uint64_t(int64_t(k) + 1023) << 52);
  return z < -708.0 ? 0.0 : p * scale;
}

// exp_one on each lane, bitwise the same. The integer k is read from the bits of
// t + shifter (1.5 * 2^52 + k, exact), which needs no float-to-int64 conversion (AVX2 has none).
inline F64v exp_v(F64v z) {
  const F64v lo = F64v{} - 708.0;
  const F64v zc = z < lo ? lo : z;
  const F64v t = zc * k_log2e;
  const F64v shifted = t + k_shifter;
  const F64v k = shifted - k_shifter;
  const F64v r = (zc - k * k_ln2_hi) - k * k_ln2_lo;
  F64v p = F64v{} + k_exp_c[8];
  for (int j = 7; j >= 0; --j) p = p * r + k_exp_c[j];
  I64v bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  bits = (bits - (std::bit_cast<int64_t>(k_shifter) - 1023)) << 52;
  F64v scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const F64v e = p * scale;
  return z < lo ? F64v{} : e;
}

// Whether some lane of v is >= bound (v holds no NaN): one mask test where the ISA has it.
inline bool any_at_least(F64v v, double bound) {
#if defined(__AVX512F__)
  return _mm512_cmp_pd_mask(reinterpret_cast<__m512d>(v), _mm512_set1_pd(bound), _CMP_GE_OQ) != 0;
#elif defined(__AVX__)
  return _mm256_movemask_pd(
             _mm256_cmp_pd(reinterpret_cast<__m256d>(v), _mm256_set1_pd(bound), _CMP_GE_OQ)) != 0;
#else
  for (int j = 0; j < k_width; ++j)
    if (v[j] >= bound) return true;
  return false;
#endif
}

inline F64v load_z(const float* x, int i, double m, double inv_t) {
  F32h v;
  std::memcpy(&v, x + i, sizeof(v));
  return (__builtin_convertvector(v, F64v) - m) * inv_t;
}

// Top-p's coarse search: the mass of the weights at or above each of these bounds (the largest
// weight is 1), summed along with the weights themselves.
constexpr int k_n_bounds = 6;
constexpr double k_bounds[k_n_bounds] = {0x1.0p-3,  0x1.0p-6,  0x1.0p-9,
                                         0x1.0p-12, 0x1.0p-16, 0x1.0p-20};

// Weights w_i = exp_ref((x_i - m) * inv_t), zeroed below min_p, over the ids [0, n) of one row, and
// their sum in the documented chunk/lane order (8 / k_width vector accumulators per chunk are
// exactly "lane = id % 8"; a short last group adds +0.0 to the missing lanes, changing nothing).
// w (optional) receives the weights, chunk_sums each chunk's sum; with with_bounds, mass_above[b]
// the mass of the weights >= k_bounds[b] (in no documented order: only an estimate).
template <bool with_bounds>
inline double weights_and_sum(const float* x, int n, double m, double inv_t, double min_p,
                              double* w, double* chunk_sums, double* mass_above) {
  double total = 0.0;
  F64v above[k_n_bounds] = {};
  // One group of 8 ids: weights, optional store, the chunk's lanes, the bound masses.
  auto group = [&](const float* xs, F64v* lanes, double* w_out) {
    for (int h = 0; h < k_vectors_per_group; ++h) {
      F64v e = exp_v(load_z(xs, h * k_width, m, inv_t));
      e = e >= min_p ? e : F64v{};
      if (w_out != nullptr) std::memcpy(w_out + h * k_width, &e, sizeof(e));
      if constexpr (with_bounds)
        for (int b = 0; b < k_n_bounds; ++b) above[b] += e >= k_bounds[b] ? e : F64v{};
      lanes[h] += e;
    }
  };
  const int n_chunks = (n + k_chunk - 1) / k_chunk;
  for (int c = 0; c < n_chunks; ++c) {
    const int begin = c * k_chunk, end = std::min(begin + k_chunk, n);
    F64v lanes[k_vectors_per_group] = {};
    int i = begin;
    for (; i + k_lanes <= end; i += k_lanes) group(x + i, lanes, w != nullptr ? w + i : nullptr);
    if (i < end) {
      float tail[k_lanes];
      double w_tail[k_lanes];
      for (int j = 0; j < k_lanes; ++j) tail[j] = i + j < end ? x[i + j] : -k_inf;
      group(tail, lanes, w_tail);
      if (w != nullptr)
        for (int j = 0; i + j < end; ++j) w[i + j] = w_tail[j];
    }
    double s = lanes[0][0];
    for (int j = 1; j < k_lanes; ++j) s += lanes[j / k_width][j % k_width];
    chunk_sums[c] = s;
    total += s;
  }
  if constexpr (with_bounds)
    for (int b = 0; b < k_n_bounds; ++b) {
      mass_above[b] = 0.0;
      for (int j = 0; j < k_width; ++j) mass_above[b] += above[b][j];
    }
  return total;
}

inline double weights_and_sum(const float* x, int n, double m, double inv_t, double min_p,
                              double* w, double* chunk_sums) {
  return weights_and_sum<false>(x, n, m, inv_t, min_p, w, chunk_sums, nullptr);
}
inline float horizontal_max(F32v v) {
  float m = v[0];
  for (int j = 1; j < k_f32_width; ++j) m = v[j] > m ? v[j] : m;
  return m;
}
// The largest value and its lowest id, in one pass over 2 * k_width lanes (each lane keeps its
// first maximum; lanes are combined by (value desc, id asc)). `bad`: some entry was NaN or +inf.
struct ArgMax {
  float value = -k_inf;
  int32_t index = -1;
  bool bad = false;
};

inline ArgMax lane_argmax(const float* x, int n) {
  const F32v inf = F32v{} + k_inf;
  F32v acc = -inf;
  I32v at;
  for (int j = 0; j < k_f32_width; ++j) at[j] = j;
  I32v index = at;
  I32v flags = {};
  int i = 0;
  for (; i + k_f32_width <= n; i += k_f32_width) {
    F32v v;
    std::memcpy(&v, x + i, sizeof(v));
    const I32v better = v > acc;
    acc = better ? v : acc;
    at = better ? index : at;
    index += k_f32_width;
    flags |= ~(v < inf);
  }
  ArgMax best;
  int bad = 0;
  for (int j = 0; j < k_f32_width && i >= k_f32_width; ++j) {
    if (acc[j] > best.value || (acc[j] == best.value && at[j] < best.index) || best.index < 0) {
      best.value = acc[j];
      best.index = at[j];
    }
    bad |= flags[j];
  }
  for (; i < n; ++i) {
    if (x[i] > best.value || best.index < 0) {
      best.value = x[i];
      best.index = i;
    }
    bad |= !(x[i] < k_inf);
  }
  best.bad = bad != 0;
  return best;
}

}  // namespace ossa::sampler_kernels
