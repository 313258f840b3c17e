// AMX tile kernels for the types of Q5_K_M / IQ4_XS downloads: Q5_0, Q5_1, IQ4_NL, Q5_K and IQ4_XS,
// with the numerics of matmul_amx.cpp's Q4_0 / Q4_1 / Q8_0 kernels: the activations split into
// bf16 hi + lo (amx_split_rows), the weights' small integers as the B operand, and each 32-value
// block's scale and minimum applied in f32 afterwards:
//
//   y[m][n] = sum over blocks b of  s[n][b] * (v[n][b] . x[m][b])  +  mn[n][b] * sum(x[m][b])
//
// where v is the integer each weight is a multiple of: q5 - 16 (Q5_0), q5 (Q5_1, Q5_K), the IQ4
// level (-127..113) of the nibble (IQ4_NL, IQ4_XS); s the block's scale (d; d * sc_j for Q5_K;
// d * (ls_j - 32) for IQ4_XS, exact in f32) and mn its minimum (Q5_1: m; Q5_K: -(dmin * m_j)).
// Every v is an integer of at most 8 bits, exact in bf16, so every product in a tile is exact in
// f32.
//
// Repacked layout (amx_ext_repack_groups), per group of 16 weight rows g and block b (group-major),
// about the file's own size (Q5_0 352 bytes = 16 x 22, Q5_1 384 = 16 x 24, IQ4_NL 288 = 16 x 18;
// Q5_K 448 and IQ4_XS 320 where the file has 352 and 272: their scales are f32 products):
//
//   nib[p][n]  (16 x 16 bytes)  index[n][2p] & 15 | (index[n][2p+1] & 15) << 4
//   hi[p]      (16 x u32, 5-bit types)  bit 2n = index[n][2p] >> 4, bit 2n+1 = index[n][2p+1] >> 4
//   16 scales, then (Q5_1, Q5_K) 16 minimums: f16 as in the file (Q5_0, Q5_1, IQ4_NL) or f32
//
// with index the 5-bit quant or the 4-bit IQ4 index. A B tile row p is 16 pairs of bf16
// (v[n][2p], v[n][2p+1]), built with one vpermw per row: dword n of the nibble byte b is b | b <<
// 12, whose low word holds the even index (bits 0..3) and whose high word the odd one; the fifth
// bits are the 32-bit word mask hi[p], added as 16 (bit 4 is clear); the 32-entry table maps an
// index to bf16(v).
//
// Batch invariance: per output element, C = 0; C += x_hi . v; C += x_lo . v; acc = fma(C, s, acc);
// acc = fma(sum(x), mn, acc), block after block, whatever the number of rows, the tile the row
// lands in or the thread.
#include <algorithm>
#include <cstring>

#include "kernels/matmul_kernels.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__AVX512BF16__) && defined(__linux__)
#define OSSA_HAVE_AMX_EXT 1
#include "kernels/amx_bf16_groups.h"
#endif

namespace ossa {

namespace {

struct Ext {
  bool five_bit;    // a fifth bit per index (hi planes)
  bool f32_scales;  // scales and minimums as f32 (else f16, the file's)
  bool has_min;
};
constexpr Ext ext_of(DType t) {
  switch (t) {
    case DType::Q5_0:
      return {true, false, false};
    case DType::Q5_1:
      return {true, false, true};
    case DType::Q5_K:
      return {true, true, true};
    case DType::IQ4_XS:
      return {false, true, false};
    default:
      return {false, false, false};  // IQ4_NL
  }
}
constexpr int64_t ext_scale_at(Ext e) { return e.five_bit ? 320 : 256; }
constexpr int64_t ext_scale_bytes(Ext e) { return e.f32_scales ? 64 : 32; }
constexpr int64_t ext_block_bytes(Ext e) {
  return ext_scale_at(e) + ext_scale_bytes(e) * (e.has_min ? 2 : 1);
}
constexpr int64_t ext_block_bytes(DType t) { return ext_block_bytes(ext_of(t)); }

// The 32 indices of block b (32 values) of a weight row, its scale and its minimum.
void decode_block(DType t, const uint8_t* row, int64_t b, int* q, float& scale, float& min) {
  min = 0.0f;
  auto nibbles = [&](const uint8_t* qs) {  // elements 0..15 low nibbles, 16..31 high
    for (int j = 0; j < 16; ++j) {
      q[j] = qs[j] & 15;
      q[j + 16] = qs[j] >> 4;
    }
  };
  auto fifth = [&](const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((h >> j) & 1) << 4;
  };
  switch (t) {
    case DType::Q5_0: {
      const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
      nibbles(blk.qs);
      fifth(blk.qh);
      scale = f16_to_f32(blk.d);
      return;
    }
    case DType::Q5_1: {
      const auto& blk = reinterpret_cast<const BlockQ5_1*>(row)[b];
      nibbles(blk.qs);
      fifth(blk.qh);
      scale = f16_to_f32(blk.d);
      min = f16_to_f32(blk.m);
      return;
    }
    case DType::IQ4_NL: {
      const auto& blk = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
      nibbles(blk.qs);
      scale = f16_to_f32(blk.d);
      return;
    }
    case DType::Q5_K: {
      const auto& blk = reinterpret_cast<const BlockQ5_K*>(row)[b / 8];
      const int j = static_cast<int>(b % 8);
      int sc, m;
      q4_k_scale_min(j, blk.scales, sc, m);
      for (int l = 0; l < 32; ++l)
        q[l] = ((blk.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15) | ((blk.qh[l] >> j) & 1) << 4;
      scale = f16_to_f32(blk.d) * static_cast<float>(sc);
      min = -(f16_to_f32(blk.dmin) * static_cast<float>(m));
      return;
    }
    case DType::IQ4_XS: {
      const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
      const int j = static_cast<int>(b % 8);
      const int ls =
          (((blk.scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((blk.scales_h >> (2 * j)) & 3) << 4)) -
          32;
      nibbles(blk.qs + 16 * j);
      scale = f16_to_f32(blk.d) * static_cast<float>(ls);
      return;
    }
    default:
      OSSA_ASSERT(false);
  }
}

#if defined(OSSA_HAVE_AMX_EXT)

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// bf16 of the integer index k stands for, at word k (k < 32; 4-bit types repeat at k + 16).
__m512i value_table(DType t) {
  alignas(64) uint16_t w[32];
  for (int k = 0; k < 32; ++k) {
    int v = k;
    if (t == DType::Q5_0) v = k - 16;
    if (t == DType::IQ4_NL || t == DType::IQ4_XS) v = k_iq4_levels[k & 15];
    w[k] = f32_to_bf16(static_cast<float>(v));
  }
  return _mm512_load_si512(w);
}

template <bool FiveBit>
inline void build_b(const uint8_t* blk, uint16_t* out, __m512i table) {
  for (int p = 0; p < 16; ++p) {
    const __m512i v = _mm512_cvtepu8_epi32(load16(blk + 16 * p));
    __m512i idx = _mm512_or_si512(v, _mm512_slli_epi32(v, 12));
    if constexpr (FiveBit) {
      uint32_t hi;
      std::memcpy(&hi, blk + 256 + 4 * p, 4);
      idx = _mm512_and_si512(idx, _mm512_set1_epi32(0x000F000F));
      idx = _mm512_mask_add_epi16(idx, static_cast<__mmask32>(hi), idx, _mm512_set1_epi16(16));
    }
    _mm512_storeu_si512(out + 32 * p, _mm512_permutexvar_epi16(idx, table));
  }
}

template <bool F32>
inline __m512 load_scales(const uint8_t* p) {
  if constexpr (F32)
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
  else
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

thread_local AlignedVector<uint16_t> t_btiles;

// Each type as a block decoder of the shared tile loop (kernels/amx_bf16_groups.h).
template <bool FiveBit, bool F32, bool Min>
struct ExtDecoder {
  static constexpr Ext e{FiveBit, F32, Min};
  static constexpr int64_t block_bytes = ext_block_bytes(e);
  static constexpr bool has_min = Min;
  __m512i table;
  void build(const uint8_t* blk, uint16_t* out) const { build_b<FiveBit>(blk, out, table); }
  __m512 scales(const uint8_t* blk) const { return load_scales<F32>(blk + ext_scale_at(e)); }
  __m512 mins(const uint8_t* blk) const {
    return load_scales<F32>(blk + ext_scale_at(e) + ext_scale_bytes(e));
  }
};

template <bool FiveBit, bool F32, bool Min>
void ext_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                 float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const ExtDecoder<FiveBit, F32, Min> dec{value_table(w.type)};
  amx_bf16::compute(dec, w, x, r_begin, r_end, y, ldy, o_begin, o_end, t_btiles);
}

#endif  // OSSA_HAVE_AMX_EXT

}  // namespace

bool amx_ext_type(DType t) {
  return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::IQ4_NL || t == DType::Q5_K ||
         t == DType::IQ4_XS;
}

size_t amx_ext_repacked_bytes(const TensorView& w) {
#if defined(OSSA_HAVE_AMX_EXT)
  if (!amx_ext_type(w.type) || w.cols % 32 != 0) return 0;
  const int64_t bb = ext_block_bytes(w.type);
  return static_cast<size_t>((w.rows + 15) / 16 * (w.cols / 32) * bb);
#else
  (void)w;
  return 0;
#endif
}

void amx_ext_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  OSSA_ASSERT(amx_ext_type(w.type));
  const Ext e = ext_of(w.type);
  const int64_t nb = w.cols / 32, bb = ext_block_bytes(e);
  int q[32];
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = out + (g * nb + b) * bb;
      std::memset(blk, 0, static_cast<size_t>(bb));
      uint8_t* scales = blk + ext_scale_at(e);
      uint8_t* mins = scales + ext_scale_bytes(e);
      auto put = [&](uint8_t* at, int n, float v) {  // f16 values of the file stay f16 (exact)
        if (e.f32_scales)
          std::memcpy(at + 4 * n, &v, 4);
        else
          reinterpret_cast<uint16_t*>(at)[n] = f32_to_f16(v);
      };
      for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
        float scale, min;
        decode_block(w.type, w.row(g * 16 + n), b, q, scale, min);
        for (int p = 0; p < 16; ++p) {
          blk[16 * p + n] = static_cast<uint8_t>((q[2 * p] & 15) | (q[2 * p + 1] & 15) << 4);
          if (e.five_bit) {
            uint32_t hi;
            std::memcpy(&hi, blk + 256 + 4 * p, 4);
            hi |= static_cast<uint32_t>(q[2 * p] >> 4) << (2 * n) |
                  static_cast<uint32_t>(q[2 * p + 1] >> 4) << (2 * n + 1);
            std::memcpy(blk + 256 + 4 * p, &hi, 4);
          }
        }
        put(scales, n, scale);
        if (e.has_min) put(mins, n, min);
      }
    }
  }
}

void amx_ext_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                     float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
#if defined(OSSA_HAVE_AMX_EXT)
  switch (w.type) {
    case DType::Q5_0:
      return ext_compute<true, false, false>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    case DType::Q5_1:
      return ext_compute<true, false, true>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    case DType::Q5_K:
      return ext_compute<true, true, true>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    case DType::IQ4_XS:
      return ext_compute<false, true, false>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    default:
      return ext_compute<false, false, false>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  }
#else
  (void)w, (void)x, (void)r_begin, (void)r_end, (void)y, (void)ldy, (void)o_begin, (void)o_end;
  throw ModelError("amx matmul: not built");
#endif
}

}  // namespace ossa
