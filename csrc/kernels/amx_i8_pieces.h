#pragma once
// The activations' three int8 pieces of the exact integer AMX / VNNI kernels (matmul_amx_i8.cpp:
// per 32 values; matmul_amx_q23k.cpp: per 64): with y = x * (127 / max|x|) over the block,
// a0 = rint(y), a1 = rint(128 (y - a0)), a2 = rint(16 (128 (y - a0) - a1)); every step but the
// first product is exact, |a0| <= 127, |a1| <= 64, |a2| <= 8.
#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

namespace ossa {

// 16 scaled values y -> their pieces (16 bytes at each of p0, p1, p2); returns the integers
// 2^11 a0 + 16 a1 + a2 (below 2^24 in magnitude, as is their sum: exact in f32). With one_piece
// (a model loaded with quantized_activations) a1 = a2 = 0: the activations are a0 alone, 8-bit
// blocks as llama.cpp's, and the kernels skip the zero pieces' products.
inline __m512 i8_pieces16(__m512 y, int8_t* p0, int8_t* p1, int8_t* p2, bool one_piece = false) {
  constexpr int k_rint = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 a0 = _mm512_roundscale_ps(y, k_rint);
  const __m512 r1 = _mm512_mul_ps(_mm512_sub_ps(y, a0), _mm512_set1_ps(128.0f));  // exact
  const __m512 a1 = one_piece ? _mm512_setzero_ps() : _mm512_roundscale_ps(r1, k_rint);
  const __m512 a2 = one_piece
                        ? _mm512_setzero_ps()
                        : _mm512_roundscale_ps(
                              _mm512_mul_ps(_mm512_sub_ps(r1, a1), _mm512_set1_ps(16.0f)), k_rint);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p0), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(a0)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p1), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(a1)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p2), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(a2)));
  return _mm512_fmadd_ps(a0, _mm512_set1_ps(2048.0f),
                         _mm512_fmadd_ps(a1, _mm512_set1_ps(16.0f), a2));
}

}  // namespace ossa
#endif
