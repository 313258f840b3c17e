#pragma once
// The f32 tile loop generic over a block decoder: Q5_0 / Q5_1 / IQ4_NL (matmul_q5.cpp,
// matmul_iq4.cpp), Q4_0 / Q4_1 / Q8_0 on AVX-512 (matmul_f32.cpp), and Q5_K / Q2_K / Q3_K / IQ4_XS
// in the AVX2 and scalar builds (AVX-512 runs those on matmul_kblock.h's layouts); the contract of
// matmul_kernels.h, in this order of operations:
//
//   for block b (32 weights):  acc = fma(w[b][0..15], x[32b .. 32b+15], acc)
//                              acc = fma(w[b][16..31], x[32b+16 .. 32b+31], acc)
//   y = horizontal_sum(acc)
//
// Every weight is its exact dequantized float32 value, decoded in registers (never expanded in
// memory): fma(q, scale, min) for a small integer q, which is q * scale + min rounded once, the
// value the dequantizers give (q * scale is exact in every one of these types).
//
// A decoder D provides, for block b (32 consecutive weights) of a row:
//   AVX-512: k_sub (blocks per super-block: 8 for the 256-value types, else 1), a struct Prep of
//            what a super-block's blocks share (its scales and minimums as f32, unpacked once),
//            static void prepare(const uint8_t* row, int64_t sb, Prep&) and
//            static Block32 decode(const uint8_t* row, int64_t b, const Prep&): the 32 weights as
//            f32;
//   always:  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min):
//            weight i = fma(q[i], scale[i / 16], min[i / 16]) (the AVX2 and scalar builds use it).
#include <cmath>
#include <cstring>

#include "kernels/matmul_kernels.h"

namespace ossa::tile {

// For the 32-value block types: nothing shared between blocks.
struct NoPrep {
  static constexpr int k_sub = 1;
  struct Prep {};
  static void prepare(const uint8_t*, int64_t, Prep&) {}
};

#if defined(__AVX512F__)

struct Block32 {
  __m512 lo, hi;  // weights 0..15 and 16..31
};

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m512 iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// 16 f32 in memory, broadcast one at a time from there (a load, not a shuffle).
inline __m512 bcast(const float* p) { return _mm512_set1_ps(*p); }

// Each lane shifted so that its bit `from` lands at bit `to` (constants after unrolling).
inline __m512i move_bit(__m512i v, int from, int to) {
  if (from < to) return _mm512_slli_epi32(v, static_cast<unsigned>(to - from));
  return from == to ? v : _mm512_srli_epi32(v, static_cast<unsigned>(from - to));
}

inline float fsum16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum8(_mm256_add_ps(lo, hi));
}

template <class D, int MO, int R>
void quant_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  const int64_t nb = cols / 32;
  __m512 acc[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nb / D::k_sub; ++sb) {
    typename D::Prep prep[MO];
    for (int o = 0; o < MO; ++o) D::prepare(w[o], sb, prep[o]);
    for (int64_t b = sb * D::k_sub; b < (sb + 1) * D::k_sub; ++b) {
      // The tile's weight rows decoded first, then each activation half loaded once for all.
      Block32 v[MO];
      for (int o = 0; o < MO; ++o) v[o] = D::decode(w[o], b, prep[o]);
      for (int r = 0; r < R; ++r) {
        const __m512 x_lo = _mm512_loadu_ps(x[r] + 32 * b),
                     x_hi = _mm512_loadu_ps(x[r] + 32 * b + 16);
        for (int o = 0; o < MO; ++o) {
          acc[o][r] = _mm512_fmadd_ps(v[o].lo, x_lo, acc[o][r]);
          acc[o][r] = _mm512_fmadd_ps(v[o].hi, x_hi, acc[o][r]);
        }
      }
    }
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = fsum16(acc[o][r]);
}

// quant_tile's weights, stored (F32Tile::decode, for the decoders whose tiles set it): the Block32
// vectors, in order.
template <class D>
void decode_row(const uint8_t* w, int64_t cols, float* out) {
  for (int64_t sb = 0; sb < cols / 32 / D::k_sub; ++sb) {
    typename D::Prep prep;
    D::prepare(w, sb, prep);
    for (int64_t b = sb * D::k_sub; b < (sb + 1) * D::k_sub; ++b) {
      const Block32 v = D::decode(w, b, prep);
      _mm512_storeu_ps(out + 32 * b, v.lo);
      _mm512_storeu_ps(out + 32 * b + 16, v.hi);
    }
  }
}

// Tile shapes: one activation row (decode) runs 8 weight rows side by side, 8 independent FMA
// chains (4 leave it bound by FMA latency); 2..5 rows run 4 weight rows, more rows 2.
template <class D>
F32Tile tile_for_rows(int rows) {
  switch (rows) {
    case 1:
      return {quant_tile<D, 8, 1>, 8};
    case 2:
      return {quant_tile<D, 4, 2>, 4};
    case 3:
      return {quant_tile<D, 4, 3>, 4};
    case 4:
      return {quant_tile<D, 4, 4>, 4};
    case 5:
      return {quant_tile<D, 4, 5>, 4};
    case 6:
      return {quant_tile<D, 2, 6>, 2};
    case 7:
      return {quant_tile<D, 2, 7>, 2};
    default:
      return {quant_tile<D, 2, 8>, 2};
  }
}

#elif defined(__AVX2__)

// 16 bytes of packed nibbles as 32 bytes: the low nibbles (values 0..15), then the high ones.
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}
// 16 in byte j where bit j of the 32-bit word at qh is set, else 0.
inline __m256i bits32_as_16(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(16));
}

// A block's 32 quants: from D::quants8 as signed bytes where the decoder has it (the same
// integers as D::scalar), else D::scalar's ints in q.
struct Quants32 {
  __m256i bytes;
  bool in_bytes;
  __m256 f32(const int* q, int c) const {
    if (!in_bytes)
      return _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + 8 * c)));
    __m128i part = c < 2 ? _mm256_castsi256_si128(bytes) : _mm256_extracti128_si256(bytes, 1);
    if (c % 2) part = _mm_srli_si128(part, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
  }
};
template <class D>
inline Quants32 quants32(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
  if constexpr (requires { D::quants8(row, b, scale, min); }) {
    return {D::quants8(row, b, scale, min), true};
  } else {
    D::scalar(row, b, q, scale, min);
    return {_mm256_setzero_si256(), false};
  }
}

// The portable build: one weight row, up to 4 activation rows, 8 lanes; the block decoded by the
// scalar decoder (or D::quants8) and widened 8 values at a time.
template <class D, int MO, int R>
void quant_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  alignas(32) int q[32];
  float scale[2], min[2];
  for (int64_t b = 0; b < cols / 32; ++b) {
    const Quants32 qv = quants32<D>(w[0], b, q, scale, min);
    for (int c = 0; c < 4; ++c) {
      const __m256 qf = qv.f32(q, c);
      const __m256 wv =
          _mm256_fmadd_ps(qf, _mm256_set1_ps(scale[c / 2]), _mm256_set1_ps(min[c / 2]));
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r] + b * 32 + c * 8), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

// quant_tile's weights, stored (F32Tile::decode): the same wv vectors, 8 at a time.
template <class D>
void decode_row(const uint8_t* w, int64_t cols, float* out) {
  alignas(32) int q[32];
  float scale[2], min[2];
  for (int64_t b = 0; b < cols / 32; ++b) {
    const Quants32 qv = quants32<D>(w, b, q, scale, min);
    for (int c = 0; c < 4; ++c) {
      const __m256 qf = qv.f32(q, c);
      _mm256_storeu_ps(out + 32 * b + 8 * c, _mm256_fmadd_ps(qf, _mm256_set1_ps(scale[c / 2]),
                                                             _mm256_set1_ps(min[c / 2])));
    }
  }
}

template <class D>
F32Tile tile_for_rows(int rows) {
  switch (rows) {
    case 1:
      return {quant_tile<D, 1, 1>, 1, decode_row<D>};
    case 2:
      return {quant_tile<D, 1, 2>, 1, decode_row<D>};
    case 3:
      return {quant_tile<D, 1, 3>, 1, decode_row<D>};
    default:
      return {quant_tile<D, 1, 4>, 1, decode_row<D>};
  }
}

#else  // scalar: one weight row and one activation row at a time

template <class D>
void quant_tile_1(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  float acc = 0.0f;
  int q[32];
  float scale[2], min[2];
  for (int64_t b = 0; b < cols / 32; ++b) {
    D::scalar(w[0], b, q, scale, min);
    for (int i = 0; i < 32; ++i)
      acc = std::fma(std::fma(static_cast<float>(q[i]), scale[i / 16], min[i / 16]),
                     x[0][b * 32 + i], acc);
  }
  out[0] = acc;
}

template <class D>
F32Tile tile_for_rows(int) {
  return {quant_tile_1<D>, 1};
}

#endif

}  // namespace ossa::tile
