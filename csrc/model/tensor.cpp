#include <cstring>
#include <string>

#include "model/dequantize.h"
#include "model/tensor.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {

// Block layouts (llama.cpp ggml-common.h), all little-endian:
//   Q4_0 (32 elems, 18 B): f16 d | u8 qs[16]          x = (nibble - 8) * d; low nibbles first
//   Q4_1 (32 elems, 20 B): f16 d | f16 m | u8 qs[16]  x = nibble * d + m
//   Q8_0 (32 elems, 34 B): f16 d | i8 qs[32]          x = q * d
//   Q4_K (256 elems, 144 B): f16 d | f16 dmin | u8 scales[12] (8 x 6-bit scale, 8 x 6-bit min)
//                            | u8 qs[128]
//   Q6_K (256 elems, 210 B): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
DTypeTraits dtype_traits(DType type) {
  switch (type) {
    case DType::F32: return {1, 4};
    case DType::F16: return {1, 2};
    case DType::BF16: return {1, 2};
    case DType::Q4_0: return {32, 18};
    case DType::Q4_1: return {32, 20};
    case DType::Q8_0: return {32, 34};
    case DType::Q4_K: return {256, 144};
    case DType::Q6_K: return {256, 210};
  }
  throw ModelError("unsupported tensor type '" + ggml_type_name(static_cast<uint32_t>(type)) + "'");
}

bool dtype_supported(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: case 1: case 2: case 3: case 8: case 12: case 14: case 30: return true;
    default: return false;
  }
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

std::string ggml_type_name(uint32_t ggml_type) {
  // ggml's type ids, including the ones ossa does not support, so errors can name them.
  static const char* const k_names[] = {
      "F32",  "F16",     "Q4_0",    "Q4_1",   "Q4_2", "Q4_3", "Q5_0",  "Q5_1",  "Q8_0",   "Q8_1",
      "Q2_K", "Q3_K",    "Q4_K",    "Q5_K",   "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
      "IQ1_S", "IQ4_NL", "IQ3_S",   "IQ2_S",  "IQ4_XS", "I8",  "I16",   "I32",   "I64",    "F64",
      "IQ1_M", "BF16",   "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0"};
  if (ggml_type < sizeof(k_names) / sizeof(k_names[0])) return k_names[ggml_type];
  return "type " + std::to_string(ggml_type);
}

namespace {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

void dequantize_row(const TensorView& view, int64_t row, float* out) {
  const uint8_t* p = view.row(row);
  const int64_t n = view.cols;
  switch (view.type) {
    case DType::F32:
      std::memcpy(out, p, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = load_f16(p + 2 * i);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case DType::Q4_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 18, out += 32) {
        const float d = load_f16(p);
        for (int j = 0; j < 16; ++j) {
          out[j] = static_cast<float>((p[2 + j] & 0xf) - 8) * d;
          out[j + 16] = static_cast<float>((p[2 + j] >> 4) - 8) * d;
        }
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < n / 32; ++b, p += 20, out += 32) {
        const float d = load_f16(p);
        const float m = load_f16(p + 2);
        for (int j = 0; j < 16; ++j) {
          out[j] = static_cast<float>(p[4 + j] & 0xf) * d + m;
          out[j + 16] = static_cast<float>(p[4 + j] >> 4) * d + m;
        }
      }
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34, out += 32) {
        const float d = load_f16(p);
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * d;
      }
      return;
    case DType::Q4_K:
      for (int64_t b = 0; b < n / 256; ++b, p += 144) {
        const float d = load_f16(p);
        const float dmin = load_f16(p + 2);
        const uint8_t* scales = p + 4;
        const uint8_t* q = p + 16;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
          int sc, m;
          k4_scale_min(is, scales, sc, m);
          const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
          k4_scale_min(is + 1, scales, sc, m);
          const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
          for (int l = 0; l < 32; ++l) *out++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
          for (int l = 0; l < 32; ++l) *out++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
      }
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < n / 256; ++b, p += 210) {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = load_f16(p + 208);
        for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, out += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            out[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
            out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
          }
        }
      }
      return;
  }
  throw ModelError("cannot dequantize tensor type " + std::to_string(static_cast<uint32_t>(view.type)));
}

}  // namespace ossa
