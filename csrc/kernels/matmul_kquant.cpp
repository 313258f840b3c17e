// Q4_K and Q6_K with f32 activations on AVX-512: the tile kernels and the activation layout they
// read.
//
// The quants are turned into f32 without widening bytes first. 64 bytes of 4-bit quants are loaded
// as 16 dwords; shifting every dword right by 4k puts nibble k of each dword in its low 4 bits, and
// vpermps, which reads only those 4 bits as its index, looks the nibble up in a table of floats:
// two instructions for 16 weights. Element order follows the bytes, so the activations are laid out
// once per matmul call in the same order (kquant_prepare_row), instead of the weights at load:
//
//   dword-vector v, lane i = bytes 4i..4i+3;  f_k = table[(v >> 4k) & 15]  is nibble k % 2 of byte
//   4i + k / 2 Q4_K (128 elements per 64 bytes of qs): element 64 (i / 8) + 32 (k % 2) + 4 (i % 8)
//   + k / 2 Q6_K (128 elements per 64 bytes of ql): element 32 (i / 8) + 64 (k % 2) + 4 (i % 8) + k
//   / 2
//
// Scales are taken out of the sums: per 64 bytes, the products of even k and those of odd k are
// summed separately (each sum's lanes belong to two or four sub-blocks, which the scale vector
// matches), then each sum is multiplied by its scales into the total:
//
//   acc = f_0 x_0;  acc = fma(f_2, x_2, acc); ... f_6     tot = fma(acc, scales_even, tot)
//   acc = f_1 x_1;  acc = fma(f_3, x_3, acc); ... f_7     tot = fma(acc, scales_odd, tot)
//
// Q4_K's minimums multiply the sums of each 32 activations (kept after the permuted row):
// tot -= dmin m_j * sum(x of sub-block j), once per super-block. Q6_K's two high bits come from qh
// (broadcast to both halves of a register, shifted so that the right 2-bit field is lowest) through
// a second table holding 16 h - 32, so w = table_lo + table_hi is the signed quant exactly.
//
// Every output element gets this same sequence whatever the tile shape (mo weight rows, rows
// activation rows), which keeps the matmul batch invariant.
#include <cstring>

#include "kernels/matmul_kernels.h"

namespace ossa {

#if defined(__AVX512F__)
namespace {

constexpr int q4k_elem(int k, int i) { return 64 * (i / 8) + 32 * (k % 2) + 4 * (i % 8) + k / 2; }
constexpr int q6k_elem(int k, int i) { return 32 * (i / 8) + 64 * (k % 2) + 4 * (i % 8) + k / 2; }

inline float fsum16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum8(_mm256_add_ps(lo, hi));
}

inline __m512 iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// Lanes 0..7: d * sc_j, lanes 8..15: dmin * m_j, for the 8 sub-blocks of a Q4_K super-block. The
// 6-bit fields are gathered with 32-bit masks and shifts (4 sub-blocks per dword), exactly as
// q4_k_scale_min reads them one at a time.
inline __m512 q4k_scales(const BlockQ4_K& b) {
  uint32_t s[3];
  std::memcpy(s, b.scales, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  alignas(16) uint32_t v[4] = {
      s[0] & low6,                                         // sc 0..3
      (s[2] & low4) | (((s[0] >> 6) & top2) << 4),         // sc 4..7
      s[1] & low6,                                         // m 0..3
      ((s[2] >> 4) & low4) | (((s[1] >> 6) & top2) << 4),  // m 4..7
  };
  const __m512 q =
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(v))));
  const __m512 dm =
      _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&b.d))));
  const __m512 dd =
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), dm);
  return _mm512_mul_ps(q, dd);
}

template <int MO, int R>
void q4k_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  const int64_t nsb = cols / 256;
  const float* xs[R];  // per super-block: 8 zeros, then the 8 sub-block sums
  for (int r = 0; r < R; ++r) xs[r] = x[r] + cols;
  const __m512 table = iota16();
  // Scale vectors of 64-byte chunk c: even k -> sub-blocks 4c (lanes 0..7) and 4c + 2 (8..15).
  const __m512i sel[2][2] = {{_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                              _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3)},
                             {_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
                              _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7)}};
  __m512 tot[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) tot[o][r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 sm[MO];
    for (int o = 0; o < MO; ++o) sm[o] = q4k_scales(reinterpret_cast<const BlockQ4_K*>(w[o])[sb]);
    for (int c = 0; c < 2; ++c) {
      __m512i v[MO];
      for (int o = 0; o < MO; ++o)
        v[o] = _mm512_loadu_si512(reinterpret_cast<const BlockQ4_K*>(w[o])[sb].qs + 64 * c);
      const int64_t xo = sb * 256 + c * 128;
#pragma GCC unroll 2
      for (int t = 0; t < 2; ++t) {
        __m512 acc[MO][R];
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const int k = 2 * kk + t;
          __m512 xk[R];
          for (int r = 0; r < R; ++r) xk[r] = _mm512_loadu_ps(x[r] + xo + 16 * k);
          for (int o = 0; o < MO; ++o) {
            const __m512i idx = k == 0 ? v[o] : _mm512_srli_epi32(v[o], 4 * k);
            const __m512 f = _mm512_permutexvar_ps(idx, table);
            for (int r = 0; r < R; ++r)
              acc[o][r] = kk == 0 ? _mm512_mul_ps(f, xk[r]) : _mm512_fmadd_ps(f, xk[r], acc[o][r]);
          }
        }
        for (int o = 0; o < MO; ++o) {
          const __m512 s = _mm512_permutexvar_ps(sel[c][t], sm[o]);
          for (int r = 0; r < R; ++r) tot[o][r] = _mm512_fmadd_ps(acc[o][r], s, tot[o][r]);
        }
      }
    }
    for (int o = 0; o < MO; ++o)
      for (int r = 0; r < R; ++r)
        tot[o][r] =
            _mm512_mask3_fnmadd_ps(sm[o], _mm512_loadu_ps(xs[r] + 16 * sb), tot[o][r], 0xFF00);
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = fsum16(tot[o][r]);
}

template <int MO, int R>
void q6k_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  const int64_t nsb = cols / 256;
  const __m512 lo_table = iota16();
  // Index n (its low 2 bits are the high bits h of the quant): 16 h - 32.
  const __m512 hi_table =
      _mm512_setr_ps(-32, -16, 0, 16, -32, -16, 0, 16, -32, -16, 0, 16, -32, -16, 0, 16);
  // Scale vectors of half h, even/odd k: lane quarter Q -> sub-block 8h + 4 (k % 2) + Q.
  const __m512i sel[2][2] = {
      {_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
       _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)},
      {_mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
       _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15)}};
  // qh byte j holds the high bits of elements j, j + 32, j + 64, j + 96 of the half (2 bits each);
  // lanes 8..15 (elements 32.. of their k) start one field higher.
  const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  __m512 tot[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) tot[o][r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 sc[MO];
    for (int o = 0; o < MO; ++o) {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w[o])[sb];
      const __m512 q = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales))));
      sc[o] = _mm512_mul_ps(q, _mm512_set1_ps(_cvtsh_ss(b.d)));
    }
    for (int h = 0; h < 2; ++h) {
      __m512i lo[MO], hi[MO];
      for (int o = 0; o < MO; ++o) {
        const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w[o])[sb];
        lo[o] = _mm512_loadu_si512(b.ql + 64 * h);
        hi[o] = _mm512_srlv_epi32(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(b.qh + 32 * h))),
                                  upper);
      }
      const int64_t xo = sb * 256 + h * 128;
#pragma GCC unroll 2
      for (int t = 0; t < 2; ++t) {
        __m512 acc[MO][R];
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const int k = 2 * kk + t;
          __m512 xk[R];
          for (int r = 0; r < R; ++r) xk[r] = _mm512_loadu_ps(x[r] + xo + 16 * k);
          for (int o = 0; o < MO; ++o) {
            const __m512i il = k == 0 ? lo[o] : _mm512_srli_epi32(lo[o], 4 * k);
            // field of byte k / 2 for parity k % 2: bit 8 (k / 2) + 4 (k % 2)
            const int hs = 8 * (k / 2) + 4 * (k % 2);
            const __m512i ih = hs == 0 ? hi[o] : _mm512_srli_epi32(hi[o], hs);
            const __m512 f = _mm512_add_ps(_mm512_permutexvar_ps(il, lo_table),
                                           _mm512_permutexvar_ps(ih, hi_table));
            for (int r = 0; r < R; ++r)
              acc[o][r] = kk == 0 ? _mm512_mul_ps(f, xk[r]) : _mm512_fmadd_ps(f, xk[r], acc[o][r]);
          }
        }
        for (int o = 0; o < MO; ++o) {
          const __m512 s = _mm512_permutexvar_ps(sel[h][t], sc[o]);
          for (int r = 0; r < R; ++r) tot[o][r] = _mm512_fmadd_ps(acc[o][r], s, tot[o][r]);
        }
      }
    }
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = fsum16(tot[o][r]);
}

template <int MO, int R>
F32TileFn tile_fn(DType t) {
  return t == DType::Q4_K ? q4k_tile<MO, R> : q6k_tile<MO, R>;
}

}  // namespace

int64_t kquant_prepared_floats(DType t, int64_t cols) {
  if (t == DType::Q4_K || t == DType::Q5_K) return cols + cols / 16;  // Q5_K: matmul_q5.cpp
  if (t == DType::IQ4_XS) return cols;                                // matmul_iq4.cpp
  if (t == DType::Q2_K || t == DType::Q3_K) return cols + cols / 16;  // matmul_q23k.cpp
  if (t == DType::Q6_K) return cols;
  return 0;
}

void kquant_prepare_row(DType t, const float* x, int64_t cols, float* out) {
  if (t == DType::IQ4_XS) return iq4xs_prepare_row(x, cols, out);
  if (t == DType::Q2_K || t == DType::Q3_K) return q23k_prepare_row(x, cols, out);
  static constexpr auto perm = [](bool q4) {
    struct P {
      int e[128];
    } p{};
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < 16; ++i) p.e[16 * k + i] = q4 ? q4k_elem(k, i) : q6k_elem(k, i);
    return p;
  };
  static constexpr auto p4 = perm(true), p6 = perm(false);
  const bool q4 = t == DType::Q4_K || t == DType::Q5_K;  // Q5_K's qs are Q4_K's
  const int* e = q4 ? p4.e : p6.e;
  for (int64_t c = 0; c < cols; c += 128)
    for (int j = 0; j < 128; ++j) out[c + j] = x[c + e[j]];
  if (!q4) return;
  float* sums = out + cols;
  for (int64_t sb = 0; sb < cols / 256; ++sb) {
    for (int j = 0; j < 8; ++j) {
      float s = 0.0f;
      for (int i = 0; i < 32; ++i) s += x[256 * sb + 32 * j + i];
      sums[16 * sb + j] = 0.0f;
      sums[16 * sb + 8 + j] = s;
    }
  }
}

F32Tile kquant_tile(DType t, int rows) {
  switch (rows) {
    case 1:
      return {tile_fn<4, 1>(t), 4};
    case 2:
      return {tile_fn<4, 2>(t), 4};
    case 3:
      return {tile_fn<2, 3>(t), 2};
    case 4:
      return {tile_fn<2, 4>(t), 2};
    case 5:
      return {tile_fn<1, 5>(t), 1};
    case 6:
      return {tile_fn<1, 6>(t), 1};
    case 7:
      return {tile_fn<1, 7>(t), 1};
    default:
      return {tile_fn<1, 8>(t), 1};
  }
}

#else

int64_t kquant_prepared_floats(DType, int64_t) { return 0; }
void kquant_prepare_row(DType, const float*, int64_t, float*) {}
F32Tile kquant_tile(DType, int) { return {}; }

#endif

}  // namespace ossa
