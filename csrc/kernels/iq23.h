#pragma once
// The i-quants below 4 bits (llama.cpp's IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: the
// types of IQ1_*, IQ2_* and IQ3_* files): block layouts, the codebooks expanded for the kernels,
// and the scalar decoder that dequantize_row (formats/tensor.cpp) and the f32 tile kernels
// (matmul_iq23.cpp) share. Twin: ossa.reference.quants (_dequantize_iq2_xxs ...).
//
// Every type has 256-value blocks of eight 32-value sub-blocks; a sub-block is 4 groups of 8 values
// (8 groups of 4 for IQ3_*), each group an entry of a fixed codebook (kernels/iq_grids.h, from
// tools/gen_iq_grids.py) of small magnitudes, with a sign per value. A weight is an integer q times
// a scale per 16 or 32 values:
//
//   IQ2_XXS | d f16 | per sub-block: idx u8[4], aux u32 |                                 66 B
//           group l: codebook entry idx[l], signs ksigns(aux >> 7l); ls = aux >> 28 per 32 values
//   IQ2_XS  | d f16 | qs u16[32] | scales[8] |                                              74 B
//           group k: entry qs[k] & 511, signs ksigns(qs[k] >> 9); ls: nibble k / 2 of scales
//   IQ2_S   | d f16 | qs[32] | signs[32] | qh[8] | scales[8] |                              82 B
//           group k: entry qs[k] | bits 2(k % 4).. of qh[k / 4] << 8, the 8 sign bits signs[k]
//   IQ3_XXS | d f16 | qs[64] | aux u32[8] |                                                  98 B
//           group of 4 k: entry qs[k]; sub-block s: signs ksigns(aux[s] >> 7l) per 8, ls = aux[s]
//           >> 28
//   IQ3_S   | d f16 | qs[64] | qh[8] | signs[32] | scales[4] |                            110 B
//           group of 4 k: entry qs[k] | bit k % 8 of qh[k / 8] << 8; value i's sign bit i of signs;
//           ls: nibble s of scales per sub-block s
//   IQ1_S   | d f16 | qs[32] | qh u16[8] |                                                   50 B
//           sub-block s, group l: entry qs[4s + l] | bits 3l.. of qh[s] << 8; ls = bits 12..14 of
//           qh[s], the delta's sign bit 15
//   IQ1_M   | qs[32] | qh[16] | sc u16[4] |                                                  56 B
//           group k: entry qs[k] | (nibble k % 2 of qh[k / 2] & 7) << 8, the delta's sign its bit
//           3; ls of 16 values h: bits 3(h % 4).. of sc[h / 4]; d's f16 bits 4j.. = sc[j] >> 12
//
//   IQ2_*:   q = +-entry value (8, 25, 43),  scale = d (2 ls + 1) / 8  (llama.cpp: d (0.5 + ls) /
//   4) IQ3_XXS: q = +-entry value (4 .. 62),    scale = d (2 ls + 1) / 4 IQ3_S:   q = +-entry value
//   (1 .. 15),    scale = d (2 ls + 1) IQ1_*:   q = 8 entry value +- 1 (the entry's values -1, 0,
//   1; + unless the delta's sign bit),
//            scale = d (2 ls + 1) / 8      (llama.cpp: d (2 ls + 1) (entry value +- 1/8))
//
// ksigns(s) is the 7 bits s and an eighth making the number of minus signs even. Every product q x
// scale has at most 22 significant bits, so every weight is exact in float32 (as llama.cpp's).
#include <array>
#include <cstdint>
#include <cstring>

#if defined(__BMI2__)
#include <immintrin.h>
#endif

#include "formats/tensor.h"
#include "kernels/iq_grids.h"
#include "util/half.h"

namespace ossa::iq23 {

constexpr bool is_iq23(DType t) {
  return t == DType::IQ2_XXS || t == DType::IQ2_XS || t == DType::IQ2_S || t == DType::IQ3_XXS ||
         t == DType::IQ3_S || t == DType::IQ1_S || t == DType::IQ1_M;
}

// A codebook's entries as their values, one per byte (little-endian: value j in byte j), times
// `mul`.
template <size_t N>
constexpr std::array<uint64_t, N> expand(const uint16_t (&words)[N], const int8_t* levels, int bits,
                                         int values, int mul) {
  std::array<uint64_t, N> out{};
  for (size_t e = 0; e < N; ++e) {
    uint64_t v = 0;
    for (int j = 0; j < values; ++j) {
      const int level = levels[(words[e] >> (bits * j)) & ((1 << bits) - 1)] * mul;
      v |= static_cast<uint64_t>(static_cast<uint8_t>(static_cast<int8_t>(level))) << (8 * j);
    }
    out[e] = v;
  }
  return out;
}
using namespace iq_grids;
inline constexpr auto k_grid_iq2xxs = expand(k_iq2xxs_words, k_iq2xxs_levels, 2, 8, 1);
inline constexpr auto k_grid_iq2xs = expand(k_iq2xs_words, k_iq2xs_levels, 2, 8, 1);
inline constexpr auto k_grid_iq2s = expand(k_iq2s_words, k_iq2s_levels, 2, 8, 1);
inline constexpr auto k_grid_iq3xxs = expand(k_iq3xxs_words, k_iq3xxs_levels, 3, 4, 1);
inline constexpr auto k_grid_iq3s = expand(k_iq3s_words, k_iq3s_levels, 3, 4, 1);
inline constexpr auto k_grid_iq1 = expand(k_iq1_words, k_iq1_levels, 2, 8, 8);  // 8 x (-1, 0, 1)

// ksigns: the sign byte of 7 sign bits (bit 7 set where bits 0..6 have an odd count).
constexpr std::array<uint8_t, 128> make_ksigns() {
  std::array<uint8_t, 128> out{};
  for (int s = 0; s < 128; ++s) {
    int n = 0;
    for (int j = 0; j < 7; ++j) n += (s >> j) & 1;
    out[s] = static_cast<uint8_t>(s | ((n & 1) << 7));
  }
  return out;
}
inline constexpr auto k_ksigns = make_ksigns();

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
// 32 sign bits (bit i: value i negative) of four 7-bit fields of aux: each field in the low 7 bits
// of a byte, and the byte's parity (bit 0 after folding it three times) as its bit 7.
inline uint32_t ksign_mask(uint32_t aux) {
#if defined(__BMI2__)
  const uint32_t m = _pdep_u32(aux, 0x7F7F7F7Fu);
#else
  const uint32_t m =
      (aux & 0x7F) | (aux & 0x3F80) << 1 | (aux & 0x1FC000) << 2 | (aux & 0xFE00000) << 3;
#endif
  uint32_t p = m ^ (m >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return m | (p & 0x01010101u) << 7;
}
// IQ1_M's d, assembled from the top nibbles of its four scale words.
inline float iq1m_d(const uint8_t* block) {
  const uint8_t* sc = block + 48;
  const uint16_t bits =
      static_cast<uint16_t>((load_u16(sc) >> 12) | ((load_u16(sc + 2) >> 8) & 0x00F0) |
                            ((load_u16(sc + 4) >> 4) & 0x0F00) | (load_u16(sc + 6) & 0xF000));
  return f16_to_f32(bits);
}
// The 3-bit ls of 16-value half h (0..15) of an IQ1_M block.
inline int iq1m_ls(const uint8_t* block, int h) {
  return (load_u16(block + 48 + 2 * (h / 4)) >> (3 * (h % 4))) & 7;
}

// A block's d: its f16 field, or IQ1_M's assembled one.
inline float block_d(DType t, const uint8_t* blk) {
  return t == DType::IQ1_M ? iq1m_d(blk) : f16_to_f32(load_u16(blk));
}

// The scales of sub-block s's (0..7) two 16-value halves, d = block_d(t, blk): d (2 ls + 1) times
// 1/8, 1/4 or 1.
inline void sub_scales(DType t, const uint8_t* blk, int s, float d, float* scale) {
  auto odd = [](int ls) { return static_cast<float>(2 * ls + 1); };
  switch (t) {
    case DType::IQ1_M:
      scale[0] = d * odd(iq1m_ls(blk, 2 * s)) * 0.125f;
      scale[1] = d * odd(iq1m_ls(blk, 2 * s + 1)) * 0.125f;
      return;
    case DType::IQ2_XXS:
      scale[0] = scale[1] = d * odd(static_cast<int>(load_u32(blk + 2 + 8 * s + 4) >> 28)) * 0.125f;
      return;
    case DType::IQ2_XS:
    case DType::IQ2_S: {
      const int sc = blk[(t == DType::IQ2_XS ? 66 : 74) + s];
      scale[0] = d * odd(sc & 15) * 0.125f;
      scale[1] = d * odd(sc >> 4) * 0.125f;
      return;
    }
    case DType::IQ3_XXS:
      scale[0] = scale[1] = d * odd(static_cast<int>(load_u32(blk + 66 + 4 * s) >> 28)) * 0.25f;
      return;
    case DType::IQ3_S:
      scale[0] = scale[1] = d * odd((blk[106 + s / 2] >> (4 * (s % 2))) & 15);
      return;
    default:  // IQ1_S
      scale[0] = scale[1] = d * odd((load_u16(blk + 34 + 2 * s) >> 12) & 7) * 0.125f;
      return;
  }
}

// Sub-block s (0..7) of a 256-value block: its 32 integers q and the scales of its two halves.
inline void decode_sub(DType t, const uint8_t* blk, int s, int* q, float* scale) {
  auto put8 = [&](int group, uint64_t entry, uint32_t signs8, int add = 0) {
    for (int j = 0; j < 8; ++j) {
      const int v = static_cast<int8_t>(entry >> (8 * j)) + add;
      q[8 * group + j] = (signs8 >> j) & 1 ? -v : v;
    }
  };
  auto put4 = [&](int group, uint64_t entry, uint32_t signs4) {
    for (int j = 0; j < 4; ++j) {
      const int v = static_cast<int8_t>(entry >> (8 * j));
      q[4 * group + j] = (signs4 >> j) & 1 ? -v : v;
    }
  };
  sub_scales(t, blk, s, block_d(t, blk), scale);
  switch (t) {
    case DType::IQ2_XXS: {
      const uint8_t* g = blk + 2 + 8 * s;
      const uint32_t aux = load_u32(g + 4), m = ksign_mask(aux);
      for (int l = 0; l < 4; ++l) put8(l, k_grid_iq2xxs[g[l]], m >> (8 * l));
      return;
    }
    case DType::IQ2_XS: {
      for (int l = 0; l < 4; ++l) {
        const uint16_t w = load_u16(blk + 2 + 2 * (4 * s + l));
        put8(l, k_grid_iq2xs[w & 511], k_ksigns[w >> 9]);
      }
      return;
    }
    case DType::IQ2_S: {
      const int qh = blk[66 + s];
      for (int l = 0; l < 4; ++l)
        put8(l, k_grid_iq2s[blk[2 + 4 * s + l] | ((qh >> (2 * l)) & 3) << 8], blk[34 + 4 * s + l]);
      return;
    }
    case DType::IQ3_XXS: {
      const uint32_t aux = load_u32(blk + 66 + 4 * s), m = ksign_mask(aux);
      for (int l = 0; l < 8; ++l) put4(l, k_grid_iq3xxs[blk[2 + 8 * s + l]], m >> (4 * l));
      return;
    }
    case DType::IQ3_S: {
      const int qh = blk[66 + s];
      const uint32_t m = load_u32(blk + 74 + 4 * s);
      for (int l = 0; l < 8; ++l)
        put4(l, k_grid_iq3s[blk[2 + 8 * s + l] | ((qh >> l) & 1) << 8], m >> (4 * l));
      return;
    }
    case DType::IQ1_S: {
      const int qh = load_u16(blk + 34 + 2 * s);
      const int delta = qh & 0x8000 ? -1 : 1;
      for (int l = 0; l < 4; ++l)
        put8(l, k_grid_iq1[blk[2 + 4 * s + l] | ((qh >> (3 * l)) & 7) << 8], 0, delta);
      return;
    }
    default: {  // IQ1_M
      for (int l = 0; l < 4; ++l) {
        const int k = 4 * s + l, nib = (blk[32 + k / 2] >> (4 * (k % 2))) & 15;
        put8(l, k_grid_iq1[blk[k] | (nib & 7) << 8], 0, nib & 8 ? -1 : 1);
      }
      return;
    }
  }
}

}  // namespace ossa::iq23
