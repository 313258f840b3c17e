#pragma once
// The AVX-512 f32 kernels of the 256-value types that read activations laid out to match their
// bytes (Q4_K / Q6_K in matmul_kquant.cpp, which explains the layout trick, Q5_K in matmul_q5.cpp,
// IQ4_XS in matmul_iq4.cpp, Q2_K / Q3_K in matmul_q23k.cpp): one loop, generic over a layout L.
//
// Each matmul call lays every activation row out once (reorder_row: out[16 k + i] = x[elem(k, i)]
// for each chunk of values), so that a 64-byte run of quants loaded as 16 dwords and shifted right
// by (bits per field) * k gives, in lane i, the index of the weight that multiplies out[16 k + i].
// Per super-block of 256 values and weight row, for the layout's chunks c in order:
//
//   acc = f(k_0) * x(k_0); acc = fma(f(k_j), x(k_j), acc) ...     the chunk's k, all of whose lanes
//   tot = fma(acc, scale(c), tot)                                  share a sub-block (or 16-group)
//
// then (layouts with minimums) tot = tot - dmin m * (the sub-block sums kept after the row), and
// y = the horizontal sum of tot. f(k) is each weight's raw integer (or IQ4 level), so every weight
// is exact; the sequence is the same for every output element whatever the tile shape, so the
// results are batch invariant.
//
// A layout L provides: k_chunks, k_per_chunk, k_min; struct Consts (tables, built once a call);
// struct Row (a weight row's super-block: scales, ...) and load(w, sb, Row&); k_of(c, j), the j-th
// k of chunk c, and x_at(c, k), where its 16 laid-out activations start in the super-block; struct
// Quants and quants(Consts, w, sb, Row, c), the chunk's quants (64 bytes as 16 dwords, high bits);
// weights(Consts, Quants, c, k), the 16 weights of lanes i for that k; scale(Consts, Row, c); and,
// with k_min, min_term(Row, sums, tot).
#include "kernels/matmul_tile.h"

#if defined(__AVX512F__)
namespace ossa::kblock {

// out[c + 16 k + i] = x[c + Elem(k, i)] for each chunk of N values starting at c.
template <int N, int (*Elem)(int, int)>
void reorder_row(const float* x, int64_t cols, float* out) {
  static constexpr auto perm = [] {
    struct P {
      int e[N];
    } p{};
    for (int k = 0; k < N / 16; ++k)
      for (int i = 0; i < 16; ++i) p.e[16 * k + i] = Elem(k, i);
    return p;
  }();
  for (int64_t c = 0; c < cols; c += N)
    for (int j = 0; j < N; ++j) out[c + j] = x[c + perm.e[j]];
}

template <class L, int MO, int R>
void tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  const int64_t nsb = cols / 256;
  const float* xs[R];  // what reorder_row's caller keeps after the row: the sums the minimums take
  for (int r = 0; r < R; ++r) xs[r] = x[r] + cols;
  const typename L::Consts k_consts;
  __m512 tot[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) tot[o][r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    typename L::Row row[MO];
    for (int o = 0; o < MO; ++o) L::load(w[o], sb, row[o]);
#pragma GCC unroll 4  // every k a constant: the shifts and bit moves below fold
    for (int c = 0; c < L::k_chunks; ++c) {
      typename L::Quants v[MO];
      for (int o = 0; o < MO; ++o) v[o] = L::quants(k_consts, w[o], sb, row[o], c);
      __m512 acc[MO][R];
#pragma GCC unroll 8
      for (int j = 0; j < L::k_per_chunk; ++j) {
        const int k = L::k_of(c, j);
        __m512 xk[R];
        for (int r = 0; r < R; ++r) xk[r] = _mm512_loadu_ps(x[r] + sb * 256 + L::x_at(c, k));
        for (int o = 0; o < MO; ++o) {
          const __m512 f = L::weights(k_consts, v[o], c, k);
          for (int r = 0; r < R; ++r)
            acc[o][r] = j == 0 ? _mm512_mul_ps(f, xk[r]) : _mm512_fmadd_ps(f, xk[r], acc[o][r]);
        }
      }
      for (int o = 0; o < MO; ++o) {
        const __m512 s = L::scale(k_consts, row[o], c);
        for (int r = 0; r < R; ++r) tot[o][r] = _mm512_fmadd_ps(acc[o][r], s, tot[o][r]);
      }
    }
    if constexpr (L::k_min)
      for (int o = 0; o < MO; ++o)
        for (int r = 0; r < R; ++r) tot[o][r] = L::min_term(row[o], xs[r] + 16 * sb, tot[o][r]);
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = tile::fsum16(tot[o][r]);
}

// The tile shapes of these kernels: MO1 weight rows for one activation row (8, 4 for Q4_K and
// Q6_K), fewer as the rows grow.
template <class L, int MO1 = 8>
F32Tile shapes(int rows) {
  switch (rows) {
    case 1:
      return {tile<L, MO1, 1>, MO1};
    case 2:
      return {tile<L, 4, 2>, 4};
    case 3:
      return {tile<L, 2, 3>, 2};
    case 4:
      return {tile<L, 2, 4>, 2};
    case 5:
      return {tile<L, 1, 5>, 1};
    case 6:
      return {tile<L, 1, 6>, 1};
    case 7:
      return {tile<L, 1, 7>, 1};
    default:
      return {tile<L, 1, 8>, 1};
  }
}

}  // namespace ossa::kblock
#endif
