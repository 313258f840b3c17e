// f32 tile kernels for Q2_K and Q3_K weights (layouts in kernels/quant.h; the tile loop and its
// batch-invariance contract in kernels/matmul_tile.h).
//
// Both have a scale (Q2_K also a minimum) per 16 values, like Q6_K: block b of the tile loop (32
// values, b % 8 = 4h + s in its super-block) is two scale groups, one per 16-lane half. The 2-bit
// field is (qs[32h + l] >> 2s) & 3; Q3_K's third bit (bit 4h + s of hmask[l]) becomes a lane mask
// (vptestmb) that adds 4 to the index. Each half looks its weights up in a table of its group,
// table[k] = fma(k, scale, min) (Q3_K: (k - 4) * scale), exactly the dequantized value of quant k.
#include "kernels/matmul_tile.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

#if defined(__AVX512F__)
using tile::Block32;
using tile::iota16;
using tile::load16;

// The 2-bit fields at `shift` of 32 bytes, as 32-bit lanes (elements 0..15, 16..31).
inline void crumbs(const uint8_t* qs, int shift, __m512i& e0, __m512i& e1) {
  const __m128i sh = _mm_cvtsi32_si128(shift);
  const __m512i m3 = _mm512_set1_epi32(3);
  e0 = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(qs)), sh), m3);
  e1 = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(qs + 16)), sh), m3);
}
#endif

struct Q2_K {
  // scale and minimum of group g
  static void group(const BlockQ2_K& w, int g, float& scale, float& min) {
    scale = f16_to_f32(w.d) * static_cast<float>(w.scales[g] & 0xF);
    min = -(f16_to_f32(w.dmin) * static_cast<float>(w.scales[g] >> 4));
  }
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ2_K& w = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    for (int l = 0; l < 32; ++l) q[l] = (w.qs[32 * h + l] >> (2 * s)) & 3;
    group(w, 2 * sub, scale[0], min[0]);
    group(w, 2 * sub + 1, scale[1], min[1]);
  }
#if defined(__AVX512F__)
  static Block32 decode(const uint8_t* row, int64_t b) {
    const BlockQ2_K& w = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    __m512i e0, e1;
    crumbs(w.qs + 32 * h, 2 * s, e0, e1);
    float s0, m0, s1, m1;
    group(w, 2 * sub, s0, m0);
    group(w, 2 * sub + 1, s1, m1);
    const __m512 t0 = _mm512_fmadd_ps(iota16(), _mm512_set1_ps(s0), _mm512_set1_ps(m0));
    const __m512 t1 = _mm512_fmadd_ps(iota16(), _mm512_set1_ps(s1), _mm512_set1_ps(m1));
    return {_mm512_permutexvar_ps(e0, t0), _mm512_permutexvar_ps(e1, t1)};
  }
#endif
};

struct Q3_K {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ3_K& w = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    for (int l = 0; l < 32; ++l)
      q[l] = ((w.qs[32 * h + l] >> (2 * s)) & 3) - (((w.hmask[l] >> sub) & 1) ? 0 : 4);
    const float d = f16_to_f32(w.d);
    scale[0] = d * static_cast<float>(q3_k_scale(w.scales, 2 * sub));
    scale[1] = d * static_cast<float>(q3_k_scale(w.scales, 2 * sub + 1));
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX512F__)
  static Block32 decode(const uint8_t* row, int64_t b) {
    const BlockQ3_K& w = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    __m512i e0, e1;
    crumbs(w.qs + 32 * h, 2 * s, e0, e1);
    // third bit: bit 4h + s (= sub) of hmask[l]
    const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << sub));
    const __m512i k4 = _mm512_set1_epi32(4);
    e0 = _mm512_mask_or_epi32(e0, _mm_test_epi8_mask(load16(w.hmask), bit), e0, k4);
    e1 = _mm512_mask_or_epi32(e1, _mm_test_epi8_mask(load16(w.hmask + 16), bit), e1, k4);
    const float d = _cvtsh_ss(w.d);
    const __m512 level = _mm512_sub_ps(iota16(), _mm512_set1_ps(4.0f));  // index k: k - 4
    const __m512 t0 = _mm512_mul_ps(level, _mm512_set1_ps(d * static_cast<float>(q3_k_scale(w.scales, 2 * sub))));
    const __m512 t1 = _mm512_mul_ps(level, _mm512_set1_ps(d * static_cast<float>(q3_k_scale(w.scales, 2 * sub + 1))));
    return {_mm512_permutexvar_ps(e0, t0), _mm512_permutexvar_ps(e1, t1)};
  }
#endif
};

}  // namespace

F32Tile f32_tile_q23k(DType type, int rows) {
  switch (type) {
    case DType::Q2_K: return tile::tile_for_rows<Q2_K>(rows);
    case DType::Q3_K: return tile::tile_for_rows<Q3_K>(rows);
    default: OSSA_ASSERT(false);
  }
  return {};
}

}  // namespace ossa
