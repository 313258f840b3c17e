#pragma once
// fp16, bf16 and fp8 (E4M3) conversions (scalar; kernels use the F16C/AVX-512 instructions
// directly).
#include <cstdint>
#include <cstring>
#include <limits>

namespace ossa {

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// An FP8 E4M3 byte (OCP's E4M3FN: bias 7, no infinities, S.1111.111 NaN) as the integer q with
// value q * 2^-9 exactly: (8 + m) << (e - 1) for e > 0, m for subnormals (|q| < 2^18).
inline int e4m3_q(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const int q = e == 0 ? m : (8 + m) << (e - 1);
  return (b & 0x80) != 0 ? -q : q;
}
inline bool e4m3_is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }
inline float e4m3_to_f32(uint8_t b) {
  if (e4m3_is_nan(b)) return std::numeric_limits<float>::quiet_NaN();
  const float v = static_cast<float>(e4m3_q(b & 0x7f)) * (1.0f / 512.0f);
  return (b & 0x80) != 0 ? -v : v;  // (0x80: -0.0)
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    // value = m * 2^(e-150); the f16 subnormal unit is 2^-24, so shift right by 126 - e.
    const uint32_t total_shift = 126 - e;
    uint32_t val = m >> total_shift;
    const uint32_t rem = m & ((1u << total_shift) - 1);
    const uint32_t half = 1u << (total_shift - 1);
    if (rem > half || (rem == half && (val & 1u))) ++val;
    return static_cast<uint16_t>(sign | val);
  }
  uint32_t bits = abs - ((127 - 15) << 23);
  uint32_t val = bits >> 13;
  const uint32_t rem = bits & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (val & 1u))) ++val;
  return static_cast<uint16_t>(sign | val);
}

}  // namespace ossa
