#include "kernels/quant.h"

#include <cmath>

#include "util/error.h"

namespace ossa {

bool dtype_quantized(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::IQ2_XXS:  // (the i-quants below 4 bits: matmul_iq23.cpp's q8_dot_iq23)
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
      return true;
    default:
      return false;
  }
}

void quantize_rows_q8(const float* x, int64_t n_rows, int64_t k, BlockQ8* out) {
  OSSA_ASSERT(k % k_qblock == 0);
  const int64_t nb = k / k_qblock;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + r * k + b * k_qblock;
      BlockQ8& o = out[r * nb + b];
      float amax = 0.0f;
      for (int i = 0; i < k_qblock; ++i) amax = std::fmax(amax, std::fabs(v[i]));
      // (127 / amax, as amx_i8_split_rows scales: the blocks are the int8 kernels' one piece)
      const float d = amax / 127.0f;
      const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < k_qblock; ++i) {
        const int q = static_cast<int>(std::nearbyint(v[i] * inv));
        o.qs[i] = static_cast<int8_t>(q);
        sum += q;
      }
      o.d = d;
      o.s = d * static_cast<float>(sum);
    }
  }
}

}  // namespace ossa
