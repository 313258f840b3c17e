// f32 tile kernels for Q5_0, Q5_1 and Q5_K weights (layouts in kernels/quant.h; the tile loop and
// its batch-invariance contract in kernels/matmul_tile.h).
//
// A 5-bit quant is a nibble plus a fifth bit stored apart (qh). On AVX-512 the fifth bits become a
// 16-bit lane mask (straight from qh for Q5_0 / Q5_1, vptestmb against bit j of the bytes qh[l] for
// Q5_K), OR-ed into the nibble as 16, and the 5-bit index selects the weight from a 32-entry table
// (two zmm, vpermt2ps): table[k] = fma(k, scale, min), exactly the dequantized value of quant k.
#include <cstring>

#include "kernels/matmul_kblock.h"
#include "kernels/matmul_tile.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

// Q5_0 / Q5_1: the 32 quants of one block, unsigned 0..31.
inline void q5_quants(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

#if defined(__AVX512F__)
using tile::Block32;
using tile::iota16;
using tile::load16;

// The nibbles of 16 bytes (elements 0..15 low, 16..31 high) with bit 4 set where `high` says,
// looked up in the 32-entry table (t0: entries 0..15, t1: 16..31).
inline Block32 lookup5(const uint8_t* qs, uint32_t high, __m512 t0, __m512 t1) {
  const __m512i e = _mm512_cvtepu8_epi32(load16(qs));
  const __m512i k16 = _mm512_set1_epi32(16);
  __m512i lo = _mm512_and_si512(e, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(e, 4);
  lo = _mm512_mask_or_epi32(lo, static_cast<__mmask16>(high), lo, k16);
  hi = _mm512_mask_or_epi32(hi, static_cast<__mmask16>(high >> 16), hi, k16);
  return {_mm512_permutex2var_ps(t0, lo, t1), _mm512_permutex2var_ps(t0, hi, t1)};
}
#endif

struct Q5_0 : tile::NoPrep {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ5_0& w = reinterpret_cast<const BlockQ5_0*>(row)[b];
    q5_quants(w.qh, w.qs, q);
    for (int i = 0; i < 32; ++i) q[i] -= 16;
    scale[0] = scale[1] = f16_to_f32(w.d);
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockQ5_0& w = reinterpret_cast<const BlockQ5_0*>(row)[b];
    scale[0] = scale[1] = f16_to_f32(w.d);
    min[0] = min[1] = 0.0f;
    return _mm256_sub_epi8(_mm256_or_si256(tile::nibbles32(w.qs), tile::bits32_as_16(w.qh)),
                           _mm256_set1_epi8(16));
  }
#endif
#if defined(__AVX512F__)
  static Block32 decode(const uint8_t* row, int64_t b, const Prep&) {
    const BlockQ5_0& w = reinterpret_cast<const BlockQ5_0*>(row)[b];
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(w.d));
    uint32_t qh;
    std::memcpy(&qh, w.qh, 4);
    // (k - 16) * d: exact, as the dequantized value
    const __m512 t0 = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(16.0f)), d);
    const __m512 t1 = _mm512_mul_ps(iota16(), d);
    return lookup5(w.qs, qh, t0, t1);
  }
#endif
};

struct Q5_1 : tile::NoPrep {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ5_1& w = reinterpret_cast<const BlockQ5_1*>(row)[b];
    q5_quants(w.qh, w.qs, q);
    scale[0] = scale[1] = f16_to_f32(w.d);
    min[0] = min[1] = f16_to_f32(w.m);
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockQ5_1& w = reinterpret_cast<const BlockQ5_1*>(row)[b];
    scale[0] = scale[1] = f16_to_f32(w.d);
    min[0] = min[1] = f16_to_f32(w.m);
    return _mm256_or_si256(tile::nibbles32(w.qs), tile::bits32_as_16(w.qh));
  }
#endif
#if defined(__AVX512F__)
  static Block32 decode(const uint8_t* row, int64_t b, const Prep&) {
    const BlockQ5_1& w = reinterpret_cast<const BlockQ5_1*>(row)[b];
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(w.d)), m = _mm512_set1_ps(_cvtsh_ss(w.m));
    uint32_t qh;
    std::memcpy(&qh, w.qh, 4);
    const __m512 t0 = _mm512_fmadd_ps(iota16(), d, m);
    const __m512 t1 = _mm512_fmadd_ps(_mm512_add_ps(iota16(), _mm512_set1_ps(16.0f)), d, m);
    return lookup5(w.qs, qh, t0, t1);
  }
#endif
};

// Q5_K: sub-block b % 8 of super-block b / 8.
struct Q5_K {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ5_K& w = reinterpret_cast<const BlockQ5_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    const uint8_t* qs = w.qs + 32 * (sub / 2);
    for (int l = 0; l < 32; ++l)
      q[l] = (sub % 2 == 0 ? qs[l] & 0xF : qs[l] >> 4) | (((w.qh[l] >> sub) & 1) << 4);
    scale_min(w, sub, scale, min);
  }
  static void scale_min(const BlockQ5_K& w, int sub, float* scale, float* min) {
    int sc, m;
    q4_k_scale_min(sub, w.scales, sc, m);
    scale[0] = scale[1] = f16_to_f32(w.d) * static_cast<float>(sc);
    min[0] = min[1] = -(f16_to_f32(w.dmin) * static_cast<float>(m));
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  // scalar()'s quants as 32 bytes (tile::quant_tile's AVX2 path takes this instead).
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockQ5_K& w = reinterpret_cast<const BlockQ5_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * (sub / 2)));
    const __m256i lo =
        _mm256_and_si256(sub % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
    // bit `sub` of qh[l] to bit 4 of byte l
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh));
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << sub));
    const __m256i hi =
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(16));
    scale_min(w, sub, scale, min);
    return _mm256_or_si256(lo, hi);
  }
#endif
#if defined(__AVX512F__)
  static constexpr int k_sub = 8;
  struct Prep {
    alignas(32) float scale[8], min[8];  // d * sc[j], -(dmin * m[j])
  };
  // The 6-bit scales and minimums of q4_k_scale_min, four sub-blocks per 32-bit word:
  // sc 0..3 = low 6 bits of bytes 0..3, m 0..3 of bytes 4..7; sc 4..7 = low nibbles of bytes 8..11
  // with bits 6, 7 of bytes 0..3 above them; m 4..7 = high nibbles of 8..11 with bits 6, 7 of 4..7.
  static void prepare(const uint8_t* row, int64_t sb, Prep& p) {
    const BlockQ5_K& w = reinterpret_cast<const BlockQ5_K*>(row)[sb];
    uint32_t s[3];
    std::memcpy(s, w.scales, 12);
    const uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, top2 = 0x03030303;
    const __m128i sc =
        _mm_setr_epi32(static_cast<int>(s[0] & low6),
                       static_cast<int>((s[2] & low4) | (((s[0] >> 6) & top2) << 4)), 0, 0);
    const __m128i m =
        _mm_setr_epi32(static_cast<int>(s[1] & low6),
                       static_cast<int>(((s[2] >> 4) & low4) | (((s[1] >> 6) & top2) << 4)), 0, 0);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(w.d)), dmin = _mm256_set1_ps(-_cvtsh_ss(w.dmin));
    _mm256_store_ps(p.scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
    _mm256_store_ps(p.min, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m))));
  }
  static Block32 decode(const uint8_t* row, int64_t b, const Prep& p) {
    const BlockQ5_K& w = reinterpret_cast<const BlockQ5_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    const uint8_t* qs = w.qs + 32 * (sub / 2);
    __m512i e0 = _mm512_cvtepu8_epi32(load16(qs)), e1 = _mm512_cvtepu8_epi32(load16(qs + 16));
    if (sub % 2) {
      e0 = _mm512_srli_epi32(e0, 4), e1 = _mm512_srli_epi32(e1, 4);
    } else {
      const __m512i m15 = _mm512_set1_epi32(15);
      e0 = _mm512_and_si512(e0, m15), e1 = _mm512_and_si512(e1, m15);
    }
    // fifth bits: bit `sub` of qh[l] for l = 0..15 and 16..31
    const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << sub));
    const __mmask16 h0 = _mm_test_epi8_mask(load16(w.qh), bit),
                    h1 = _mm_test_epi8_mask(load16(w.qh + 16), bit);
    const __m512i k16 = _mm512_set1_epi32(16);
    e0 = _mm512_mask_or_epi32(e0, h0, e0, k16);
    e1 = _mm512_mask_or_epi32(e1, h1, e1, k16);
    const __m512 s = tile::bcast(p.scale + sub), mn = tile::bcast(p.min + sub);
    const __m512 t0 = _mm512_fmadd_ps(iota16(), s, mn);
    const __m512 t1 = _mm512_fmadd_ps(_mm512_add_ps(iota16(), _mm512_set1_ps(16.0f)), s, mn);
    return {_mm512_permutex2var_ps(t0, e0, t1), _mm512_permutex2var_ps(t0, e1, t1)};
  }
#endif
};

#if defined(__AVX512F__)
// ---- Q5_K on activations laid out as Q4_K's (matmul_kquant.cpp, kquant_prepare_row) -------------
//
// Q5_K's qs are Q4_K's, byte for byte, so the Q4_K kernel's trick applies: 64 bytes of qs as 16
// dwords, shifted right by 4k, give in lane i the nibble of element
//   e = 64 (i / 8) + 32 (k % 2) + 4 (i % 8) + k / 2        of the 128-value chunk c,
// whose fifth bit is bit j = 4c + 2 (i / 8) + k % 2 of qh[l], l = 4 (i % 8) + k / 2. qh's 32 bytes
// are loaded into both halves of a register (lane i: bytes 4 (i % 8) .. + 3) and shifted right by
// 2 (i / 8) + 4c, which leaves that bit at 8 (k / 2) + k % 2; one more shift puts it at bit 4, and
// vpternlogd takes bits 0..3 from the nibble and the rest from it, a 5-bit index into the 32-entry
// table 0..31 (vpermt2ps ignores the higher bits). Products are summed per sub-block and scaled
// afterwards, minimums subtracted with the sub-block sums of the activations, as for Q4_K:
//
//   acc = f_0 x_0; acc = fma(f_2, x_2, acc) ... f_6      tot = fma(acc, scales_even, tot)   (and
//   odd k) tot -= dmin m_j * sum(x of sub-block j)   once per super-block
//
// The same sequence for every output element whatever the tile shape: batch invariant.

// Lanes 0..7: d * sc_j, lanes 8..15: dmin * m_j.
inline __m512 q5k_scales(const BlockQ5_K& b) {
  uint32_t s[3];
  std::memcpy(s, b.scales, 12);
  const uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, top2 = 0x03030303;
  const __m128i v = _mm_setr_epi32(
      static_cast<int>(s[0] & low6), static_cast<int>((s[2] & low4) | (((s[0] >> 6) & top2) << 4)),
      static_cast<int>(s[1] & low6),
      static_cast<int>(((s[2] >> 4) & low4) | (((s[1] >> 6) & top2) << 4)));
  const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d)), dmin = _mm256_set1_ps(_cvtsh_ss(b.dmin));
  return _mm512_mul_ps(q, _mm512_insertf32x8(_mm512_castps256_ps512(d), dmin, 1));
}

struct Q5KLayout {
  static constexpr int k_chunks = 4,
                       k_per_chunk = 4;  // chunk 2c + t: k = t, t + 2, t + 4, t + 6 of run c
  static constexpr bool k_min = true;
  struct Consts {
    __m512 t0 = iota16(), t1 = _mm512_add_ps(iota16(), _mm512_set1_ps(16.0f));
    __m512i m15 = _mm512_set1_epi32(15);
    // Scales of chunk 2c + t: lanes 0..7 sub-block 4c + t, lanes 8..15 4c + 2 + t.
    __m512i sel[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                      _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
                      _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
                      _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7)};
    __m512i upper[2] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                        _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6)};
  };
  struct Row {
    __m512 sm;   // q5k_scales
    __m512i qh;  // qh's 32 bytes in both halves
  };
  struct Quants {
    __m512i v, h;
  };
  static void load(const uint8_t* w, int64_t sb, Row& r) {
    const BlockQ5_K& b = reinterpret_cast<const BlockQ5_K*>(w)[sb];
    r.sm = q5k_scales(b);
    r.qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)));
  }
  static constexpr int k_of(int c, int j) { return 2 * j + c % 2; }
  static constexpr int x_at(int c, int k) { return (c / 2) * 128 + 16 * k; }
  static Quants quants(const Consts& k, const uint8_t* w, int64_t sb, const Row& r, int c) {
    const BlockQ5_K& b = reinterpret_cast<const BlockQ5_K*>(w)[sb];
    // fifth bit of (i, k) at bit 8 (k / 2) + k % 2
    return {_mm512_loadu_si512(b.qs + 64 * (c / 2)), _mm512_srlv_epi32(r.qh, k.upper[c / 2])};
  }
  static __m512 weights(const Consts& k, const Quants& q, int, int kk) {
    const int at = 8 * (kk / 2) + kk % 2;  // where the fifth bit is; it goes to bit 4
    const __m512i nib = kk == 0 ? q.v : _mm512_srli_epi32(q.v, 4 * kk);
    const __m512i hb = tile::move_bit(q.h, at, 4);
    const __m512i idx = _mm512_ternarylogic_epi32(nib, hb, k.m15, 0xE4);  // m15 ? nib : hb, bitwise
    return _mm512_permutex2var_ps(k.t0, idx, k.t1);
  }
  static __m512 scale(const Consts& k, const Row& r, int c) {
    return _mm512_permutexvar_ps(k.sel[c], r.sm);
  }
  // Per super-block: 8 zeros, then the 8 sub-block sums (kquant_prepare_row).
  static __m512 min_term(const Row& r, const float* sums, __m512 tot) {
    return _mm512_mask3_fnmadd_ps(r.sm, _mm512_loadu_ps(sums), tot, 0xFF00);
  }
};
#endif

}  // namespace

F32Tile f32_tile_q5(DType type, int rows) {
  switch (type) {
    case DType::Q5_0:
      return tile::tile_for_rows<Q5_0>(rows);
    case DType::Q5_1:
      return tile::tile_for_rows<Q5_1>(rows);
#if defined(__AVX512F__)
    case DType::Q5_K:
      return kblock::shapes<Q5KLayout>(
          rows);  // activations as kquant_prepare_row(Q4_K) lays them out
#else
    case DType::Q5_K:
      return tile::tile_for_rows<Q5_K>(rows);
#endif
    default:
      OSSA_ASSERT(false);
  }
  return {};
}

}  // namespace ossa
