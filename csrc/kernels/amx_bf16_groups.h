#pragma once
// The bf16 tile loop of every "integers times the hi + lo split" AMX kernel: matmul_amx.cpp's
// Q4_0 / Q4_1 / Q8_0 and matmul_amx_ext.cpp's Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS. Each type is a
// block decoder (how a repacked 16 x 32 block becomes a B tile, where its scales and minimums are);
// the loop is the same for all:
//
//   per output element, C = 0; C += x_hi . v; C += x_lo . v; acc = fma(C, s, acc);
//   acc = fma(sum(x), mn, acc) (types with minimums), block after block,
//
// whatever the number of rows, the tile the row lands in or the thread (batch invariance).
// Include only where AMX-BF16 is compiled in (OSSA_HAVE_AMX / OSSA_HAVE_AMX_EXT).
//
// A decoder D has:
//   static constexpr int64_t block_bytes;  // repacked bytes per 16 rows and 32 columns
//   static constexpr bool has_min;
//   void build(const uint8_t* blk, uint16_t* out) const;  // the B tile: 16 pairs x 16 rows
//   __m512 scales(const uint8_t* blk) const;  // the 16 rows' scales of the block, f32
//   __m512 mins(const uint8_t* blk) const;    // and their minimums (has_min only)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/amx_tile_config.h"
#include "kernels/matmul_kernels.h"
#include "util/aligned.h"
#include "util/error.h"

namespace ossa {

// Loaded at the start of every call and released at its end: other code on the same thread (oneDNN
// inside torch, for one) may configure or release the tiles in between. Tiles first_b..7 are B
// tiles (always 16 pairs), the others A and C tiles of `rows` rows.
inline void amx_load_tile_config(int rows, int first_b) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = static_cast<uint8_t>(t >= first_b ? 16 : rows);
  }
  _tile_loadconfig(&c);
}

namespace amx_bf16 {

// Groups of 16 weight rows that share each loaded pair of activation tiles (tiles 0-1 hold the
// activations, 2-4 the C tiles and 5-7 the B tiles of up to three groups).
constexpr int k_groups = 3;

template <class D, int G>
void groups(const D& dec, const uint8_t* packed, const AmxActivations& x, int64_t r_begin,
            int64_t r_end, float* y, int64_t ldy, int64_t o0, int64_t o_end, int mr,
            uint16_t* btiles) {
  constexpr int64_t bb = D::block_bytes;
  const int64_t nb = x.cols / 32;
  const uint8_t* groups[G];
  for (int g = 0; g < G; ++g) groups[g] = packed + (o0 / 16 + g) * nb * bb;
  // Each block's B tiles are built just ahead of their first tile products (during the first row
  // block), so the vector units build while the tile unit multiplies; later row blocks reuse them.
  // One row block (decode, small batches) needs only two slots per group.
  const bool streamed = r_end - r_begin <= 16;
  auto btile = [&](int g, int64_t b) {
    return btiles + (streamed ? g * 2 + (b & 1) : g * nb + b) * 512;
  };
  auto build = [&](int64_t b) {
    for (int g = 0; g < G; ++g) {
      // The weights stream once: ask for the data a few blocks ahead.
      const char* ahead = reinterpret_cast<const char*>(groups[g] + (b + 4) * bb);
      for (int64_t l = 0; l < bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      dec.build(groups[g] + b * bb, btile(g, b));
    }
  };
  build(0);
  alignas(64) float acc[G][16][16];
  alignas(64) float cbuf[4][G][256];
  for (int64_t m0 = r_begin; m0 < r_end; m0 += 16) {
    const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - m0));
    const uint16_t* a = x.tiles + (m0 / 16) * nb * 1024;
    for (int g = 0; g < G; ++g)
      for (int m = 0; m < rows; ++m) _mm512_store_ps(acc[g][m], _mm512_setzero_ps());
    // Block b's C tiles are scaled two blocks later, once their stores have landed.
    auto product = [&](int64_t b) {
      const uint16_t* ab = a + b * 1024;
      _mm_prefetch(reinterpret_cast<const char*>(ab + 2048), _MM_HINT_T0);
      _tile_loadd(0, ab, 64);
      _tile_loadd(1, ab + 512, 64);
      float* c = cbuf[b & 3][0];
      _tile_zero(2);
      _tile_loadd(5, btile(0, b), 64);
      _tile_dpbf16ps(2, 0, 5);
      _tile_dpbf16ps(2, 1, 5);
      _tile_stored(2, c, 64);
      if constexpr (G > 1) {
        _tile_zero(3);
        _tile_loadd(6, btile(1, b), 64);
        _tile_dpbf16ps(3, 0, 6);
        _tile_dpbf16ps(3, 1, 6);
        _tile_stored(3, c + 256, 64);
      }
      if constexpr (G > 2) {
        _tile_zero(4);
        _tile_loadd(7, btile(2, b), 64);
        _tile_dpbf16ps(4, 0, 7);
        _tile_dpbf16ps(4, 1, 7);
        _tile_stored(4, c + 512, 64);
      }
    };
    auto scale = [&](int64_t b) {
      const float* sum = x.block_sum + m0 * nb + b;
      for (int g = 0; g < G; ++g) {
        const uint8_t* blk = groups[g] + b * bb;
        const __m512 s = dec.scales(blk);
        const float* c = cbuf[b & 3][g];
        if constexpr (D::has_min) {
          const __m512 mn = dec.mins(blk);
          for (int m = 0; m < rows; ++m) {
            __m512 v = _mm512_fmadd_ps(_mm512_load_ps(c + 16 * m), s, _mm512_load_ps(acc[g][m]));
            v = _mm512_fmadd_ps(_mm512_set1_ps(sum[m * nb]), mn, v);
            _mm512_store_ps(acc[g][m], v);
          }
        } else {
          for (int m = 0; m < rows; ++m)
            _mm512_store_ps(acc[g][m], _mm512_fmadd_ps(_mm512_load_ps(c + 16 * m), s,
                                                       _mm512_load_ps(acc[g][m])));
        }
      }
    };
    for (int64_t b = 0; b < nb; ++b) {
      if (m0 == r_begin && b + 1 < nb) build(b + 1);
      product(b);
      if (b >= 2) scale(b - 2);
    }
    for (int64_t b = std::max<int64_t>(0, nb - 2); b < nb; ++b) scale(b);
    for (int g = 0; g < G && o0 + 16 * g < o_end; ++g) {
      const int64_t o = o0 + 16 * g;
      const int n_valid = static_cast<int>(std::min<int64_t>(16, o_end - o));
      const __mmask16 keep = static_cast<__mmask16>(n_valid == 16 ? 0xFFFF : (1u << n_valid) - 1);
      for (int m = 0; m < rows; ++m)
        _mm512_mask_storeu_ps(y + (m0 + m) * ldy + o, keep, _mm512_load_ps(acc[g][m]));
    }
  }
}

// Rows [r_begin, r_end) (a multiple of 16) x weight rows [o_begin, o_end) (a multiple of 16);
// btiles: the calling thread's scratch for the B tiles.
template <class D>
void compute(const D& dec, const TensorView& w, const AmxActivations& x, int64_t r_begin,
             int64_t r_end, float* y, int64_t ldy, int64_t o_begin, int64_t o_end,
             AlignedVector<uint16_t>& btiles) {
  const int64_t nb = x.cols / 32;
  const int mr = static_cast<int>(std::min<int64_t>(16, x.n_rows));
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0);
  const size_t need = static_cast<size_t>(k_groups * nb * 512);
  if (btiles.size() < need) btiles.assign(need, 0);
  amx_load_tile_config(mr, 5);  // tiles 5-7: B
  // One row block (decode): a group at a time measures faster; more rows: three groups share
  // each activation tile load. The results are the same either way.
  const int64_t n_groups = r_end - r_begin <= 16 ? 1 : k_groups;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16 * n_groups) {
    switch (std::min<int64_t>(n_groups, (o_end - o0 + 15) / 16)) {
      case 1:
        groups<D, 1>(dec, w.packed, x, r_begin, r_end, y, ldy, o0, o_end, mr, btiles.data());
        break;
      case 2:
        groups<D, 2>(dec, w.packed, x, r_begin, r_end, y, ldy, o0, o_end, mr, btiles.data());
        break;
      default:
        groups<D, 3>(dec, w.packed, x, r_begin, r_end, y, ldy, o0, o_end, mr, btiles.data());
        break;
    }
  }
  _tile_release();
}

}  // namespace amx_bf16
}  // namespace ossa
