// Q4_K and Q6_K with f32 activations on AVX-512: the tile kernels and the activation layout they
// read.
//
// The quants are turned into f32 without widening bytes first. 64 bytes of 4-bit quants are loaded
// as 16 dwords; shifting every dword right by 4k puts nibble k of each dword in its low 4 bits, and
// vpermps, which reads only those 4 bits as its index, looks the nibble up in a table of floats:
// two instructions for 16 weights. Element order follows the bytes, so the activations are laid out
// once per matmul call in the same order (kquant_prepare_row), instead of the weights at load:
//
//   dword-vector v, lane i = bytes 4i..4i+3;  f_k = table[(v >> 4k) & 15]
//   is nibble k % 2 of byte 4i + k / 2, which holds
//   Q4_K (128 elements per 64 bytes of qs): element 64 (i / 8) + 32 (k % 2) + 4 (i % 8) + k / 2
//   Q6_K (128 elements per 64 bytes of ql): element 32 (i / 8) + 64 (k % 2) + 4 (i % 8) + k / 2
//
// Scales are taken out of the sums: per 64 bytes, the products of even k and those of odd k are
// summed separately (each sum's lanes belong to two or four sub-blocks, which the scale vector
// matches), then each sum is multiplied by its scales into the total:
//
//   acc = f_0 x_0;  acc = fma(f_2, x_2, acc); ... f_6     tot = fma(acc, scales_even, tot)
//   acc = f_1 x_1;  acc = fma(f_3, x_3, acc); ... f_7     tot = fma(acc, scales_odd, tot)
//
// Q4_K's minimums multiply the sums of each 32 activations (kept after the permuted row):
// tot -= dmin m_j * sum(x of sub-block j), once per super-block. Q6_K's two high bits come from qh
// (broadcast to both halves of a register, shifted so that the right 2-bit field is lowest) through
// a second table holding 16 h - 32, so w = table_lo + table_hi is the signed quant exactly.
//
// The loop is matmul_kblock.h's (Q5_K, IQ4_XS, Q2_K and Q3_K run it too); Q4_K and Q6_K are two
// of its layouts, each 64-byte run of quants two chunks (even k, then odd k).
//
// Every output element gets this same sequence whatever the tile shape (mo weight rows, rows
// activation rows), which keeps the matmul batch invariant.
#include <cstring>

#include "kernels/matmul_kblock.h"
#include "kernels/matmul_kernels.h"

namespace ossa {

#if defined(__AVX512F__)
namespace {

constexpr int q4k_elem(int k, int i) { return 64 * (i / 8) + 32 * (k % 2) + 4 * (i % 8) + k / 2; }
constexpr int q6k_elem(int k, int i) { return 32 * (i / 8) + 64 * (k % 2) + 4 * (i % 8) + k / 2; }

// Lanes 0..7: d * sc_j, lanes 8..15: dmin * m_j, for the 8 sub-blocks of a Q4_K super-block. The
// 6-bit fields are gathered with 32-bit masks and shifts (4 sub-blocks per dword), exactly as
// q4_k_scale_min reads them one at a time.
inline __m512 q4k_scales(const BlockQ4_K& b) {
  uint32_t s[3];
  std::memcpy(s, b.scales, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  alignas(16) uint32_t v[4] = {
      s[0] & low6,                                         // sc 0..3
      (s[2] & low4) | (((s[0] >> 6) & top2) << 4),         // sc 4..7
      s[1] & low6,                                         // m 0..3
      ((s[2] >> 4) & low4) | (((s[1] >> 6) & top2) << 4),  // m 4..7
  };
  const __m512 q =
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(v))));
  const __m512 dm =
      _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&b.d))));
  const __m512 dd =
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), dm);
  return _mm512_mul_ps(q, dd);
}

// Chunk 2c + t (c the 64-byte run of qs, t = k % 2): k = t, t + 2, t + 4, t + 6.
struct Q4KLayout {
  static constexpr int k_chunks = 4, k_per_chunk = 4;
  static constexpr bool k_min = true;
  struct Consts {
    __m512 table = tile::iota16();
    // Scales of chunk 2c + t: lanes 0..7 sub-block 4c + t, lanes 8..15 4c + 2 + t.
    __m512i sel[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                      _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
                      _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
                      _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7)};
  };
  struct Row {
    __m512 sm;  // q4k_scales
  };
  using Quants = __m512i;
  static void load(const uint8_t* w, int64_t sb, Row& r) {
    r.sm = q4k_scales(reinterpret_cast<const BlockQ4_K*>(w)[sb]);
  }
  static constexpr int k_of(int c, int j) { return 2 * j + c % 2; }
  static constexpr int x_at(int c, int k) { return (c / 2) * 128 + 16 * k; }
  static Quants quants(const Consts&, const uint8_t* w, int64_t sb, const Row&, int c) {
    return _mm512_loadu_si512(reinterpret_cast<const BlockQ4_K*>(w)[sb].qs + 64 * (c / 2));
  }
  static __m512 weights(const Consts& k, const Quants& v, int, int kk) {
    return _mm512_permutexvar_ps(kk == 0 ? v : _mm512_srli_epi32(v, 4 * kk), k.table);
  }
  static __m512 scale(const Consts& k, const Row& r, int c) {
    return _mm512_permutexvar_ps(k.sel[c], r.sm);
  }
  // Per super-block: 8 zeros, then the 8 sub-block sums (kquant_prepare_row).
  static __m512 min_term(const Row& r, const float* sums, __m512 tot) {
    return _mm512_mask3_fnmadd_ps(r.sm, _mm512_loadu_ps(sums), tot, 0xFF00);
  }
};

// Chunk 2h + t (h the half of the super-block, t = k % 2): k = t, t + 2, t + 4, t + 6.
struct Q6KLayout {
  static constexpr int k_chunks = 4, k_per_chunk = 4;
  static constexpr bool k_min = false;
  struct Consts {
    __m512 lo_table = tile::iota16();
    // Index n (its low 2 bits are the high bits h of the quant): 16 h - 32.
    __m512 hi_table =
        _mm512_setr_ps(-32, -16, 0, 16, -32, -16, 0, 16, -32, -16, 0, 16, -32, -16, 0, 16);
    // Scales of chunk 2h + t: lane quarter Q -> sub-block 8h + 4t + Q.
    __m512i sel[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
        _mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
        _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15)};
    // qh byte j holds the high bits of elements j, j + 32, j + 64, j + 96 of the half (2 bits
    // each); lanes 8..15 (elements 32.. of their k) start one field higher.
    __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  };
  struct Row {
    __m512 sc;  // d * the 16 scales
  };
  struct Quants {
    __m512i lo, hi;  // the half's 64 bytes of ql; its 32 bytes of qh in both halves, shifted
  };
  static void load(const uint8_t* w, int64_t sb, Row& r) {
    const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w)[sb];
    const __m512 q = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales))));
    r.sc = _mm512_mul_ps(q, _mm512_set1_ps(_cvtsh_ss(b.d)));
  }
  static constexpr int k_of(int c, int j) { return 2 * j + c % 2; }
  static constexpr int x_at(int c, int k) { return (c / 2) * 128 + 16 * k; }
  static Quants quants(const Consts& k, const uint8_t* w, int64_t sb, const Row&, int c) {
    const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w)[sb];
    const int h = c / 2;
    return {_mm512_loadu_si512(b.ql + 64 * h),
            _mm512_srlv_epi32(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(b.qh + 32 * h))),
                              k.upper)};
  }
  static __m512 weights(const Consts& k, const Quants& q, int, int kk) {
    const __m512i il = kk == 0 ? q.lo : _mm512_srli_epi32(q.lo, 4 * kk);
    // field of byte kk / 2 for parity kk % 2: bit 8 (kk / 2) + 4 (kk % 2)
    const int hs = 8 * (kk / 2) + 4 * (kk % 2);
    const __m512i ih = hs == 0 ? q.hi : _mm512_srli_epi32(q.hi, hs);
    return _mm512_add_ps(_mm512_permutexvar_ps(il, k.lo_table),
                         _mm512_permutexvar_ps(ih, k.hi_table));
  }
  static __m512 scale(const Consts& k, const Row& r, int c) {
    return _mm512_permutexvar_ps(k.sel[c], r.sc);
  }
};

}  // namespace

int64_t kquant_prepared_floats(DType t, int64_t cols) {
  if (t == DType::Q4_K || t == DType::Q5_K) return cols + cols / 16;  // Q5_K: matmul_q5.cpp
  if (t == DType::IQ4_XS) return cols;                                // matmul_iq4.cpp
  if (t == DType::Q2_K || t == DType::Q3_K) return cols + cols / 16;  // matmul_q23k.cpp
  if (t == DType::Q6_K) return cols;
  return 0;
}

void kquant_prepare_row(DType t, const float* x, int64_t cols, float* out) {
  if (t == DType::IQ4_XS) return iq4xs_prepare_row(x, cols, out);
  if (t == DType::Q2_K || t == DType::Q3_K) return q23k_prepare_row(x, cols, out);
  if (t == DType::Q6_K) return kblock::reorder_row<128, q6k_elem>(x, cols, out);
  kblock::reorder_row<128, q4k_elem>(x, cols, out);  // Q4_K, and Q5_K (whose qs are Q4_K's)
  float* sums = out + cols;
  for (int64_t sb = 0; sb < cols / 256; ++sb) {
    for (int j = 0; j < 8; ++j) {
      float s = 0.0f;
      for (int i = 0; i < 32; ++i) s += x[256 * sb + 32 * j + i];
      sums[16 * sb + j] = 0.0f;
      sums[16 * sb + 8 + j] = s;
    }
  }
}

// One activation row runs 4 weight rows (kblock::shapes' other shapes).
F32Tile kquant_tile(DType t, int rows) {
  return t == DType::Q4_K ? kblock::shapes<Q4KLayout, 4>(rows) : kblock::shapes<Q6KLayout, 4>(rows);
}

#else

int64_t kquant_prepared_floats(DType, int64_t) { return 0; }
void kquant_prepare_row(DType, const float*, int64_t, float*) {}
F32Tile kquant_tile(DType, int) { return {}; }

#endif

}  // namespace ossa
