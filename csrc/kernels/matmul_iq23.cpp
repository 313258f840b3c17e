// f32 tile kernels for the i-quants below 4 bits: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
// IQ1_M (layouts, codebooks and the scalar decoder in kernels/iq23.h; the tile loop and its
// batch-invariance contract in kernels/matmul_tile.h).
//
// The weights stay in the file's blocks (2 to 3.4 bits a weight): a tile decodes each 32-value
// sub-block in registers, every row count alike. On AVX-512 (BW, VL) a sub-block's four 8-value
// codebook entries (eight 4-value ones for IQ3_*) are four 64-bit loads from the expanded codebook
// (kernels/iq23.h: one int8 value per byte) into one ymm of 32 int8 magnitudes; the 32 sign bits
// become a mask that negates bytes (vpsubb under the mask; IQ1_*: the +-1 delta added instead), and
// the bytes widen to f32 and take the scale of their 16-value half (q x scale: exact). The AVX2 and
// scalar builds run kernels/iq23.h's decoder.
#include <cmath>

#include "kernels/iq23.h"
#include "kernels/matmul_tile.h"
#include "util/error.h"

namespace ossa {
namespace {

template <DType T>
struct IQ23 {
  static constexpr int k_bytes = T == DType::IQ2_XXS   ? 66
                                 : T == DType::IQ2_XS  ? 74
                                 : T == DType::IQ2_S   ? 82
                                 : T == DType::IQ3_XXS ? 98
                                 : T == DType::IQ3_S   ? 110
                                 : T == DType::IQ1_S   ? 50
                                                       : 56;
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    iq23::decode_sub(T, row + b / 8 * k_bytes, static_cast<int>(b % 8), q, scale);
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  static constexpr int k_sub = 8;
  struct Prep {
    float scale[16];  // the super-block's 16 half sub-blocks
  };
  static void prepare(const uint8_t* row, int64_t sb, Prep& p) {
    const uint8_t* blk = row + sb * k_bytes;
    const float d = iq23::block_d(T, blk);
    for (int s = 0; s < 8; ++s) iq23::sub_scales(T, blk, s, d, p.scale + 2 * s);
  }
  static __m256i entries4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return _mm256_setr_epi64x(static_cast<int64_t>(a), static_cast<int64_t>(b),
                              static_cast<int64_t>(c), static_cast<int64_t>(d));
  }
  // The sub-block's 32 integers q as signed bytes.
  static __m256i quants(const uint8_t* blk, int s) {
    using iq23::load_u16, iq23::load_u32, iq23::k_ksigns;
    const __m256i zero = _mm256_setzero_si256();
    if constexpr (T == DType::IQ2_XXS) {
      const uint8_t* g = blk + 2 + 8 * s;
      const auto& grid = iq23::k_grid_iq2xxs;
      const __m256i v = entries4(grid[g[0]], grid[g[1]], grid[g[2]], grid[g[3]]);
      return _mm256_mask_sub_epi8(v, iq23::ksign_mask(load_u32(g + 4)), zero, v);
    } else if constexpr (T == DType::IQ2_XS) {
      const uint8_t* g = blk + 2 + 8 * s;
      const uint16_t w0 = load_u16(g), w1 = load_u16(g + 2), w2 = load_u16(g + 4),
                     w3 = load_u16(g + 6);
      const auto& grid = iq23::k_grid_iq2xs;
      const __m256i v = entries4(grid[w0 & 511], grid[w1 & 511], grid[w2 & 511], grid[w3 & 511]);
#if defined(__BMI2__)
      uint64_t words;
      std::memcpy(&words, g, 8);
      const uint32_t m =
          iq23::ksign_mask(static_cast<uint32_t>(_pext_u64(words, 0xFE00FE00FE00FE00ull)));
#else
      const uint32_t m = k_ksigns[w0 >> 9] | uint32_t{k_ksigns[w1 >> 9]} << 8 |
                         uint32_t{k_ksigns[w2 >> 9]} << 16 | uint32_t{k_ksigns[w3 >> 9]} << 24;
#endif
      return _mm256_mask_sub_epi8(v, m, zero, v);
    } else if constexpr (T == DType::IQ2_S) {
      const uint8_t* g = blk + 2 + 4 * s;
      const int qh = blk[66 + s];
      const auto& grid = iq23::k_grid_iq2s;
      const __m256i v = entries4(grid[g[0] | (qh & 3) << 8], grid[g[1] | (qh & 12) << 6],
                                 grid[g[2] | (qh & 48) << 4], grid[g[3] | (qh & 192) << 2]);
      return _mm256_mask_sub_epi8(v, load_u32(blk + 34 + 4 * s), zero, v);
    } else if constexpr (T == DType::IQ3_XXS || T == DType::IQ3_S) {
      const uint8_t* g = blk + 2 + 8 * s;
      if constexpr (T == DType::IQ3_XXS) {  // two 4-value entries a qword, paired in registers
        const auto& grid = iq23::k_grid_iq3xxs;
        uint64_t e[4];
        for (int l = 0; l < 4; ++l) e[l] = grid[g[2 * l]] | grid[g[2 * l + 1]] << 32;
        const __m256i v = entries4(e[0], e[1], e[2], e[3]);
        return _mm256_mask_sub_epi8(v, iq23::ksign_mask(load_u32(blk + 66 + 4 * s)), zero, v);
      } else {  // IQ3_S: one gather of the eight entries (the low dwords of the expanded qwords),
                // the ninth index bits from qh (eight scalar lookups: 4.9 GMAC/s, the gather 5.5)
        const __m256i high =
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(blk[66 + s]),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                             _mm256_set1_epi32(1));
        const __m256i idx = _mm256_or_si256(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g))),
            _mm256_slli_epi32(high, 8));
        const __m256i v =
            _mm256_i32gather_epi32(reinterpret_cast<const int*>(iq23::k_grid_iq3s.data()), idx, 8);
        return _mm256_mask_sub_epi8(v, load_u32(blk + 74 + 4 * s), zero, v);
      }
    } else if constexpr (T == DType::IQ1_S) {
      const uint8_t* g = blk + 2 + 4 * s;
      const int qh = load_u16(blk + 34 + 2 * s);
      const auto& grid = iq23::k_grid_iq1;
      const __m256i v = entries4(grid[g[0] | (qh & 7) << 8], grid[g[1] | (qh & 0x38) << 5],
                                 grid[g[2] | (qh & 0x1c0) << 2], grid[g[3] | (qh & 0xe00) >> 1]);
      return _mm256_add_epi8(v, _mm256_set1_epi8(qh & 0x8000 ? -1 : 1));
    } else {  // IQ1_M
      const uint8_t* g = blk + 4 * s;
      const int h0 = blk[32 + 2 * s], h1 = blk[33 + 2 * s];
      const auto& grid = iq23::k_grid_iq1;
      const __m256i v = entries4(grid[g[0] | (h0 & 7) << 8], grid[g[1] | (h0 & 0x70) << 4],
                                 grid[g[2] | (h1 & 7) << 8], grid[g[3] | (h1 & 0x70) << 4]);
      // +1 everywhere, -1 (2 less) in the groups whose delta bit (3 of a nibble) is set
#if defined(__BMI2__)
      const uint32_t minus =
          _pdep_u32(_pext_u32(static_cast<uint32_t>(h0 | h1 << 8), 0x8888u), 0x01010101u) * 0xFFu;
#else
      const uint32_t minus = (h0 & 8 ? 0xFFu : 0u) | (h0 & 0x80 ? 0xFF00u : 0u) |
                             (h1 & 8 ? 0xFF0000u : 0u) | (h1 & 0x80 ? 0xFF000000u : 0u);
#endif
      const __m256i plus = _mm256_add_epi8(v, _mm256_set1_epi8(1));
      return _mm256_mask_sub_epi8(plus, minus, plus, _mm256_set1_epi8(2));
    }
  }
  static tile::Block32 decode(const uint8_t* row, int64_t b, const Prep& p) {
    const int s = static_cast<int>(b % 8);
    const __m256i q = quants(row + b / 8 * k_bytes, s);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
    return {_mm512_mul_ps(lo, _mm512_set1_ps(p.scale[2 * s])),
            _mm512_mul_ps(hi, _mm512_set1_ps(p.scale[2 * s + 1]))};
  }
#elif defined(__AVX512F__)
  // (AVX-512 without BW / VL: the scalar decoder, widened)
  static constexpr int k_sub = 1;
  struct Prep {};
  static void prepare(const uint8_t*, int64_t, Prep&) {}
  static tile::Block32 decode(const uint8_t* row, int64_t b, const Prep&) {
    alignas(64) int q[32];
    float scale[2], min[2];
    scalar(row, b, q, scale, min);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_load_si512(q));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_load_si512(q + 16));
    return {_mm512_mul_ps(lo, _mm512_set1_ps(scale[0])),
            _mm512_mul_ps(hi, _mm512_set1_ps(scale[1]))};
  }
#endif
};

// The tile shapes of matmul_tile.h's tile_for_rows, but 4 weight rows for one activation row: a
// decoded sub-block takes most of the time there, and four rows' weights stay in registers (eight
// spilled them to the stack). On AVX-512, F32Tile::decode too: a work item of 4 or more activation
// rows (matmul.cpp) decodes each of its weight rows once into f32 and multiplies them by every row
// (f32_decoded_rows, bitwise the tiles' sums), instead of decoding them again for every tile of at
// most 8 rows.
template <class D>
F32Tile rows_for(int rows) {
#if defined(__AVX512F__)
  F32Tile t = rows == 1 ? F32Tile{tile::quant_tile<D, 4, 1>, 4} : tile::tile_for_rows<D>(rows);
  t.decode = tile::decode_row<D>;
  return t;
#else
  return tile::tile_for_rows<D>(rows);
#endif
}

// 8-bit activations (a model loaded with quantized_activations), as matmul_q8.cpp's kernels: per
// sub-block the 32 integers q (signed bytes) times the activation block's int8 values by the sign
// trick (|q| as u8, sign(q) x as s8), int32 lanes of 4 products each, then per lane
//   acc = fma(f32(lane), scale(lane's half) * x.d, acc)
// and one horizontal sum; the same integers and order on every build.
template <DType T, int R>
void q8_dot(const uint8_t* row, const BlockQ8* const* x, int64_t nb, float* out) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    typename IQ23<T>::Prep p;
    IQ23<T>::prepare(row, sb, p);
    for (int s = 0; s < 8; ++s) {
      const int64_t b = sb * 8 + s;
      const __m256i q = IQ23<T>::quants(row + sb * IQ23<T>::k_bytes, s);
      const __m256i u = _mm256_abs_epi8(q);
      const __m256 ws =
          _mm256_setr_m128(_mm_set1_ps(p.scale[2 * s]), _mm_set1_ps(p.scale[2 * s + 1]));
      for (int r = 0; r < R; ++r) {
        const BlockQ8& xb = x[r][b];
        const __m256i xv =
            _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs)), q);
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, xv);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(ws, _mm256_set1_ps(xb.d)),
                                 acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
#else
  for (int r = 0; r < R; ++r) {
    float acc[8] = {};
    for (int64_t b = 0; b < nb; ++b) {
      int q[32];
      float scale[2];
      iq23::decode_sub(T, row + b / 8 * IQ23<T>::k_bytes, static_cast<int>(b % 8), q, scale);
      for (int l = 0; l < 8; ++l) {
        int sum = 0;
        for (int i = 0; i < 4; ++i) sum += q[4 * l + i] * x[r][b].qs[4 * l + i];
        acc[l] = std::fma(static_cast<float>(sum), scale[l / 4] * x[r][b].d, acc[l]);
      }
    }
    out[r] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  }
#endif
}

template <DType T>
Q8DotFn q8_dot_for(int rows) {
  return rows == 8 ? q8_dot<T, 8> : rows == 4 ? q8_dot<T, 4> : q8_dot<T, 1>;
}

}  // namespace

Q8DotFn q8_dot_iq23(DType type, int rows) {
  switch (type) {
    case DType::IQ2_XXS:
      return q8_dot_for<DType::IQ2_XXS>(rows);
    case DType::IQ2_XS:
      return q8_dot_for<DType::IQ2_XS>(rows);
    case DType::IQ2_S:
      return q8_dot_for<DType::IQ2_S>(rows);
    case DType::IQ3_XXS:
      return q8_dot_for<DType::IQ3_XXS>(rows);
    case DType::IQ3_S:
      return q8_dot_for<DType::IQ3_S>(rows);
    case DType::IQ1_S:
      return q8_dot_for<DType::IQ1_S>(rows);
    case DType::IQ1_M:
      return q8_dot_for<DType::IQ1_M>(rows);
    default:
      return nullptr;
  }
}

F32Tile f32_tile_iq23(DType type, int rows) {
  switch (type) {
    case DType::IQ2_XXS:
      return rows_for<IQ23<DType::IQ2_XXS>>(rows);
    case DType::IQ2_XS:
      return rows_for<IQ23<DType::IQ2_XS>>(rows);
    case DType::IQ2_S:
      return rows_for<IQ23<DType::IQ2_S>>(rows);
    case DType::IQ3_XXS:
      return rows_for<IQ23<DType::IQ3_XXS>>(rows);
    case DType::IQ3_S:
      return rows_for<IQ23<DType::IQ3_S>>(rows);
    case DType::IQ1_S:
      return rows_for<IQ23<DType::IQ1_S>>(rows);
    case DType::IQ1_M:
      return rows_for<IQ23<DType::IQ1_M>>(rows);
    default:
      OSSA_ASSERT(false);
  }
  return {};
}

}  // namespace ossa
