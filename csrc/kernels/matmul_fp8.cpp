// f32 tile kernels for FP8 (E4M3) weights with block scales (DType::FP8, a folder's FineGrainedFP8
// matrices repacked at load: each 128-value block its f32 scale s, then 128 E4M3 bytes). The tile
// loop and its batch-invariance contract are matmul_tile.h's: a super-block is one 128-value block
// (four 32-value blocks sharing s), and every weight is fl32(e4m3 * s), the value transformers'
// dequantization gives, rounded once.
//
// On AVX-512 a byte becomes an f16 with the same bits shifted (sign to bit 15, exponent and
// mantissa to bits 13..7): that f16 is the E4M3 value times 2^-8, subnormals included, and
// vcvtph2ps widens it exactly; the weight is then fl32(f16 * (256 s)), the same product. The
// portable builds take the integer q (value q * 2^-9) with scale 2^-9 s: the same weight again.
#include <cstring>

#include "kernels/matmul_tile.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

inline float block_scale(const uint8_t* row, int64_t sb) {
  float s;
  std::memcpy(&s, row + sb * 132, 4);
  return s;
}

struct FP8 {
  static constexpr int k_sub = 4;  // (32-value blocks per 128-value block)
  static const uint8_t* bytes(const uint8_t* row, int64_t b) {
    return row + (b / 4) * 132 + 4 + (b % 4) * 32;
  }
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const uint8_t* p = bytes(row, b);
    for (int j = 0; j < 32; ++j) q[j] = e4m3_q(p[j]);
    scale[0] = scale[1] = block_scale(row, b / 4) * (1.0f / 512.0f);  // (exact: checked at load)
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX512F__)
  struct Prep {
    __m512 s256;  // 256 s
  };
  static void prepare(const uint8_t* row, int64_t sb, Prep& p) {
    p.s256 = _mm512_set1_ps(block_scale(row, sb) * 256.0f);
  }
  static tile::Block32 decode(const uint8_t* row, int64_t b, const Prep& p) {
    // Sign-extended to 16 bits and shifted left by 7: the sign lands in bits 15 and 14, the
    // exponent and mantissa in 13..7; clearing bit 14 leaves the f16.
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes(row, b)));
    const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(v), 7),
                                       _mm512_set1_epi16(static_cast<int16_t>(0xBFFF)));
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    return {_mm512_mul_ps(lo, p.s256), _mm512_mul_ps(hi, p.s256)};
  }
#else
  struct Prep {};
  static void prepare(const uint8_t*, int64_t, Prep&) {}
#endif
};

}  // namespace

F32Tile f32_tile_fp8(int rows) { return tile::tile_for_rows<FP8>(rows); }

}  // namespace ossa
