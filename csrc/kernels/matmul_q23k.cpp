// f32 tile kernels for Q2_K and Q3_K weights (layouts in kernels/quant.h; the tile loop and its
// batch-invariance contract in kernels/matmul_tile.h).
//
// Both have a scale (Q2_K also a minimum) per 16 values, like Q6_K: block b of the tile loop (32
// values, b % 8 = 4h + s in its super-block) is two scale groups, one per 16-lane half. The 2-bit
// field is (qs[32h + l] >> 2s) & 3; Q3_K's third bit (bit 4h + s of hmask[l]) becomes a lane mask
// (vptestmb) that adds 4 to the index. Each half looks its weights up in a table of its group,
// table[k] = fma(k, scale, min) (Q3_K: (k - 4) * scale), exactly the dequantized value of quant k.
#include <cstring>

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
    for (int k = 0; k < 2; ++k) {
      const int g = 2 * sub + k;
      scale[k] = f16_to_f32(w.d) * static_cast<float>(w.scales[g] & 0xF);
      min[k] = -(f16_to_f32(w.dmin) * static_cast<float>(w.scales[g] >> 4));
    }
  }
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
    const __m512 t0 = _mm512_fmadd_ps(iota16(), tile::bcast(p.scale + 2 * sub), tile::bcast(p.min + 2 * sub));
    const __m512 t1 = _mm512_fmadd_ps(iota16(), tile::bcast(p.scale + 2 * sub + 1), tile::bcast(p.min + 2 * sub + 1));
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
    const float d = f16_to_f32(w.d);
    scale[0] = d * static_cast<float>(q3_k_scale(w.scales, 2 * sub));
    scale[1] = d * static_cast<float>(q3_k_scale(w.scales, 2 * sub + 1));
    min[0] = min[1] = 0.0f;
  }
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
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    uint32_t h;
    std::memcpy(&h, w.scales + 8, 4);
    const __m128i hs = _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(h)), _mm_setr_epi32(0, 2, 4, 6));
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
// ---- Q2_K / Q3_K on activations laid out to match their bytes (q23k_prepare_row) -----------------
//
// As the Q4_K kernel does (matmul_kquant.cpp), but with 2-bit fields: the 64 bytes of qs are loaded
// as 16 dwords, and shifting right by 2k leaves in the low bits of lane i the field of value
//   e = 128 (i / 8) + 32 (k % 4) + 4 (i % 8) + k / 4          (group g = e / 16 = 8 (i / 8) + 2 (k % 4) + (i % 8) / 4)
// vpermps reads 4 bits, the field and the next one, so its table repeats every 4 entries (Q2_K:
// 0 1 2 3 ...). For Q3_K, vpternlogd puts the third bit (bit 4h + s of hmask[l], taken from hmask's
// 32 bytes in both register halves, shifted right by 4 (i / 8) and then to bit 2) above the field,
// and the table repeats every 8 entries: k - 4 for k < 4, else k - 4 + ... i.e. q3 = field - 4 + 4 bit.
// The four k with the same k % 4 share each lane's group, so their products are summed and then
// scaled: acc = f x; acc = fma(f, x, acc) (x3); tot = fma(acc, scales of k % 4, tot). Q2_K's minimums
// multiply the 16 group sums of the activations, kept after the permuted row: tot -= dmin m * sum.
constexpr int q23k_elem(int k, int i) { return 128 * (i / 8) + 32 * (k % 4) + 4 * (i % 8) + k / 4; }

template <bool kQ3, int MO, int R>
void q23k_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  const int64_t nsb = cols / 256;
  const float* xs[R];  // per super-block: the 16 group sums (q23k_prepare_row)
  for (int r = 0; r < R; ++r) xs[r] = x[r] + cols;
  const __m512 table = kQ3 ? _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3)
                           : _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
  const __m512i m3 = _mm512_set1_epi32(3);
  const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
  // group of lane i for k % 4 = s: 8 (i / 8) + 2 s + (i % 8) / 4
  __m512i sel[4];
  for (int s = 0; s < 4; ++s)
    sel[s] = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 8, 8, 8, 8, 9, 9, 9, 9),
                              _mm512_set1_epi32(2 * s));
  __m512 tot[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) tot[o][r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 sc[MO], mn[MO];
    __m512i v[MO], hm[MO];
    for (int o = 0; o < MO; ++o) {
      if constexpr (kQ3) {
        const BlockQ3_K& b = reinterpret_cast<const BlockQ3_K*>(w[o])[sb];
        Q3_K::Prep p;
        Q3_K::prepare(w[o], sb, p);
        sc[o] = _mm512_load_ps(p.scale);
        v[o] = _mm512_loadu_si512(b.qs);
        const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
        hm[o] = _mm512_srlv_epi32(_mm512_broadcast_i64x4(hmask), upper);
      } else {
        Q2_K::Prep p;
        Q2_K::prepare(w[o], sb, p);
        sc[o] = _mm512_load_ps(p.scale);
        mn[o] = _mm512_load_ps(p.min);  // -(dmin m)
        v[o] = _mm512_loadu_si512(reinterpret_cast<const BlockQ2_K*>(w[o])[sb].qs);
      }
    }
    const int64_t xo = sb * 256;
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      __m512 acc[MO][R];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * j + s;
        __m512 xk[R];
        for (int r = 0; r < R; ++r) xk[r] = _mm512_loadu_ps(x[r] + xo + 16 * k);
        for (int o = 0; o < MO; ++o) {
          __m512i idx = k == 0 ? v[o] : _mm512_srli_epi32(v[o], 2 * k);
          if constexpr (kQ3) {
            const int at = 8 * j + s;  // where lane i's third bit is in hm; it goes to bit 2
            const __m512i hb = tile::move_bit(hm[o], at, 2);
            idx = _mm512_ternarylogic_epi32(idx, hb, m3, 0xE4);  // m3 ? idx : hb, bitwise
          }
          const __m512 f = _mm512_permutexvar_ps(idx, table);
          for (int r = 0; r < R; ++r)
            acc[o][r] = j == 0 ? _mm512_mul_ps(f, xk[r]) : _mm512_fmadd_ps(f, xk[r], acc[o][r]);
        }
      }
      for (int o = 0; o < MO; ++o) {
        const __m512 scale = _mm512_permutexvar_ps(sel[s], sc[o]);
        for (int r = 0; r < R; ++r) tot[o][r] = _mm512_fmadd_ps(acc[o][r], scale, tot[o][r]);
      }
    }
    if constexpr (!kQ3)
      for (int o = 0; o < MO; ++o)
        for (int r = 0; r < R; ++r) tot[o][r] = _mm512_fmadd_ps(mn[o], _mm512_loadu_ps(xs[r] + 16 * sb), tot[o][r]);
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = tile::fsum16(tot[o][r]);
}

template <bool kQ3>
F32Tile q23k_tile_for_rows(int rows) {
  switch (rows) {
    case 1: return {q23k_tile<kQ3, 8, 1>, 8};
    case 2: return {q23k_tile<kQ3, 4, 2>, 4};
    case 3: return {q23k_tile<kQ3, 2, 3>, 2};
    case 4: return {q23k_tile<kQ3, 2, 4>, 2};
    case 5: return {q23k_tile<kQ3, 1, 5>, 1};
    case 6: return {q23k_tile<kQ3, 1, 6>, 1};
    case 7: return {q23k_tile<kQ3, 1, 7>, 1};
    default: return {q23k_tile<kQ3, 1, 8>, 1};
  }
}
#endif

}  // namespace

#if defined(__AVX512F__)
void q23k_prepare_row(const float* x, int64_t cols, float* out) {
  static constexpr auto perm = [] {
    struct P {
      int e[256];
    } p{};
    for (int k = 0; k < 16; ++k)
      for (int i = 0; i < 16; ++i) p.e[16 * k + i] = q23k_elem(k, i);
    return p;
  }();
  for (int64_t c = 0; c < cols; c += 256)
    for (int j = 0; j < 256; ++j) out[c + j] = x[c + perm.e[j]];
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
    case DType::Q2_K: return q23k_tile_for_rows<false>(rows);
    case DType::Q3_K: return q23k_tile_for_rows<true>(rows);
#else
    case DType::Q2_K: return tile::tile_for_rows<Q2_K>(rows);
    case DType::Q3_K: return tile::tile_for_rows<Q3_K>(rows);
#endif
    default: OSSA_ASSERT(false);
  }
  return {};
}

}  // namespace ossa
