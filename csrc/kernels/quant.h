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

#include "model/tensor.h"

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
