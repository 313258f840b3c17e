#pragma once
// What the exact integer kernels of matmul_amx_i8.cpp (Q4_K, Q6_K: steps of 32 values) and
// matmul_amx_q23k.cpp (Q2_K, Q3_K: steps of 64) share: the masked store of a row's 16 outputs and,
// on AMX-INT8, the driver that runs a type's tile kernels over 16 activation rows at a time.
//
// The driver (amx_i8_tile_rows<K>): per group of 16 weight rows, per 16 activation rows, steps in
// order; the B tiles of each step are built once, by the first 16 rows, and kept for the others,
// and step b's C tiles are scaled two steps later, once their stores have landed. The type's kernel
// K supplies:
//   steps(cols)                  steps per activation row
//   group(w, cols, o0)           the packed group of the 16 weight rows from o0
//   a_tiles(x, nb, mb, b)        the A tiles of 16-row block mb at step b (nb = steps(cols))
//   b_bytes, CBuf                bytes of a step's B tiles; the C tiles of a step's products
//   config(rows)                 LDTILECFG for that many activation rows
//   product(group, b, build, bt, a, c)    step b's B tiles built into bt (when build), then c =
//                                their products with the A tiles at a
//   scale(group, b, c, x, m0, rows, acc)  c scaled into the accumulators of rows m0 .. m0 + rows
// so every type's tile path has one loop, and the type's integers and epilogue stay in its file.
#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/matmul_kernels.h"
#include "util/aligned.h"

namespace ossa {

// The outputs o .. o + 15 of one activation row (fewer where the matrix ends before o_end).
inline void store_row(__m512 v, float* y, int64_t o, int64_t o_end) {
  const int n_valid = static_cast<int>(std::min<int64_t>(16, o_end - o));
  _mm512_mask_storeu_ps(y + o, static_cast<__mmask16>(n_valid == 16 ? 0xFFFF : (1u << n_valid) - 1),
                        v);
}

#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
// The calling thread's buffer for the B tiles of one weight group (every step of it).
inline uint8_t* amx_btiles(size_t bytes) {
  thread_local AlignedVector<uint8_t> buf;
  if (buf.size() < bytes) buf.assign(bytes, 0);
  return buf.data();
}

// The products of one step with the activations in three pieces (tiles 0-2: a0, a1, a2, rows at
// strides s0, s12) and one B tile (tile 3, rows of 64 bytes at bt): C tiles 4-6 into c[0..2]
// (rows of 16 int32). Q6_K's sub-blocks and Q2_K / Q3_K's steps take it.
inline void amx_three_pieces(const int8_t* a0, int s0, const int8_t* a1, const int8_t* a2, int s12,
                             const uint8_t* bt, int32_t* const* c) {
  _tile_loadd(0, a0, s0);
  _tile_loadd(1, a1, s12);
  _tile_loadd(2, a2, s12);
  _tile_loadd(3, bt, 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_dpbsud(4, 0, 3);
  _tile_dpbsud(5, 1, 3);
  _tile_dpbsud(6, 2, 3);
  _tile_stored(4, c[0], 64);
  _tile_stored(5, c[1], 64);
  _tile_stored(6, c[2], 64);
}

template <class K>
void amx_i8_tile_rows(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                      float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const int64_t nb = K::steps(x.cols);
  const int mr = static_cast<int>(std::min<int64_t>(16, x.n_rows));
  uint8_t* btiles = amx_btiles(static_cast<size_t>(nb * K::b_bytes));
  K::config(mr);
  alignas(64) typename K::CBuf cbuf[4];
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint8_t* group = K::group(w, x.cols, o0);
    for (int64_t m0 = r_begin; m0 < r_end; m0 += 16) {
      const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - m0));
      __m512 acc[16];
      for (int m = 0; m < 16; ++m) acc[m] = _mm512_setzero_ps();
      const bool first = m0 == r_begin;
      for (int64_t b = 0; b < nb; ++b) {
        K::product(group, b, first, btiles + b * K::b_bytes, K::a_tiles(x, nb, m0 / 16, b),
                   cbuf[b & 3]);
        if (b >= 2) K::scale(group, b - 2, cbuf[(b - 2) & 3], x, m0, rows, acc);
      }
      for (int64_t b = std::max<int64_t>(0, nb - 2); b < nb; ++b)
        K::scale(group, b, cbuf[b & 3], x, m0, rows, acc);
      for (int m = 0; m < rows; ++m) store_row(acc[m], y + (m0 + m) * ldy, o0, o_end);
    }
  }
  _tile_release();
}
#endif  // AMX-INT8

}  // namespace ossa
#endif  // __AVX512F__
