// Matmul kernels per weight type. See matmul.h for the batch-invariance contract.
//
// Quantized path, per 32-element block b of weight row o and activation row r:
//
//   lanes[0..7] = int32 sums of 4 consecutive w*x products   (vpdpbusd; exact)
//   acc[r]     += float(lanes) * (w_scale(lanes) * x.d)       (8 f32 lanes, one FMA)
//   acc_min[r] += w_min * x.s                                  (Q4_1/Q4_K only, scalar FMA)
//
// and y = horizontal_sum(acc) + acc_min at the end. Signed weights use the sign trick
// (|w| as u8, sign(w)*x as s8) because vpdpbusd multiplies u8 by s8.
#include "kernels/matmul.h"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <string>

#if defined(__AVX2__)
// GCC 12 flags the _mm512_undefined_* inside the intrinsic headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

constexpr int k_row_tile = 4;      // activation rows sharing one decoded weight block
constexpr int64_t k_out_chunk = 16;  // output rows per scheduling unit

#if defined(__AVX2__)

// int32 lanes l = sum_{i<4} u[4l+i] * s[4l+i]; identical integers on every path.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

inline float hsum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 packed bytes -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  return _mm256_set_m128i(hi, lo);
}

// Accumulates one weight block into R rows. `w` holds u8 weights (kSigned = false) or s8 weights.
template <int R, bool kSigned>
inline void accumulate(__m256 (&acc)[R], __m256i w, __m256 w_scale, const BlockQ8* const* x,
                       int64_t b) {
  const __m256i wu = kSigned ? _mm256_abs_epi8(w) : w;
  for (int r = 0; r < R; ++r) {
    const BlockQ8& xb = x[r][b];
    __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
    if (kSigned) xv = _mm256_sign_epi8(xv, w);
    const __m256 scale = _mm256_mul_ps(w_scale, _mm256_set1_ps(xb.d));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(wu, xv)), scale, acc[r]);
  }
}

template <int R>
void dot_q4_0(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
  const BlockQ4_0* w = reinterpret_cast<const BlockQ4_0*>(row);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(w[b].qs), _mm256_set1_epi8(8));
    accumulate<R, true>(acc, q, _mm256_set1_ps(f16_to_f32(w[b].d)), x, b);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

template <int R>
void dot_q4_1(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
  const BlockQ4_1* w = reinterpret_cast<const BlockQ4_1*>(row);
  __m256 acc[R];
  float acc_min[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), acc_min[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    accumulate<R, false>(acc, unpack_nibbles(w[b].qs), _mm256_set1_ps(f16_to_f32(w[b].d)), x, b);
    const float m = f16_to_f32(w[b].m);
    for (int r = 0; r < R; ++r) acc_min[r] = std::fma(m, x[r][b].s, acc_min[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + acc_min[r];
}

template <int R>
void dot_q8_0(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
  const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(row);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    accumulate<R, true>(acc, q, _mm256_set1_ps(f16_to_f32(w[b].d)), x, b);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

template <int R>
void dot_q4_k(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
  const BlockQ4_K* w = reinterpret_cast<const BlockQ4_K*>(row);
  __m256 acc[R];
  float acc_min[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), acc_min[r] = 0.0f;
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    const float d = f16_to_f32(w[sb].d), dmin = f16_to_f32(w[sb].dmin);
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[sb].qs + 32 * j));
      for (int h = 0; h < 2; ++h) {
        int sc, m;
        q4_k_scale_min(2 * j + h, w[sb].scales, sc, m);
        const __m256i q = h == 0 ? _mm256_and_si256(v, mask)
                                 : _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        const int64_t b = sb * 8 + 2 * j + h;
        accumulate<R, false>(acc, q, _mm256_set1_ps(d * static_cast<float>(sc)), x, b);
        const float wm = dmin * static_cast<float>(m);
        for (int r = 0; r < R; ++r) acc_min[r] = std::fma(-wm, x[r][b].s, acc_min[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + acc_min[r];
}

template <int R>
void dot_q6_k(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
  const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(row);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i k32 = _mm256_set1_epi8(32);
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    const float d = f16_to_f32(w[sb].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w[sb].ql + 64 * half;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[sb].qh + 32 * half));
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
      q[1] = _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
      const int8_t* sc = w[sb].scales + 8 * half;
      for (int k = 0; k < 4; ++k) {
        const float s0 = d * static_cast<float>(sc[2 * k]), s1 = d * static_cast<float>(sc[2 * k + 1]);
        const __m256 w_scale = _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1);
        accumulate<R, true>(acc, _mm256_sub_epi8(q[k], k32), w_scale, x, sb * 8 + 4 * half + k);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

// Float weights: f32 lanes (16 with AVX-512, else 8), tail masked, one horizontal sum at the end.
#if defined(__AVX512F__)
using FVec = __m512;
constexpr int k_lanes = 16;
inline FVec fzero() { return _mm512_setzero_ps(); }
inline FVec fset1(float v) { return _mm512_set1_ps(v); }
inline FVec fload(const float* p, int n) {
  return n == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
inline FVec wload(DType t, const uint8_t* row, int64_t i, int n) {
  const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
  if (t == DType::F32) return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i);
  if (t == DType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline FVec ffma(FVec a, FVec b, FVec c) { return _mm512_fmadd_ps(a, b, c); }
inline float fsum(FVec v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum8(_mm256_add_ps(lo, hi));
}
#else
using FVec = __m256;
constexpr int k_lanes = 8;
inline FVec fzero() { return _mm256_setzero_ps(); }
inline FVec fset1(float v) { return _mm256_set1_ps(v); }
inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline FVec fload(const float* p, int n) {
  return n == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
}
inline FVec wload(DType t, const uint8_t* row, int64_t i, int n) {
  if (t == DType::F32) return fload(reinterpret_cast<const float*>(row) + i, n);
  const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + i;
  alignas(16) uint16_t tmp[8] = {};
  for (int j = 0; j < n; ++j) tmp[j] = p[j];
  const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
  if (t == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline FVec ffma(FVec a, FVec b, FVec c) { return _mm256_fmadd_ps(a, b, c); }
inline float fsum(FVec v) { return hsum8(v); }
#endif

template <int R>
void dot_float(DType t, const uint8_t* row, const float* const* x, int64_t cols, float* out) {
  FVec acc[R];
  for (int r = 0; r < R; ++r) acc[r] = fzero();
  for (int64_t i = 0; i < cols; i += k_lanes) {
    const int n = static_cast<int>(cols - i < k_lanes ? cols - i : k_lanes);
    const FVec w = wload(t, row, i, n);
    for (int r = 0; r < R; ++r) acc[r] = ffma(w, fload(x[r] + i, n), acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = fsum(acc[r]);
}

// Quantized weights with f32 activations: each 32-element block is decoded to int8 in registers,
// widened to f32, scaled (w = q * scale + min, one FMA) and multiplied into every row's f32 lanes.
// Results match a float32 product with the dequantized weights up to summation order.
struct QBlock {
  __m256i q;          // 32 quants, s8 or u8
  float scale[2];     // for elements 0..15 and 16..31
  float min;          // added to every weight of the block
};

template <DType T>
inline QBlock decode_block(const uint8_t* row, int64_t b) {
  QBlock o{};
  if constexpr (T == DType::Q4_0) {
    const BlockQ4_0& w = reinterpret_cast<const BlockQ4_0*>(row)[b];
    o.q = _mm256_sub_epi8(unpack_nibbles(w.qs), _mm256_set1_epi8(8));
    o.scale[0] = o.scale[1] = f16_to_f32(w.d);
  } else if constexpr (T == DType::Q4_1) {
    const BlockQ4_1& w = reinterpret_cast<const BlockQ4_1*>(row)[b];
    o.q = unpack_nibbles(w.qs);
    o.scale[0] = o.scale[1] = f16_to_f32(w.d);
    o.min = f16_to_f32(w.m);
  } else if constexpr (T == DType::Q8_0) {
    const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(row)[b];
    o.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
    o.scale[0] = o.scale[1] = f16_to_f32(w.d);
  } else if constexpr (T == DType::Q4_K) {
    const BlockQ4_K& w = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * (sub / 2)));
    o.q = _mm256_and_si256(sub % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
    int sc, m;
    q4_k_scale_min(sub, w.scales, sc, m);
    o.scale[0] = o.scale[1] = f16_to_f32(w.d) * static_cast<float>(sc);
    o.min = -(f16_to_f32(w.dmin) * static_cast<float>(m));
  } else {
    const BlockQ6_K& w = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), half = sub / 4, k = sub % 4;
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * half + 32 * (k % 2)));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh + 32 * half));
    const __m256i lo = _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F));
    // bits 2k, 2k+1 of qh move to bits 4, 5
    const __m256i hs = k == 0 ? _mm256_slli_epi16(h, 4) : k == 1 ? _mm256_slli_epi16(h, 2)
                     : k == 2 ? h : _mm256_srli_epi16(h, 2);
    const __m256i hi = _mm256_and_si256(hs, _mm256_set1_epi8(0x30));
    o.q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
    const float d = f16_to_f32(w.d);
    const int8_t* sc = w.scales + 8 * half + 2 * k;
    o.scale[0] = d * static_cast<float>(sc[0]);
    o.scale[1] = d * static_cast<float>(sc[1]);
  }
  return o;
}

template <DType T>
constexpr bool k_signed_quants = T == DType::Q4_0 || T == DType::Q8_0 || T == DType::Q6_K;

// Lanes [c * k_lanes, (c + 1) * k_lanes) of 32 quants as f32.
template <bool kSigned>
inline FVec quants_to_f32(__m256i q, int c) {
#if defined(__AVX512F__)
  const __m128i part = c == 0 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
  return _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(part) : _mm512_cvtepu8_epi32(part));
#else
  __m128i part = c < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
  if (c % 2) part = _mm_srli_si128(part, 8);
  return _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(part) : _mm256_cvtepu8_epi32(part));
#endif
}

template <DType T, int R>
void fdot_quant(const uint8_t* row, const float* const* x, int64_t nb, float* out) {
  FVec acc[R];
  for (int r = 0; r < R; ++r) acc[r] = fzero();
  for (int64_t b = 0; b < nb; ++b) {
    const QBlock blk = decode_block<T>(row, b);
    const FVec vmin = fset1(blk.min);
    for (int c = 0; c < 32 / k_lanes; ++c) {
      const FVec w = ffma(quants_to_f32<k_signed_quants<T>>(blk.q, c), fset1(blk.scale[c * k_lanes / 16]), vmin);
      for (int r = 0; r < R; ++r) acc[r] = ffma(w, fload(x[r] + b * 32 + c * k_lanes, k_lanes), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = fsum(acc[r]);
}

#else  // scalar fallback: the same lane structure written out

// Block b (32 elements) of a weight row as integers plus the per-lane scale and the minimum term.
void decode_block_scalar(DType t, const uint8_t* row, int64_t b, int* w, float* scale, float& wmin) {
  wmin = 0.0f;
  auto fill = [&](float s) { for (int l = 0; l < 8; ++l) scale[l] = s; };
  switch (t) {
    case DType::Q4_0: {
      const BlockQ4_0& q = reinterpret_cast<const BlockQ4_0*>(row)[b];
      for (int j = 0; j < 16; ++j) w[j] = (q.qs[j] & 0xF) - 8, w[j + 16] = (q.qs[j] >> 4) - 8;
      fill(f16_to_f32(q.d));
      return;
    }
    case DType::Q4_1: {
      const BlockQ4_1& q = reinterpret_cast<const BlockQ4_1*>(row)[b];
      for (int j = 0; j < 16; ++j) w[j] = q.qs[j] & 0xF, w[j + 16] = q.qs[j] >> 4;
      fill(f16_to_f32(q.d));
      wmin = f16_to_f32(q.m);
      return;
    }
    case DType::Q8_0: {
      const BlockQ8_0& q = reinterpret_cast<const BlockQ8_0*>(row)[b];
      for (int j = 0; j < 32; ++j) w[j] = q.qs[j];
      fill(f16_to_f32(q.d));
      return;
    }
    case DType::Q4_K: {
      const BlockQ4_K& q = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
      const int sub = static_cast<int>(b % 8), j = sub / 2;
      for (int l = 0; l < 32; ++l) w[l] = sub % 2 == 0 ? q.qs[32 * j + l] & 0xF : q.qs[32 * j + l] >> 4;
      int sc, m;
      q4_k_scale_min(sub, q.scales, sc, m);
      fill(f16_to_f32(q.d) * static_cast<float>(sc));
      wmin = -(f16_to_f32(q.dmin) * static_cast<float>(m));
      return;
    }
    case DType::Q6_K: {
      const BlockQ6_K& q = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
      const int sub = static_cast<int>(b % 8), half = sub / 4, k = sub % 4;
      const uint8_t* ql = q.ql + 64 * half + (k % 2) * 32;
      const uint8_t* qh = q.qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        const int lo = k < 2 ? ql[l] & 0xF : ql[l] >> 4;
        w[l] = (lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
      }
      const float d = f16_to_f32(q.d);
      const int8_t* sc = q.scales + 8 * half + 2 * k;
      for (int l = 0; l < 8; ++l) scale[l] = d * static_cast<float>(sc[l / 4]);
      return;
    }
    default:
      OSSA_ASSERT(false);
  }
}

template <int R>
void dot_quant_scalar(DType t, const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
  for (int r = 0; r < R; ++r) {
    float acc[8] = {}, acc_min = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      int w[32];
      float scale[8], wmin;
      decode_block_scalar(t, row, b, w, scale, wmin);
      for (int l = 0; l < 8; ++l) {
        int s = 0;
        for (int i = 0; i < 4; ++i) s += w[4 * l + i] * x[r][b].qs[4 * l + i];
        acc[l] = std::fma(static_cast<float>(s), scale[l] * x[r][b].d, acc[l]);
      }
      if (wmin != 0.0f || t == DType::Q4_1 || t == DType::Q4_K) acc_min = std::fma(wmin, x[r][b].s, acc_min);
    }
    out[r] = (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) + acc_min;
  }
}

#define OSSA_SCALAR_DOT(name, type)                                                       \
  template <int R>                                                                        \
  void name(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {        \
    dot_quant_scalar<R>(type, row, x, nb, out);                                           \
  }
OSSA_SCALAR_DOT(dot_q4_0, DType::Q4_0)
OSSA_SCALAR_DOT(dot_q4_1, DType::Q4_1)
OSSA_SCALAR_DOT(dot_q8_0, DType::Q8_0)
OSSA_SCALAR_DOT(dot_q4_k, DType::Q4_K)
OSSA_SCALAR_DOT(dot_q6_k, DType::Q6_K)
#undef OSSA_SCALAR_DOT

template <DType T, int R>
void fdot_quant(const uint8_t* row, const float* const* x, int64_t nb, float* out) {
  for (int r = 0; r < R; ++r) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      int q[32];
      float scale[8], wmin;
      decode_block_scalar(T, row, b, q, scale, wmin);
      for (int i = 0; i < 32; ++i)
        acc = std::fma(std::fma(static_cast<float>(q[i]), scale[i / 4], wmin), x[r][b * 32 + i], acc);
    }
    out[r] = acc;
  }
}

template <int R>
void dot_float(DType t, const uint8_t* row, const float* const* x, int64_t cols, float* out) {
  for (int r = 0; r < R; ++r) {
    float acc = 0.0f;
    for (int64_t i = 0; i < cols; ++i) {
      float wv;
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
      if (t == DType::F32) wv = reinterpret_cast<const float*>(row)[i];
      else if (t == DType::F16) wv = f16_to_f32(h[i]);
      else wv = bf16_to_f32(h[i]);
      acc = std::fma(wv, x[r][i], acc);
    }
    out[r] = acc;
  }
}
#endif

using QuantDot = void (*)(const uint8_t*, const BlockQ8* const*, int64_t, float*);
using FloatActDot = void (*)(const uint8_t*, const float* const*, int64_t, float*);

template <int R>
FloatActDot float_act_dot(DType t) {
  switch (t) {
    case DType::Q4_0: return fdot_quant<DType::Q4_0, R>;
    case DType::Q4_1: return fdot_quant<DType::Q4_1, R>;
    case DType::Q8_0: return fdot_quant<DType::Q8_0, R>;
    case DType::Q4_K: return fdot_quant<DType::Q4_K, R>;
    case DType::Q6_K: return fdot_quant<DType::Q6_K, R>;
    default: return nullptr;
  }
}

template <int R>
QuantDot quant_dot(DType t) {
  switch (t) {
    case DType::Q4_0: return dot_q4_0<R>;
    case DType::Q4_1: return dot_q4_1<R>;
    case DType::Q8_0: return dot_q8_0<R>;
    case DType::Q4_K: return dot_q4_k<R>;
    case DType::Q6_K: return dot_q6_k<R>;
    default: return nullptr;
  }
}

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

}  // namespace

void set_quantized_activations(bool on) { g_quantized_activations = on; }
bool quantized_activations() { return g_quantized_activations; }

void matmul_range(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy, int64_t o_begin,
                  int64_t o_end) {
  const int64_t n = x.n_rows;
  if (dtype_quantized(w.type) && x.q8 == nullptr) {
    const int64_t nb = x.cols / k_qblock;
    const FloatActDot dot4 = float_act_dot<4>(w.type), dot1 = float_act_dot<1>(w.type);
    const float* rows[k_row_tile];
    float out[k_row_tile];
    for (int64_t r0 = 0; r0 < n; r0 += k_row_tile) {
      const int rt = static_cast<int>(n - r0 < k_row_tile ? n - r0 : k_row_tile);
      for (int r = 0; r < rt; ++r) rows[r] = x.f32 + (r0 + r) * x.cols;
      for (int64_t o = o_begin; o < o_end; ++o) {
        if (rt == k_row_tile) {
          dot4(w.row(o), rows, nb, out);
        } else {
          for (int r = 0; r < rt; ++r) dot1(w.row(o), rows + r, nb, out + r);
        }
        for (int r = 0; r < rt; ++r) y[(r0 + r) * ldy + o] = out[r];
      }
    }
    return;
  }
  if (dtype_quantized(w.type)) {
    const int64_t nb = x.cols / k_qblock;
    const QuantDot dot4 = quant_dot<4>(w.type), dot1 = quant_dot<1>(w.type);
    const BlockQ8* rows[k_row_tile];
    float out[k_row_tile];
    for (int64_t r0 = 0; r0 < n; r0 += k_row_tile) {
      const int rt = static_cast<int>(n - r0 < k_row_tile ? n - r0 : k_row_tile);
      for (int r = 0; r < rt; ++r) rows[r] = x.q8 + (r0 + r) * nb;
      for (int64_t o = o_begin; o < o_end; ++o) {
        const uint8_t* row = w.row(o);
        if (rt == k_row_tile) {
          dot4(row, rows, nb, out);
        } else {
          for (int r = 0; r < rt; ++r) dot1(row, rows + r, nb, out + r);
        }
        for (int r = 0; r < rt; ++r) y[(r0 + r) * ldy + o] = out[r];
      }
    }
    return;
  }
  const float* rows[k_row_tile];
  float out[k_row_tile];
  for (int64_t r0 = 0; r0 < n; r0 += k_row_tile) {
    const int rt = static_cast<int>(n - r0 < k_row_tile ? n - r0 : k_row_tile);
    for (int r = 0; r < rt; ++r) rows[r] = x.f32 + (r0 + r) * x.cols;
    for (int64_t o = o_begin; o < o_end; ++o) {
      if (rt == k_row_tile) {
        dot_float<4>(w.type, w.row(o), rows, x.cols, out);
      } else {
        for (int r = 0; r < rt; ++r) dot_float<1>(w.type, w.row(o), rows + r, x.cols, out + r);
      }
      for (int r = 0; r < rt; ++r) y[(r0 + r) * ldy + o] = out[r];
    }
  }
}

void matmul(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy) {
  check(w, x);
  const int64_t n_chunks = (w.rows + k_out_chunk - 1) / k_out_chunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t o_end = (c + 1) * k_out_chunk < w.rows ? (c + 1) * k_out_chunk : w.rows;
    matmul_range(w, x, y, ldy, c * k_out_chunk, o_end);
  }
}

}  // namespace ossa
