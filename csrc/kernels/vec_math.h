#pragma once
// Vector math shared by the kernels: the horizontal sum and max of 8 lanes (AVX2 builds), exp16
// (AVX-512 builds) and exp8 (AVX2 builds without AVX-512).
#if defined(__AVX2__)
// GCC 12 flags the _mm512_undefined_* inside the intrinsic headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace ossa {

inline float hsum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace ossa
#endif

#if defined(__AVX512F__)
namespace ossa {

// exp(x) per lane, Cephes' expf: x = n ln2 + r, a degree-5 polynomial in r, times 2^n (scalef).
// Within 2 ulp of expf for x in [-87, 88]; inputs are clamped to that range (so exp of a very
// negative x is ~1e-38, not 0, and of a large x ~1.6e38, not inf).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

// cap * tanh(x / cap) per lane (Gemma 2's attention soft-capping). tanh(y) is y times an odd
// Taylor polynomial to y^11 for |y| < 0.3 (truncation < 1e-9 relative), else sign(y) (1 - e) /
// (1 + e) with e = exp16(-2|y|) (no cancellation there: 1 - e >= 0.45). Within a few ulp of
// std::tanh; NaN stays NaN, +-inf gives +-cap.
inline __m512 softcap16(__m512 x, float cap) {
  const __m512 y = _mm512_div_ps(x, _mm512_set1_ps(cap));
  const __m512 ay = _mm512_abs_ps(y), y2 = _mm512_mul_ps(y, y);
  __m512 p = _mm512_set1_ps(-1382.0f / 155925.0f);
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(62.0f / 2835.0f));
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(-17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, y2), y, y);
  const __m512 e = exp16(_mm512_mul_ps(ay, _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  big = _mm512_or_ps(big, _mm512_and_ps(y, _mm512_set1_ps(-0.0f)));  // the sign of y
  __m512 t =
      _mm512_mask_mov_ps(big, _mm512_cmp_ps_mask(ay, _mm512_set1_ps(0.3f), _CMP_LT_OQ), small);
  t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  return _mm512_mul_ps(t, _mm512_set1_ps(cap));
}

}  // namespace ossa
#elif defined(__AVX2__) && (defined(__FMA__) || defined(OSSA_FMA_EMULATED))
namespace ossa {

// exp16's algorithm on 8 lanes (AVX2 has no scalef: 2^n is built from its exponent bits, n in
// [-126, 127] once x is clamped, so y 2^n is the same product).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

}  // namespace ossa
#endif
