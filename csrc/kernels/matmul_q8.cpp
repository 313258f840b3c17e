// The 8-bit activation path of the quantized matmuls (a model loaded with quantized_activations).
//
// Per 32-element block b of weight row o and activation row r:
//
//   lanes[0..7] = int32 sums of 4 consecutive w*x products   (vpdpbusd; exact)
//   acc[r]     += float(lanes) * (w_scale(lanes) * x.d)       (8 f32 lanes, one FMA)
//   acc_min[r] += w_min * x.s                                  (Q4_1/Q4_K only, scalar FMA)
//
// and y = horizontal_sum(acc) + acc_min at the end. Signed weights use the sign trick
// (|w| as u8, sign(w)*x as s8) because vpdpbusd multiplies u8 by s8.
#include <cmath>

#include "kernels/matmul_kernels.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {

void decode_block_scalar(DType t, const uint8_t* row, int64_t b, int* w, float* scale,
                         float& wmin) {
  wmin = 0.0f;
  auto fill = [&](float s) {
    for (int l = 0; l < 8; ++l) scale[l] = s;
  };
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
      for (int l = 0; l < 32; ++l)
        w[l] = sub % 2 == 0 ? q.qs[32 * j + l] & 0xF : q.qs[32 * j + l] >> 4;
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

namespace {

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
        const __m256i q =
            h == 0 ? _mm256_and_si256(v, mask) : _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
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
      q[0] =
          _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
      q[1] =
          _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
      q[2] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
      const int8_t* sc = w[sb].scales + 8 * half;
      for (int k = 0; k < 4; ++k) {
        const float s0 = d * static_cast<float>(sc[2 * k]),
                    s1 = d * static_cast<float>(sc[2 * k + 1]);
        const __m256 w_scale = _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1);
        accumulate<R, true>(acc, _mm256_sub_epi8(q[k], k32), w_scale, x, sb * 8 + 4 * half + k);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

#else  // scalar fallback: the same lane structure written out

template <int R>
void dot_quant_scalar(DType t, const uint8_t* row, const BlockQ8* const* x, int64_t nb,
                      float* out) {
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
      if (wmin != 0.0f || t == DType::Q4_1 || t == DType::Q4_K)
        acc_min = std::fma(wmin, x[r][b].s, acc_min);
    }
    out[r] = (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))) +
             acc_min;
  }
}

#define OSSA_SCALAR_DOT(name, type)                                                \
  template <int R>                                                                 \
  void name(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) { \
    dot_quant_scalar<R>(type, row, x, nb, out);                                    \
  }
OSSA_SCALAR_DOT(dot_q4_0, DType::Q4_0)
OSSA_SCALAR_DOT(dot_q4_1, DType::Q4_1)
OSSA_SCALAR_DOT(dot_q8_0, DType::Q8_0)
OSSA_SCALAR_DOT(dot_q4_k, DType::Q4_K)
OSSA_SCALAR_DOT(dot_q6_k, DType::Q6_K)
#undef OSSA_SCALAR_DOT
#endif

template <int R>
Q8DotFn q8_dot_rows(DType t) {
  switch (t) {
    case DType::Q4_0:
      return dot_q4_0<R>;
    case DType::Q4_1:
      return dot_q4_1<R>;
    case DType::Q8_0:
      return dot_q8_0<R>;
    case DType::Q4_K:
      return dot_q4_k<R>;
    case DType::Q6_K:
      return dot_q6_k<R>;
    default:
      return nullptr;
  }
}

}  // namespace

Q8DotFn q8_dot(DType type, int rows) {
  OSSA_ASSERT(rows == 1 || rows == 4);
  if (const Q8DotFn f = q8_dot_iq23(type, rows); f != nullptr) return f;
  return rows == 4 ? q8_dot_rows<4>(type) : q8_dot_rows<1>(type);
}

}  // namespace ossa
