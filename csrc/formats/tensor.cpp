#include "formats/tensor.h"

#include <cstring>
#include <string>
#include <vector>

#include "formats/dequantize.h"
#include "kernels/iq23.h"
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
// and the ones of the Q2_K..Q5_K_M and IQ4 files (diagrams in kernels/quant.h):
//   Q5_0 (32, 22 B): f16 d | u32 qh | u8 qs[16]            x = (q5 - 16) * d
//   Q5_1 (32, 24 B): f16 d | f16 m | u32 qh | u8 qs[16]    x = q5 * d + m
//   Q2_K (256, 84 B): u8 scales[16] | u8 qs[64] | f16 d | f16 dmin
//   Q3_K (256, 110 B): u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d
//   Q5_K (256, 176 B): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
//   IQ4_NL (32, 18 B): f16 d | u8 qs[16]                   x = levels[nibble] * d
//   IQ4_XS (256, 136 B): f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]
//   MXFP4 (32, 17 B): u8 e (E8M0) | u8 qs[16]               x = mxfp4_levels[nibble] * 2^(e - 128)
// and the i-quants below 4 bits (256 values a block; layouts in kernels/iq23.h): IQ2_XXS 66 B,
// IQ2_XS 74, IQ2_S 82, IQ3_XXS 98, IQ3_S 110, IQ1_S 50, IQ1_M 56.
//   FP8 (128, 132 B, not ggml's): f32 s | u8 e4m3[128]      x = fl32(e4m3_value * s)
DTypeTraits dtype_traits(DType type) {
  switch (type) {
    case DType::F32:
      return {1, 4};
    case DType::F16:
      return {1, 2};
    case DType::BF16:
      return {1, 2};
    case DType::Q4_0:
      return {32, 18};
    case DType::Q4_1:
      return {32, 20};
    case DType::Q8_0:
      return {32, 34};
    case DType::Q4_K:
      return {256, 144};
    case DType::Q6_K:
      return {256, 210};
    case DType::Q5_0:
      return {32, 22};
    case DType::Q5_1:
      return {32, 24};
    case DType::Q2_K:
      return {256, 84};
    case DType::Q3_K:
      return {256, 110};
    case DType::Q5_K:
      return {256, 176};
    case DType::IQ4_NL:
      return {32, 18};
    case DType::IQ4_XS:
      return {256, 136};
    case DType::MXFP4:
      return {32, 17};
    case DType::IQ2_XXS:
      return {256, 66};
    case DType::IQ2_XS:
      return {256, 74};
    case DType::IQ2_S:
      return {256, 82};
    case DType::IQ3_XXS:
      return {256, 98};
    case DType::IQ3_S:
      return {256, 110};
    case DType::IQ1_S:
      return {256, 50};
    case DType::IQ1_M:
      return {256, 56};
    case DType::BITNET:
      return {64, 16};
    case DType::FP8:
      return {128, 132};
  }
  throw ModelError("unsupported tensor type '" + ggml_type_name(static_cast<uint32_t>(type)) + "'");
}

bool dtype_supported(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 8:
    case 12:
    case 14:
    case 30:
      return true;
    case 6:
    case 7:
    case 10:
    case 11:
    case 13:
    case 20:
    case 23:
      return true;  // Q5_0 Q5_1 Q2_K Q3_K Q5_K IQ4_*
    case 39:
      return true;  // MXFP4 (gpt-oss, *-MXFP4_MOE files)
    case 16:
    case 17:
    case 18:
    case 19:
    case 21:
    case 22:
    case 29:
      return true;  // IQ2_XXS IQ2_XS IQ3_XXS IQ1_S IQ3_S IQ2_S IQ1_M
    default:
      return false;
  }
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::Q4_0:
      return "Q4_0";
    case DType::Q4_1:
      return "Q4_1";
    case DType::Q8_0:
      return "Q8_0";
    case DType::Q4_K:
      return "Q4_K";
    case DType::Q6_K:
      return "Q6_K";
    case DType::Q5_0:
      return "Q5_0";
    case DType::Q5_1:
      return "Q5_1";
    case DType::Q2_K:
      return "Q2_K";
    case DType::Q3_K:
      return "Q3_K";
    case DType::Q5_K:
      return "Q5_K";
    case DType::IQ4_NL:
      return "IQ4_NL";
    case DType::IQ4_XS:
      return "IQ4_XS";
    case DType::MXFP4:
      return "MXFP4";
    case DType::IQ2_XXS:
      return "IQ2_XXS";
    case DType::IQ2_XS:
      return "IQ2_XS";
    case DType::IQ2_S:
      return "IQ2_S";
    case DType::IQ3_XXS:
      return "IQ3_XXS";
    case DType::IQ3_S:
      return "IQ3_S";
    case DType::IQ1_S:
      return "IQ1_S";
    case DType::IQ1_M:
      return "IQ1_M";
    case DType::BITNET:
      return "BITNET";
    case DType::FP8:
      return "FP8";
  }
  return "?";
}

std::string ggml_type_name(uint32_t ggml_type) {
  // ggml's type ids, including the ones ossa does not support, so errors can name them.
  static const char* const k_names[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
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

// The 5-bit quant j of a Q5_0 / Q5_1 block: low nibble from qs (element j < 16: low half of qs[j],
// else high half of qs[j - 16]), fifth bit j of the little-endian u32 qh.
inline int q5_at(const uint8_t* qh, const uint8_t* qs, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const int low = j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
  return low | static_cast<int>(((h >> j) & 1) << 4);
}

constexpr int k_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4: twice the E2M1 values, and half the E8M0 scale, 2^(e - 128) (kernels/quant.h).
constexpr int k_mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Q3_K's signed 6-bit scale g (0..15): 4 low bits in scales[0..8) (nibble g / 8), 2 high bits in
// scales[8 + g % 4] (bits 2 (g / 4), +1).
inline int q3_k_scale(const uint8_t* s, int g) {
  const int low = g < 8 ? s[g] & 0xf : s[g - 8] >> 4;
  return (low | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
}

// Q2_K / Q3_K / Q5_K / IQ4_XS: one 256-value block into out[0..256).
void dequantize_block_256(DType t, const uint8_t* p, float* out) {
  switch (t) {
    case DType::Q2_K: {  // value 128h + 32s + l: bits 2s.. of qs[32h + l]; scale/min per 16 values
      const uint8_t* sc = p;
      const uint8_t* qs = p + 16;
      const float d = load_f16(p + 80), dmin = load_f16(p + 82);
      for (int i = 0; i < 256; ++i) {
        const int h = i / 128, s = (i / 32) % 4, l = i % 32, g = i / 16;
        const int q = (qs[32 * h + l] >> (2 * s)) & 3;
        out[i] = d * static_cast<float>(sc[g] & 0xf) * static_cast<float>(q) -
                 dmin * static_cast<float>(sc[g] >> 4);
      }
      return;
    }
    case DType::Q3_K: {  // as Q2_K, plus a third bit (bit 4h + s of hmask[l]; clear means minus 4)
      const uint8_t* hmask = p;
      const uint8_t* qs = p + 32;
      const float d = load_f16(p + 108);
      for (int i = 0; i < 256; ++i) {
        const int h = i / 128, s = (i / 32) % 4, l = i % 32;
        const int q = ((qs[32 * h + l] >> (2 * s)) & 3) - (((hmask[l] >> (4 * h + s)) & 1) ? 0 : 4);
        out[i] = d * static_cast<float>(q3_k_scale(p + 96, i / 16)) * static_cast<float>(q);
      }
      return;
    }
    case DType::Q5_K: {  // sub-block j: nibbles of qs[32 (j / 2) + l] (low for even j), bit j of
                         // qh[l]
      const float d = load_f16(p), dmin = load_f16(p + 2);
      const uint8_t* qh = p + 16;
      const uint8_t* qs = p + 48;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        k4_scale_min(j, p + 4, sc, m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
          const int low = j % 2 == 0 ? qs[32 * (j / 2) + l] & 0xf : qs[32 * (j / 2) + l] >> 4;
          const int q = low | (((qh[l] >> j) & 1) << 4);
          out[32 * j + l] = d1 * static_cast<float>(q) - m1;
        }
      }
      return;
    }
    default: {  // IQ4_XS: sub-block j has scale d * (6-bit ls - 32) and the nibbles of qs[16 j ..]
      OSSA_ASSERT(t == DType::IQ4_XS);
      const float d = load_f16(p);
      const int scales_h = p[2] | (p[3] << 8);
      for (int j = 0; j < 8; ++j) {
        const int ls =
            (((p[4 + j / 2] >> (4 * (j % 2))) & 0xf) | (((scales_h >> (2 * j)) & 3) << 4)) - 32;
        const float dl = d * static_cast<float>(ls);
        const uint8_t* qs = p + 8 + 16 * j;
        for (int l = 0; l < 16; ++l) {
          out[32 * j + l] = dl * static_cast<float>(k_iq4_levels[qs[l] & 0xf]);
          out[32 * j + l + 16] = dl * static_cast<float>(k_iq4_levels[qs[l] >> 4]);
        }
      }
      return;
    }
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
    case DType::Q5_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 22, out += 32) {
        const float d = load_f16(p);
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q5_at(p + 2, p + 6, j) - 16) * d;
      }
      return;
    case DType::Q5_1:
      for (int64_t b = 0; b < n / 32; ++b, p += 24, out += 32) {
        const float d = load_f16(p), m = load_f16(p + 2);
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q5_at(p + 4, p + 8, j)) * d + m;
      }
      return;
    case DType::BITNET:  // (the ternary values over the scale: what the products weigh x by)
      for (int64_t k = 0; k < n; ++k) {
        const int code = (view.data[bitnet_byte(row, k, n)] >> (2 * ((k % 64) / 16))) & 3;
        out[k] = view.scale_mul ? static_cast<float>(code - 1) * view.scale
                                : static_cast<float>(code - 1) / view.scale;
      }
      return;
    case DType::FP8:
      for (int64_t b = 0; b < n / 128; ++b, p += 132, out += 128) {
        float s;
        std::memcpy(&s, p, 4);
        for (int j = 0; j < 128; ++j) out[j] = e4m3_to_f32(p[4 + j]) * s;
      }
      return;
    case DType::MXFP4:
      for (int64_t b = 0; b < n / 32; ++b, p += 17, out += 32) {
        const float d = mxfp4_scale(p[0]);
        for (int j = 0; j < 16; ++j) {
          out[j] = static_cast<float>(k_mxfp4_levels[p[1 + j] & 0xf]) * d;
          out[j + 16] = static_cast<float>(k_mxfp4_levels[p[1 + j] >> 4]) * d;
        }
      }
      return;
    case DType::IQ4_NL:
      for (int64_t b = 0; b < n / 32; ++b, p += 18, out += 32) {
        const float d = load_f16(p);
        for (int j = 0; j < 16; ++j) {
          out[j] = static_cast<float>(k_iq4_levels[p[2 + j] & 0xf]) * d;
          out[j + 16] = static_cast<float>(k_iq4_levels[p[2 + j] >> 4]) * d;
        }
      }
      return;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q5_K:
    case DType::IQ4_XS: {
      const int bytes = dtype_traits(view.type).block_bytes;
      for (int64_t b = 0; b < n / 256; ++b, p += bytes, out += 256)
        dequantize_block_256(view.type, p, out);
      return;
    }
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M: {
      const int bytes = dtype_traits(view.type).block_bytes;
      int q[32];
      float scale[2];
      for (int64_t b = 0; b < n / 256; ++b, p += bytes)
        for (int s = 0; s < 8; ++s, out += 32) {
          iq23::decode_sub(view.type, p, s, q, scale);
          for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * scale[j / 16];
        }
      return;
    }
  }
  throw ModelError("cannot dequantize tensor type " +
                   std::to_string(static_cast<uint32_t>(view.type)));
}

void dequantize_row_logical(const TensorView& view, int64_t row, float* out) {
  if (view.in_perm == nullptr) return dequantize_row(view, row, out);
  std::vector<float> stored(static_cast<size_t>(view.cols));
  dequantize_row(view, row, stored.data());
  for (int64_t j = 0; j < view.cols; ++j) out[view.in_perm[j]] = stored[static_cast<size_t>(j)];
}

}  // namespace ossa
