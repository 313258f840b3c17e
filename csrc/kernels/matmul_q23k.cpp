// f32 tile kernels for Q2_K and Q3_K weights (layouts in kernels/quant.h; the tile loop and its
// batch-invariance contract in kernels/matmul_tile.h).
//
// Both have a scale (Q2_K also a minimum) per 16 values, like Q6_K: block b of the tile loop (32
// values, b % 8 = 4h + s in its super-block) is two scale groups, one per 16-lane half. The 2-bit
// field is (qs[32h + l] >> 2s) & 3; Q3_K's third bit (bit 4h + s of hmask[l]) becomes a lane mask
// (vptestmb) that adds 4 to the index. Each half looks its weights up in a table of its group,
// table[k] = fma(k, scale, min) (Q3_K: (k - 4) * scale), exactly the dequantized value of quant k.
#include <cstring>

#include "kernels/matmul_kblock.h"
#include "kernels/matmul_tile.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

#if defined(__AVX512F__)
using tile::Block32;
using tile::iota16;
using tile::load16;

// The 2-bit fields at `shift` of 32 bytes, as 32-bit lanes (elements 0..15, 16..31).
inline void crumbs(const uint8_t* qs, int shift, __m512i& e0, __m512i& e1) {
  const __m128i sh = _mm_cvtsi32_si128(shift);
  const __m512i m3 = _mm512_set1_epi32(3);
  e0 = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(qs)), sh), m3);
  e1 = _mm512_and_si512(_mm512_srl_epi32(_mm512_cvtepu8_epi32(load16(qs + 16)), sh), m3);
}
#endif

struct Q2_K {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ2_K& w = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    for (int l = 0; l < 32; ++l) q[l] = (w.qs[32 * h + l] >> (2 * s)) & 3;
    scale_min(w, sub, scale, min);
  }
  static void scale_min(const BlockQ2_K& w, int sub, float* scale, float* min) {
    for (int k = 0; k < 2; ++k) {
      const int g = 2 * sub + k;
      scale[k] = f16_to_f32(w.d) * static_cast<float>(w.scales[g] & 0xF);
      min[k] = -(f16_to_f32(w.dmin) * static_cast<float>(w.scales[g] >> 4));
    }
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  // scalar()'s quants as 32 bytes (tile::quant_tile's AVX2 path takes this instead).
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockQ2_K& w = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * h));
    scale_min(w, sub, scale, min);
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
  }
#endif
#if defined(__AVX512F__)
  static constexpr int k_sub = 8;
  struct Prep {
    alignas(64) float scale[16], min[16];  // d * (scales[g] & 15), -(dmin * (scales[g] >> 4))
  };
  static void prepare(const uint8_t* row, int64_t sb, Prep& p) {
    const BlockQ2_K& w = reinterpret_cast<const BlockQ2_K*>(row)[sb];
    const __m512i e = _mm512_cvtepu8_epi32(load16(w.scales));
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_and_si512(e, _mm512_set1_epi32(15)));
    const __m512 m = _mm512_cvtepi32_ps(_mm512_srli_epi32(e, 4));
    _mm512_store_ps(p.scale, _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(w.d)), sc));
    _mm512_store_ps(p.min, _mm512_mul_ps(_mm512_set1_ps(-_cvtsh_ss(w.dmin)), m));
  }
  static Block32 decode(const uint8_t* row, int64_t b, const Prep& p) {
    const BlockQ2_K& w = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    __m512i e0, e1;
    crumbs(w.qs + 32 * h, 2 * s, e0, e1);
    const __m512 t0 =
        _mm512_fmadd_ps(iota16(), tile::bcast(p.scale + 2 * sub), tile::bcast(p.min + 2 * sub));
    const __m512 t1 = _mm512_fmadd_ps(iota16(), tile::bcast(p.scale + 2 * sub + 1),
                                      tile::bcast(p.min + 2 * sub + 1));
    return {_mm512_permutexvar_ps(e0, t0), _mm512_permutexvar_ps(e1, t1)};
  }
#endif
};

struct Q3_K {
  static void scalar(const uint8_t* row, int64_t b, int* q, float* scale, float* min) {
    const BlockQ3_K& w = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    for (int l = 0; l < 32; ++l)
      q[l] = ((w.qs[32 * h + l] >> (2 * s)) & 3) - (((w.hmask[l] >> sub) & 1) ? 0 : 4);
    scale_min(w, sub, scale, min);
  }
  static void scale_min(const BlockQ3_K& w, int sub, float* scale, float* min) {
    const float d = f16_to_f32(w.d);
    scale[0] = d * static_cast<float>(q3_k_scale(w.scales, 2 * sub));
    scale[1] = d * static_cast<float>(q3_k_scale(w.scales, 2 * sub + 1));
    min[0] = min[1] = 0.0f;
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  // scalar()'s quants as 32 signed bytes (tile::quant_tile's AVX2 path takes this instead).
  static __m256i quants8(const uint8_t* row, int64_t b, float* scale, float* min) {
    const BlockQ3_K& w = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * h));
    const __m256i lo =
        _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.hmask));
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << sub));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
    scale_min(w, sub, scale, min);
    return _mm256_sub_epi8(lo, _mm256_andnot_si256(set, _mm256_set1_epi8(4)));
  }
#endif
#if defined(__AVX512F__)
  static constexpr int k_sub = 8;
  struct Prep {
    alignas(64) float scale[16];  // d * sc[g]
  };
  // The 16 six-bit scales as bytes in group order (what q3_k_scale reads one at a time): low
  // nibbles of scales[0..8) then their high nibbles; bits 4, 5 of group g = 4q + b from byte b of
  // the word scales[8..12) shifted right by 2q.
  static void prepare(const uint8_t* row, int64_t sb, Prep& p) {
    const BlockQ3_K& w = reinterpret_cast<const BlockQ3_K*>(row)[sb];
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales));
    const __m128i low =
        _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    uint32_t h;
    std::memcpy(&h, w.scales + 8, 4);
    const __m128i hs =
        _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(h)), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i high = _mm_slli_epi16(_mm_and_si128(hs, _mm_set1_epi8(3)), 4);
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32));
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(w.d));
    _mm512_store_ps(p.scale, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc))));
  }
  static Block32 decode(const uint8_t* row, int64_t b, const Prep& p) {
    const BlockQ3_K& w = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), h = sub / 4, s = sub % 4;
    __m512i e0, e1;
    crumbs(w.qs + 32 * h, 2 * s, e0, e1);
    // third bit: bit 4h + s (= sub) of hmask[l]
    const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << sub));
    const __m512i k4 = _mm512_set1_epi32(4);
    e0 = _mm512_mask_or_epi32(e0, _mm_test_epi8_mask(load16(w.hmask), bit), e0, k4);
    e1 = _mm512_mask_or_epi32(e1, _mm_test_epi8_mask(load16(w.hmask + 16), bit), e1, k4);
    const __m512 level = _mm512_sub_ps(iota16(), _mm512_set1_ps(4.0f));  // index k: k - 4
    const __m512 t0 = _mm512_mul_ps(level, tile::bcast(p.scale + 2 * sub));
    const __m512 t1 = _mm512_mul_ps(level, tile::bcast(p.scale + 2 * sub + 1));
    return {_mm512_permutexvar_ps(e0, t0), _mm512_permutexvar_ps(e1, t1)};
  }
#endif
};

#if defined(__AVX512F__)
// ---- Q2_K / Q3_K on activations laid out to match their bytes (q23k_prepare_row)
// -----------------
//
// As the Q4_K kernel does (matmul_kquant.cpp), but with 2-bit fields: the 64 bytes of qs are loaded
// as 16 dwords, and shifting right by 2k leaves in the low bits of lane i the field of value
//   e = 128 (i / 8) + 32 (k % 4) + 4 (i % 8) + k / 4          (group g = e / 16 = 8 (i / 8) + 2 (k
//   % 4) + (i % 8) / 4)
// vpermps reads 4 bits, the field and the next one, so its table repeats every 4 entries (Q2_K:
// 0 1 2 3 ...). For Q3_K, vpternlogd puts the third bit (bit 4h + s of hmask[l], taken from hmask's
// 32 bytes in both register halves, shifted right by 4 (i / 8) and then to bit 2) above the field,
// and the table repeats every 8 entries: k - 4 for k < 4, else k - 4 + ... i.e. q3 = field - 4 + 4
// bit. The four k with the same k % 4 share each lane's group, so their products are summed and
// then scaled: acc = f x; acc = fma(f, x, acc) (x3); tot = fma(acc, scales of k % 4, tot). Q2_K's
// minimums multiply the 16 group sums of the activations, kept after the permuted row: tot -= dmin
// m * sum.
constexpr int q23k_elem(int k, int i) { return 128 * (i / 8) + 32 * (k % 4) + 4 * (i % 8) + k / 4; }

template <bool kQ3>
struct Q23KLayout {
  static constexpr int k_chunks = 4, k_per_chunk = 4;  // chunk s: k = s, s + 4, s + 8, s + 12
  static constexpr bool k_min = !kQ3;                  // Q2_K's minimums
  struct Consts {
    __m512 table = kQ3 ? _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3)
                       : _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    __m512i m3 = _mm512_set1_epi32(3);
    __m512i sel[4];  // group of lane i for k % 4 = s: 8 (i / 8) + 2 s + (i % 8) / 4
    Consts() {
      for (int s = 0; s < 4; ++s)
        sel[s] = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 8, 8, 8, 8, 9, 9, 9, 9),
                                  _mm512_set1_epi32(2 * s));
    }
  };
  struct Quants {
    __m512i v, hm;  // qs as 16 dwords; Q3_K: hmask in both halves, shifted right by 4 (i / 8)
  };
  struct Row {
    __m512 sc, mn;  // the 16 group scales; Q2_K: -(dmin m)
    Quants q;
  };
  static void load(const uint8_t* w, int64_t sb, Row& r) {
    if constexpr (kQ3) {
      const BlockQ3_K& b = reinterpret_cast<const BlockQ3_K*>(w)[sb];
      Q3_K::Prep p;
      Q3_K::prepare(w, sb, p);
      r.sc = _mm512_load_ps(p.scale);
      r.q.v = _mm512_loadu_si512(b.qs);
      const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
      const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
      r.q.hm = _mm512_srlv_epi32(_mm512_broadcast_i64x4(hmask), upper);
    } else {
      Q2_K::Prep p;
      Q2_K::prepare(w, sb, p);
      r.sc = _mm512_load_ps(p.scale);
      r.mn = _mm512_load_ps(p.min);
      r.q.v = _mm512_loadu_si512(reinterpret_cast<const BlockQ2_K*>(w)[sb].qs);
    }
  }
  static constexpr int k_of(int s, int j) { return 4 * j + s; }
  static constexpr int x_at(int, int k) { return 16 * k; }
  static Quants quants(const Consts&, const uint8_t*, int64_t, const Row& r, int) { return r.q; }
  static __m512 weights(const Consts& k, const Quants& q, int, int kk) {
    __m512i idx = kk == 0 ? q.v : _mm512_srli_epi32(q.v, 2 * kk);
    if constexpr (kQ3) {
      const int at = 8 * (kk / 4) + kk % 4;  // where lane i's third bit is in hm; it goes to bit 2
      const __m512i hb = tile::move_bit(q.hm, at, 2);
      idx = _mm512_ternarylogic_epi32(idx, hb, k.m3, 0xE4);  // m3 ? idx : hb, bitwise
    }
    return _mm512_permutexvar_ps(idx, k.table);
  }
  static __m512 scale(const Consts& k, const Row& r, int s) {
    return _mm512_permutexvar_ps(k.sel[s], r.sc);
  }
  // The 16 group sums of the activations (q23k_prepare_row).
  static __m512 min_term(const Row& r, const float* sums, __m512 tot) {
    return _mm512_fmadd_ps(r.mn, _mm512_loadu_ps(sums), tot);
  }
};
#endif

}  // namespace

#if defined(__AVX512F__)
void q23k_prepare_row(const float* x, int64_t cols, float* out) {
  kblock::reorder_row<256, q23k_elem>(x, cols, out);
  float* sums = out + cols;
  for (int64_t g = 0; g < cols / 16; ++g) {
    float s = 0.0f;
    for (int i = 0; i < 16; ++i) s += x[16 * g + i];
    sums[g] = s;
  }
}
#else
void q23k_prepare_row(const float*, int64_t, float*) {}
#endif

F32Tile f32_tile_q23k(DType type, int rows) {
  switch (type) {
#if defined(__AVX512F__)  // activations laid out by q23k_prepare_row
    case DType::Q2_K:
      return kblock::shapes<Q23KLayout<false>>(rows);
    case DType::Q3_K:
      return kblock::shapes<Q23KLayout<true>>(rows);
#else
    case DType::Q2_K:
      return tile::tile_for_rows<Q2_K>(rows);
    case DType::Q3_K:
      return tile::tile_for_rows<Q3_K>(rows);
#endif
    default:
      OSSA_ASSERT(false);
  }
  return {};
}

}  // namespace ossa
