// f32 tile kernels for IQ4_NL and IQ4_XS weights (layouts in kernels/quant.h; the tile loop and its
// batch-invariance contract in kernels/matmul_tile.h).
//
// A 4-bit index selects one of 16 fixed int8 levels (k_iq4_levels), times the block's scale
// (IQ4_NL: d; IQ4_XS: d * ls of the 32-value sub-block). On AVX-512 the 16 scaled levels are one
// zmm table, table[k] = level[k] * scale (exact: at most 24 significant bits), and vpermps picks
// each weight by its nibble, as the Q4 kernels do.
#include <cstring>

#include "kernels/matmul_kblock.h"
#include "kernels/matmul_tile.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

#if defined(__AVX512F__)
using tile::Block32;
using tile::load16;

inline __m512 levels16() {
  return _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}
inline __m512 mxfp4_levels16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}

// 16 bytes of nibbles (elements 0..15 low, 16..31 high) through the scaled level table.
inline Block32 lookup4(const uint8_t* qs, float scale, __m512 levels = levels16()) {
  const __m512 table = _mm512_mul_ps(levels, _mm512_set1_ps(scale));
  const __m512i e = _mm512_cvtepu8_epi32(load16(qs));  // vpermps reads the low 4 bits of each index
  return {_mm512_permutexvar_ps(e, table), _mm512_permutexvar_ps(_mm512_srli_epi32(e, 4), table)};
}
#endif

inline void levels32(const uint8_t* qs, int* q, const int8_t* levels = k_iq4_levels) {
  for (int j = 0; j < 16; ++j) q[j] = levels[qs[j] & 0xF], q[j + 16] = levels[qs[j] >> 4];
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// levels32 as 32 signed bytes.
inline __m256i levels8(const uint8_t* qs, const int8_t* levels = k_iq4_levels) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels)));
  return _mm256_shuffle_epi8(table, tile::nibbles32(qs));
}
#endif

struct IQ4_NL : tile::NoPrep {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockIQ4_NL& w = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
    levels32(w.qs, q);
    scale[0] = scale[1] = f16_to_f32(w.d);
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockIQ4_NL& w = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
    scale[0] = scale[1] = f16_to_f32(w.d);
    min[0] = min[1] = 0.0f;
    return levels8(w.qs);
  }
#endif
#if defined(__AVX512F__)
  static Block32 decode(const uint8_t* row, int64_t b, const Prep&) {
    const BlockIQ4_NL& w = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
    return lookup4(w.qs, _cvtsh_ss(w.d));
  }
#endif
};

// MXFP4: IQ4_NL's scheme with the E2M1 levels and a power-of-two scale (every weight exact).
struct MXFP4 : tile::NoPrep {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockMXFP4& w = reinterpret_cast<const BlockMXFP4*>(row)[b];
    levels32(w.qs, q, k_mxfp4_levels);
    scale[0] = scale[1] = mxfp4_scale(w.e);
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockMXFP4& w = reinterpret_cast<const BlockMXFP4*>(row)[b];
    scale[0] = scale[1] = mxfp4_scale(w.e);
    min[0] = min[1] = 0.0f;
    return levels8(w.qs, k_mxfp4_levels);
  }
#endif
#if defined(__AVX512F__)
  static Block32 decode(const uint8_t* row, int64_t b, const Prep&) {
    const BlockMXFP4& w = reinterpret_cast<const BlockMXFP4*>(row)[b];
    return lookup4(w.qs, mxfp4_scale(w.e), mxfp4_levels16());
  }
#endif
};

// IQ4_XS: sub-block b % 8 of super-block b / 8, scale d * ls.
struct IQ4_XS {
  static int ls(const BlockIQ4_XS& w, int sub) {
    return (((w.scales_l[sub / 2] >> (4 * (sub % 2))) & 0xF) |
            (((w.scales_h >> (2 * sub)) & 3) << 4)) -
           32;
  }
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockIQ4_XS& w = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    levels32(w.qs + 16 * sub, q);
    scale[0] = scale[1] = f16_to_f32(w.d) * static_cast<float>(ls(w, sub));
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockIQ4_XS& w = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    scale[0] = scale[1] = f16_to_f32(w.d) * static_cast<float>(ls(w, sub));
    min[0] = min[1] = 0.0f;
    return levels8(w.qs + 16 * sub);
  }
#endif
#if defined(__AVX512F__)
  static constexpr int k_sub = 8;
  struct Prep {
    alignas(32) float scale[8];
  };
  // ls of the 8 sub-blocks at once: nibble j % 2 of scales_l[j / 2], bits 2j, 2j+1 of scales_h.
  static void prepare(const uint8_t* row, int64_t sb, Prep& p) {
    const BlockIQ4_XS& w = reinterpret_cast<const BlockIQ4_XS*>(row)[sb];
    uint32_t sl;
    std::memcpy(&sl, w.scales_l, 4);
    const __m256i nib = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)),
                                          _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(w.scales_h),
                                         _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i ls = _mm256_sub_epi32(
        _mm256_or_si256(_mm256_and_si256(nib, _mm256_set1_epi32(15)),
                        _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4)),
        _mm256_set1_epi32(32));
    _mm256_store_ps(p.scale, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w.d)), _mm256_cvtepi32_ps(ls)));
  }
  static Block32 decode(const uint8_t* row, int64_t b, const Prep& p) {
    const BlockIQ4_XS& w = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    return lookup4(w.qs + 16 * sub, p.scale[sub]);
  }
#endif
};

#if defined(__AVX512F__)
// ---- IQ4_XS on activations laid out to match its bytes (iq4xs_prepare_row)
// -----------------------
//
// As the Q4_K kernel does (matmul_kquant.cpp): 64 bytes of qs, four sub-blocks, loaded as 16
// dwords; shifting right by 4k leaves in lane i the nibble of value
//   e = 32 (i / 4) + 16 (k % 2) + 4 (i % 4) + k / 2        of the 128-value chunk,
// and vpermps (which reads only those 4 bits) looks its level up. The activations are laid out once
// per call in that order. Lane i belongs to sub-block 4c + i / 4 for every k, so the chunk's eight
// products are summed first and scaled once: acc = l_0 x_0; acc = fma(l_k, x_k, acc) ...;
// tot = fma(acc, d * ls, tot). Every weight is still exact (level * d * ls, at most 24 bits), and
// every output element gets the same sequence whatever the tile: batch invariant.
constexpr int iq4xs_elem(int k, int i) { return 32 * (i / 4) + 16 * (k % 2) + 4 * (i % 4) + k / 2; }

struct IQ4XSLayout {
  static constexpr int k_chunks = 2, k_per_chunk = 8;  // chunk c: the 64-byte run c, k = 0..7
  static constexpr bool k_min = false;
  struct Consts {
    __m512 levels = levels16();
    __m512i sel[2] = {_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                      _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)};
  };
  struct Row {
    __m512 sc;  // d * ls of the 8 sub-blocks (lanes 0..7)
  };
  using Quants = __m512i;
  static void load(const uint8_t* w, int64_t sb, Row& r) {
    IQ4_XS::Prep p;
    IQ4_XS::prepare(w, sb, p);
    r.sc = _mm512_castps256_ps512(_mm256_load_ps(p.scale));
  }
  static constexpr int k_of(int, int j) { return j; }
  static constexpr int x_at(int c, int k) { return c * 128 + 16 * k; }
  static Quants quants(const Consts&, const uint8_t* w, int64_t sb, const Row&, int c) {
    return _mm512_loadu_si512(reinterpret_cast<const BlockIQ4_XS*>(w)[sb].qs + 64 * c);
  }
  static __m512 weights(const Consts& k, const Quants& v, int, int kk) {
    return _mm512_permutexvar_ps(kk == 0 ? v : _mm512_srli_epi32(v, 4 * kk), k.levels);
  }
  static __m512 scale(const Consts& k, const Row& r, int c) {
    return _mm512_permutexvar_ps(k.sel[c], r.sc);
  }
  static __m512 min_term(const Row&, const float*, __m512 tot) { return tot; }
};
#endif

}  // namespace

#if defined(__AVX512F__)
void iq4xs_prepare_row(const float* x, int64_t cols, float* out) {
  kblock::reorder_row<128, iq4xs_elem>(x, cols, out);
}
#else
void iq4xs_prepare_row(const float*, int64_t, float*) {}
#endif

F32Tile f32_tile_iq4(DType type, int rows) {
  switch (type) {
    case DType::IQ4_NL:
      return tile::tile_for_rows<IQ4_NL>(rows);
    case DType::MXFP4:
      return tile::tile_for_rows<MXFP4>(rows);
#if defined(__AVX512F__)
    case DType::IQ4_XS:
      return kblock::shapes<IQ4XSLayout>(rows);  // activations laid out by iq4xs_prepare_row
#else
    case DType::IQ4_XS:
      return tile::tile_for_rows<IQ4_XS>(rows);
#endif
    default:
      OSSA_ASSERT(false);
  }
  return {};
}

}  // namespace ossa
