#pragma once
// Block layouts of quantized weights (llama.cpp's, byte for byte) and the 8-bit activation blocks
// the quantized matmuls consume.
//
//   Q4_0  | d f16 | qs[16] |                         32 elems, w = (nibble - 8) * d
//   Q4_1  | d f16 | m f16 | qs[16] |                 32 elems, w = nibble * d + m
//         (element j is the low nibble of qs[j], element j+16 the high nibble)
//   Q8_0  | d f16 | qs[32] int8 |                    32 elems, w = q * d
//   Q4_K  | d f16 | dmin f16 | scales[12] | qs[128] |        256 elems in 8 sub-blocks of 32,
//         w = d * sc[j] * nibble - dmin * m[j] (6-bit sc/m packed in scales)
//   Q6_K  | ql[128] | qh[64] | scales[16] int8 | d f16 |    256 elems in 16 sub-blocks of 16,
//         w = d * sc[j] * (q6 - 32)
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "formats/tensor.h"

namespace ossa {

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210);

// ---- The types inside Q2_K..Q5_K_M and IQ4_XS files (matmul_q5.cpp, matmul_q23k.cpp,
// matmul_iq4.cpp)
//
//   Q5_0  | d f16 | qh u32 | qs[16] |               32 elems, w = (q5 - 16) * d
//   Q5_1  | d f16 | m f16 | qh u32 | qs[16] |       32 elems, w = q5 * d + m
//         q5 of element j = nibble j (as Q4_0: low nibbles of qs are 0..15, high 16..31) | bit j of
//         qh << 4
//   IQ4_NL | d f16 | qs[16] |                       32 elems, w = k_iq4_levels[nibble] * d
//
//   Q5_K  | d f16 | dmin f16 | scales[12] | qh[32] | qs[128] |       256 elems, 8 sub-blocks of 32
//         sub-block j, element l:  q5 = nibble of qs[32 (j / 2) + l] (low for even j, high for odd)
//                                       | bit j of qh[l] << 4
//         w = d * sc[j] * q5 - dmin * m[j]  (sc, m: 6 bits, packed as Q4_K's)
//   IQ4_XS | d f16 | scales_h u16 | scales_l[4] | qs[128] |          256 elems, 8 sub-blocks of 32
//         sub-block j: ls = (nibble j of scales_l | bits 2j, 2j+1 of scales_h << 4) - 32,
//         elements 0..15 / 16..31 the low / high nibbles of qs[16 j .. 16 j + 16),
//         w = d * ls * k_iq4_levels[nibble]
//
//   Q2_K and Q3_K spread each value's bits over the block, four 2-bit fields per byte:
//
//         value  128h + 32s + l      (h: half 0..1, s: shift 0..3, l: 0..31)
//         low 2 bits = bits 2s, 2s+1 of qs[32h + l];   scale group g = value / 16 (16 groups of 16)
//
//   Q2_K  | scales[16] | qs[64] | d f16 | dmin f16 |                 256 elems
//         w = d * (scales[g] & 15) * q2 - dmin * (scales[g] >> 4)
//   Q3_K  | hmask[32] | qs[64] | scales[12] | d f16 |                256 elems
//         q3 = q2 - 4 unless bit 4h + s of hmask[l] is set;  w = d * sc[g] * q3,
//         sc[g] = (low nibble g of scales[0..8) | bits 2 (g / 4).. of scales[8 + g % 4] << 4) - 32
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockIQ4_XS {
  uint16_t d, scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);

// IQ4_NL / IQ4_XS: the 16 levels a 4-bit index selects (a non-uniform grid, llama.cpp's kvalues).
inline constexpr int8_t k_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4 (gpt-oss; OCP microscaling FP4) | e u8 | qs[16] |   32 elems, w = k_mxfp4_levels[nibble] *
// 2^(e - 128): an E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) times the E8M0 scale
// 2^(e - 127), held as twice the value (exact int8 levels) times half the scale (llama.cpp's
// convention); nibbles ordered as Q4_0's (low: elements 0..15, high: 16..31).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
static_assert(sizeof(BlockMXFP4) == 17);
inline constexpr int8_t k_mxfp4_levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                              0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) exactly, for every e (e < 2: a subnormal float).
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Q3_K's signed 6-bit scale of group g (0..15).
inline int q3_k_scale(const uint8_t* s, int g) {
  const int low = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
  return (low | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
}

// One activation block: 32 values as int8 with a float scale, x ~= d * qs, and s = d * sum(qs)
// (the term the weight minimums of Q4_1/Q4_K multiply). Quantization depends only on the 32 values,
// so a row quantizes the same whatever batch it sits in.
struct BlockQ8 {
  float d;
  float s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8) == 40);

constexpr int k_qblock = 32;  // elements per activation block

// True for weight types whose matmul consumes BlockQ8 activations.
bool dtype_quantized(DType type);

// x[n_rows, k] (row stride k) -> out[n_rows, k/32]; k must be a multiple of 32.
void quantize_rows_q8(const float* x, int64_t n_rows, int64_t k, BlockQ8* out);

// Q4_K's packed 6-bit scale and minimum of sub-block j (0..7).
inline void q4_k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace ossa
