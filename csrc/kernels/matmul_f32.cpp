// Tile kernels with f32 activations, for every weight type (see matmul_kernels.h for the contract).
//
// Quantized weights are decoded block by block in registers and widened to f32, one 32-element
// block as two 16-lane halves, each weight exactly fma(float(q), scale, min); then multiplied into
// the f32 activations with FMA. One accumulator per output element, updated in column order:
//
//   for block b:  acc = fma(w[b][0..15], x[32b .. 32b+15], acc)
//                 acc = fma(w[b][16..31], x[32b+16 .. 32b+31], acc)
//   y = horizontal_sum(acc)
//
// A tile shares each decoded block between its activation rows and runs `mo` weight rows side by
// side, so the FMA chains overlap (decode, one activation row, is latency-bound otherwise) without
// changing any element's order of operations.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul_kernels.h"
#include "kernels/matmul_tile.h"
#include "util/error.h"
#include "util/half.h"

namespace ossa {
namespace {

constexpr bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// MO weight rows x R activation rows of type T, defined per instruction set below.
template <DType T, int MO, int R>
void float_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out);
template <DType T, int MO, int R>
void quant_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out);

template <DType T, int MO, int R>
constexpr F32TileFn tile_fn() {
  if constexpr (is_float(T))
    return float_tile<T, MO, R>;
  else
    return quant_tile<T, MO, R>;
}

#if defined(__AVX512F__)

using tile::Block32;
using tile::fsum16;
using tile::iota16;
using tile::load16;

// Block scales in registers, never through the stack: a scale stored and broadcast back from memory
// (a load rather than a port-5 broadcast) made GCC 12 keep every tile accumulator in memory too,
// one store per accumulator per block (Q4_0 at 64 rows 15.3 -> 10.4 ms once gone). One f16 scale:
// vcvtsh2ss and a broadcast; Q4_1's adjacent d and m: one conversion for both, two permutes.
inline __m512 scale_f32(const uint16_t* p) { return _mm512_set1_ps(_cvtsh_ss(*p)); }
struct F32Pair {
  __m512 first, second;
};
inline F32Pair scales_f32(const uint16_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m512 v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
  return {_mm512_permutexvar_ps(_mm512_setzero_si512(), v),
          _mm512_permutexvar_ps(_mm512_set1_epi32(1), v)};
}

// 4-bit quants become f32 through a 16-entry table, table[k] = fma(k, scale, min), indexed by the
// nibbles with vpermps (which reads only the low 4 bits of each index): the same value as widening
// the nibble and applying the FMA, for half the instructions.
inline Block32 nibbles_via_table(__m512i lo_idx, __m512i hi_idx, __m512 table) {
  return {_mm512_permutexvar_ps(lo_idx, table), _mm512_permutexvar_ps(hi_idx, table)};
}

// A 32-element block as f32 (matmul_tile.h's decoder contract; nothing shared between blocks).
template <DType T>
struct Decoder : tile::NoPrep {
  static Block32 decode(const uint8_t* row, int64_t b, const Prep&);
};

template <DType T>
Block32 Decoder<T>::decode(const uint8_t* row, int64_t b, const Prep&) {
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    // Q4_0 and Q4_1: element j is the low nibble of qs[j], element j + 16 the high nibble.
    __m512 table;
    const uint8_t* qs;
    if constexpr (T == DType::Q4_0) {
      const BlockQ4_0& w = reinterpret_cast<const BlockQ4_0*>(row)[b];
      const __m512 base = _mm512_sub_ps(iota16(), _mm512_set1_ps(8.0f));  // q - 8, exact
      table = _mm512_fmadd_ps(base, scale_f32(&w.d), _mm512_setzero_ps());
      qs = w.qs;
    } else {
      // d and m are adjacent: one conversion for both.
      const BlockQ4_1& w = reinterpret_cast<const BlockQ4_1*>(row)[b];
      const F32Pair dm = scales_f32(&w.d);
      table = _mm512_fmadd_ps(iota16(), dm.first, dm.second);
      qs = w.qs;
    }
    const __m512i e = _mm512_cvtepu8_epi32(load16(qs));
    return nibbles_via_table(e, _mm512_srli_epi32(e, 4), table);
  } else if constexpr (T == DType::Q8_0) {
    const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(row)[b];
    const __m512 d = scale_f32(&w.d), zero = _mm512_setzero_ps();
    const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(w.qs)));
    const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(w.qs + 16)));
    return {_mm512_fmadd_ps(q0, d, zero), _mm512_fmadd_ps(q1, d, zero)};
  } else {
    static_assert(T == DType::Q8_0, "Q4_K and Q6_K: matmul_kquant.cpp");
  }
}

// matmul_tile.h's loop (Q5_0 / Q5_1 / IQ4_NL run it too) over these blocks, inlined here.
template <DType T, int MO, int R>
[[gnu::flatten]] void quant_tile(const uint8_t* const* w, const float* const* x, int64_t cols,
                                 float* out) {
  tile::quant_tile<Decoder<T>, MO, R>(w, x, cols, out);
}

// Float weights: 16 lanes, the last group masked. The full groups take plain loads: GCC 12 treats
// a masked load as an opaque access that may read the accumulator array, and so stored every
// accumulator to the stack at each step (16 stores per 16 FMAs in the 2 x 8 tile).
template <DType T, bool Full>
inline __m512 float_load(const uint8_t* row, int64_t i, __mmask16 m) {
  if constexpr (T == DType::F32) {
    const float* p = reinterpret_cast<const float*>(row) + i;
    return Full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
  }
  const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + i;
  const __m256i h = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                         : _mm256_maskz_loadu_epi16(m, p);
  if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// One 16-column step of a float tile: the weight rows converted first, then each activation row's
// 16 values loaded once for all of them (written as one loop over o and r, GCC 12 loaded each
// activation vector once per weight row: 40 against 55 GMAC/s for F16 15680 x 4480 at 128 rows).
template <DType T, int MO, int R, bool Full>
inline void float_step(const uint8_t* const* w, const float* const* x, int64_t i, __mmask16 m,
                       __m512 (&acc)[MO][R]) {
  __m512 wv[MO];
  for (int o = 0; o < MO; ++o) wv[o] = float_load<T, Full>(w[o], i, m);
  for (int r = 0; r < R; ++r) {
    const __m512 xv = Full ? _mm512_loadu_ps(x[r] + i) : _mm512_maskz_loadu_ps(m, x[r] + i);
    for (int o = 0; o < MO; ++o) acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
  }
}

// Columns [k0, k1) (k0 a multiple of 16; a last group short of 16 masked): each accumulator is one
// FMA chain over the columns in order, whatever the chunking.
template <DType T, int MO, int R>
inline void float_steps(const uint8_t* const* w, const float* const* x, int64_t k0, int64_t k1,
                        int64_t cols, __m512 (&acc)[MO][R]) {
  const int64_t full = std::min(k1, cols - cols % 16);
  int64_t i = k0;
  for (; i < full; i += 16) float_step<T, MO, R, true>(w, x, i, 0, acc);
  if (i < k1)
    float_step<T, MO, R, false>(w, x, i, static_cast<__mmask16>((1u << (cols - i)) - 1), acc);
}

template <DType T, int MO, int R>
void float_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  __m512 acc[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = _mm512_setzero_ps();
  float_steps<T, MO, R>(w, x, 0, cols, cols, acc);
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = fsum16(acc[o][r]);
}

// float_tile over the columns [k0, k1) only, its accumulators in acc between calls (F32ChunkFn).
template <DType T, int MO, int R>
void float_chunk(const uint8_t* const* w, const float* const* x, int64_t k0, int64_t k1,
                 int64_t cols, float* acc_mem, float* out) {
  __m512 acc[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = _mm512_load_ps(acc_mem + (o * R + r) * 16);
  float_steps<T, MO, R>(w, x, k0, k1, cols, acc);
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r)
      if (out != nullptr)
        out[o * R + r] = fsum16(acc[o][r]);
      else
        _mm512_store_ps(acc_mem + (o * R + r) * 16, acc[o][r]);
}

template <DType T, int MO, int R>
constexpr F32ChunkFn chunk_fn() {
  if constexpr (is_float(T))
    return float_chunk<T, MO, R>;
  else
    return nullptr;
}

constexpr int k_max_rows = 8;

// Tile shapes: one activation row (decode) runs 4 weight rows for 4 independent FMA chains; more
// rows run 2 weight rows, up to 16 accumulators in zmm registers. Q4_K and Q6_K: matmul_kquant.cpp.
template <DType T>
F32Tile tile_for_rows(int rows) {
  if constexpr (T == DType::Q4_K || T == DType::Q6_K) {
    return kquant_tile(T, rows);
  } else {
    switch (rows) {
      case 1:
        return {tile_fn<T, 4, 1>(), 4};
      case 2:
        return {tile_fn<T, 4, 2>(), 4, nullptr, chunk_fn<T, 4, 2>()};
      case 3:
        return {tile_fn<T, 4, 3>(), 4, nullptr, chunk_fn<T, 4, 3>()};
      case 4:
        return {tile_fn<T, 4, 4>(), 4, nullptr, chunk_fn<T, 4, 4>()};
      case 5:
        return {tile_fn<T, 4, 5>(), 4, nullptr, chunk_fn<T, 4, 5>()};
      case 6:
        return {tile_fn<T, 2, 6>(), 2, nullptr, chunk_fn<T, 2, 6>()};
      case 7:
        return {tile_fn<T, 2, 7>(), 2, nullptr, chunk_fn<T, 2, 7>()};
      default:
        return {tile_fn<T, 2, 8>(), 2, nullptr, chunk_fn<T, 2, 8>()};
    }
  }
}

#elif defined(__AVX2__)

// AVX2 (the portable build): 8 lanes, one weight row per call, up to 4 activation rows.
inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256 fload(const float* p, int n) {
  return n == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
}

template <DType T>
inline __m256 float_load(const uint8_t* row, int64_t i, int n) {
  if constexpr (T == DType::F32) {
    return fload(reinterpret_cast<const float*>(row) + i, n);
  } else {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + i;
    alignas(16) uint16_t tmp[8] = {};
    for (int j = 0; j < n; ++j) tmp[j] = p[j];
    const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    if constexpr (T == DType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType T, int MO, int R>
void float_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  static_assert(MO == 1);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols; i += 8) {
    const int n = static_cast<int>(cols - i < 8 ? cols - i : 8);
    const __m256 wv = float_load<T>(w[0], i, n);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, fload(x[r] + i, n), acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

// A 32-element block as 32 quants (s8 or u8), a scale per 16 elements and a minimum.
struct QBlock {
  __m256i q;
  float scale[2];
  float min;
};

// f16 -> f32 (exact, as f16_to_f32), one instruction where the CPU has F16C.
inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

template <DType T>
inline QBlock decode_block(const uint8_t* row, int64_t b) {
  QBlock o{};
  if constexpr (T == DType::Q4_0) {
    const BlockQ4_0& w = reinterpret_cast<const BlockQ4_0*>(row)[b];
    o.q = _mm256_sub_epi8(unpack_nibbles(w.qs), _mm256_set1_epi8(8));
    o.scale[0] = o.scale[1] = half_to_float(w.d);
  } else if constexpr (T == DType::Q4_1) {
    const BlockQ4_1& w = reinterpret_cast<const BlockQ4_1*>(row)[b];
    o.q = unpack_nibbles(w.qs);
    o.scale[0] = o.scale[1] = half_to_float(w.d);
    o.min = half_to_float(w.m);
  } else if constexpr (T == DType::Q8_0) {
    const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(row)[b];
    o.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
    o.scale[0] = o.scale[1] = half_to_float(w.d);
  } else if constexpr (T == DType::Q4_K) {
    const BlockQ4_K& w = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * (sub / 2)));
    o.q = _mm256_and_si256(sub % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
    int sc, m;
    q4_k_scale_min(sub, w.scales, sc, m);
    o.scale[0] = o.scale[1] = half_to_float(w.d) * static_cast<float>(sc);
    o.min = -(half_to_float(w.dmin) * static_cast<float>(m));
  } else {
    const BlockQ6_K& w = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
    const int sub = static_cast<int>(b % 8), half = sub / 4, k = sub % 4;
    const __m256i l =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * half + 32 * (k % 2)));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh + 32 * half));
    const __m256i lo =
        _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F));
    // bits 2k, 2k+1 of qh move to bits 4, 5
    const __m256i hs = k == 0   ? _mm256_slli_epi16(h, 4)
                       : k == 1 ? _mm256_slli_epi16(h, 2)
                       : k == 2 ? h
                                : _mm256_srli_epi16(h, 2);
    const __m256i hi = _mm256_and_si256(hs, _mm256_set1_epi8(0x30));
    o.q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
    const float d = half_to_float(w.d);
    const int8_t* sc = w.scales + 8 * half + 2 * k;
    o.scale[0] = d * static_cast<float>(sc[0]);
    o.scale[1] = d * static_cast<float>(sc[1]);
  }
  return o;
}

// Lanes [8c, 8c + 8) of 32 quants as f32.
template <bool kSigned>
inline __m256 quants_to_f32(__m256i q, int c) {
  __m128i part = c < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
  if (c % 2) part = _mm_srli_si128(part, 8);
  return _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(part) : _mm256_cvtepu8_epi32(part));
}

// Weights [8c, 8c + 8) of a block: fma(q, scale, min), exactly.
template <DType T>
inline __m256 block_weights(const QBlock& blk, int c) {
  constexpr bool k_signed = T == DType::Q4_0 || T == DType::Q8_0 || T == DType::Q6_K;
  return _mm256_fmadd_ps(quants_to_f32<k_signed>(blk.q, c), _mm256_set1_ps(blk.scale[c / 2]),
                         _mm256_set1_ps(blk.min));
}

// MO weight rows x R activation rows; each element's chain is the same for every MO and R (MO > 1
// only gives the one-row decode independent chains to overlap).
template <DType T, int MO, int R>
void quant_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  __m256 acc[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < cols / 32; ++b) {
    for (int o = 0; o < MO; ++o) {
      const QBlock blk = decode_block<T>(w[o], b);
      for (int c = 0; c < 4; ++c) {
        const __m256 wv = block_weights<T>(blk, c);
        for (int r = 0; r < R; ++r)
          acc[o][r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r] + b * 32 + c * 8), acc[o][r]);
      }
    }
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[o * R + r] = hsum8(acc[o][r]);
}

// quant_tile's weights, stored: the same wv vectors, 8 at a time.
template <DType T>
void decode_row(const uint8_t* w, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const QBlock blk = decode_block<T>(w, b);
    for (int c = 0; c < 4; ++c) _mm256_storeu_ps(out + 32 * b + 8 * c, block_weights<T>(blk, c));
  }
}

// MO decoded weight rows x R activation rows: each element's chain as float_tile's.
template <int MO, int R>
void decoded_tile(const float* w, int64_t ldw, const float* const* x, int64_t cols, float* out,
                  int64_t ldo) {
  __m256 acc[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols; i += 8) {
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x[r] + i);
    for (int o = 0; o < MO; ++o) {
      const __m256 wv = _mm256_loadu_ps(w + o * ldw + i);
      for (int r = 0; r < R; ++r) acc[o][r] = _mm256_fmadd_ps(wv, xv[r], acc[o][r]);
    }
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[r * ldo + o] = hsum8(acc[o][r]);
}

using DecodedTileFn = void (*)(const float*, int64_t, const float* const*, int64_t, float*,
                               int64_t);
constexpr int k_dec_mo = 4, k_dec_rows = 3;
template <int MO>
constexpr DecodedTileFn k_decoded_row_fns[k_dec_rows] = {decoded_tile<MO, 1>, decoded_tile<MO, 2>,
                                                         decoded_tile<MO, 3>};
constexpr const DecodedTileFn* k_decoded_fns[k_dec_mo] = {
    k_decoded_row_fns<1>, k_decoded_row_fns<2>, k_decoded_row_fns<3>, k_decoded_row_fns<4>};

constexpr int k_max_rows = 4;

template <DType T>
F32Tile tile_for_rows(int rows) {
  constexpr bool k_float = is_float(T);
  F32DecodeFn dec = nullptr;
  if constexpr (!k_float) dec = decode_row<T>;
  // One row (decode) of a quantized type: 4 weight rows a call, 4 independent FMA chains.
  constexpr int k_one_row_mo = k_float ? 1 : 4;
  switch (rows) {
    case 1:
      return {tile_fn<T, k_one_row_mo, 1>(), k_one_row_mo, dec};
    case 2:
      return {tile_fn<T, 1, 2>(), 1, dec};
    case 3:
      return {tile_fn<T, 1, 3>(), 1, dec};
    default:
      return {tile_fn<T, 1, 4>(), 1, dec};
  }
}

}  // namespace

void f32_decoded_rows(const float* w, int64_t ldw, int mo, const float* const* x, int rows,
                      int64_t cols, float* out, int64_t ldo) {
  for (int o = 0; o < mo; o += k_dec_mo) {
    const int m = std::min(k_dec_mo, mo - o);
    for (int r = 0; r < rows; r += k_dec_rows) {
      const int n = std::min(k_dec_rows, rows - r);
      k_decoded_fns[m - 1][n - 1](w + o * ldw, ldw, x + r, cols, out + r * ldo + o, ldo);
    }
  }
}

namespace {

#else  // scalar: one weight row and one activation row at a time

template <DType T, int MO, int R>
void quant_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    int q[32];
    float scale[8], wmin;
    decode_block_scalar(T, w[0], b, q, scale, wmin);
    for (int i = 0; i < 32; ++i)
      acc = std::fma(std::fma(static_cast<float>(q[i]), scale[i / 4], wmin), x[0][b * 32 + i], acc);
  }
  out[0] = acc;
}

template <DType T, int MO, int R>
void float_tile(const uint8_t* const* w, const float* const* x, int64_t cols, float* out) {
  float acc = 0.0f;
  const uint16_t* h = reinterpret_cast<const uint16_t*>(w[0]);
  for (int64_t i = 0; i < cols; ++i) {
    float wv;
    if constexpr (T == DType::F32)
      wv = reinterpret_cast<const float*>(w[0])[i];
    else if constexpr (T == DType::F16)
      wv = f16_to_f32(h[i]);
    else
      wv = bf16_to_f32(h[i]);
    acc = std::fma(wv, x[0][i], acc);
  }
  out[0] = acc;
}

constexpr int k_max_rows = 1;

template <DType T>
F32Tile tile_for_rows(int) {
  return {tile_fn<T, 1, 1>(), 1};
}

#endif

}  // namespace

#if defined(__AVX512F__)
namespace {
// AVX-512: the decoded weights of the types whose tiles set F32Tile::decode (the i-quants below 4
// bits, matmul_iq23.cpp) times MO x R activation rows, in matmul_tile.h's quant_tile order: per
// output element one 16-lane accumulator, 16 columns at a time in column order (quant_tile's two
// halves of each 32-value block are two such steps), one fsum16: bitwise the tile's result.
template <int MO, int R>
void decoded_tile16(const float* w, int64_t ldw, const float* const* x, int64_t cols, float* out,
                    int64_t ldo) {
  __m512 acc[MO][R];
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) acc[o][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < cols; i += 16) {
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x[r] + i);
    for (int o = 0; o < MO; ++o) {
      const __m512 wv = _mm512_loadu_ps(w + o * ldw + i);
      for (int r = 0; r < R; ++r) acc[o][r] = _mm512_fmadd_ps(wv, xv[r], acc[o][r]);
    }
  }
  for (int o = 0; o < MO; ++o)
    for (int r = 0; r < R; ++r) out[r * ldo + o] = tile::fsum16(acc[o][r]);
}
using Decoded16Fn = void (*)(const float*, int64_t, const float* const*, int64_t, float*, int64_t);
constexpr int k_dec16_mo = 4, k_dec16_rows = 6;  // 24 accumulators, 6 rows and a weight vector
template <int MO>
constexpr Decoded16Fn k_dec16_row_fns[k_dec16_rows] = {
    decoded_tile16<MO, 1>, decoded_tile16<MO, 2>, decoded_tile16<MO, 3>,
    decoded_tile16<MO, 4>, decoded_tile16<MO, 5>, decoded_tile16<MO, 6>};
constexpr const Decoded16Fn* k_dec16_fns[k_dec16_mo] = {k_dec16_row_fns<1>, k_dec16_row_fns<2>,
                                                        k_dec16_row_fns<3>, k_dec16_row_fns<4>};
}  // namespace

void f32_decoded_rows(const float* w, int64_t ldw, int mo, const float* const* x, int rows,
                      int64_t cols, float* out, int64_t ldo) {
  OSSA_ASSERT(cols % 16 == 0);
  for (int o = 0; o < mo; o += k_dec16_mo) {
    const int m = std::min(k_dec16_mo, mo - o);
    for (int r = 0; r < rows; r += k_dec16_rows) {
      const int n = std::min(k_dec16_rows, rows - r);
      k_dec16_fns[m - 1][n - 1](w + o * ldw, ldw, x + r, cols, out + r * ldo + o, ldo);
    }
  }
}
#elif !defined(__AVX2__)
// The scalar build's tiles decode in registers (F32Tile::decode is null): never called.
void f32_decoded_rows(const float*, int64_t, int, const float* const*, int, int64_t, float*,
                      int64_t) {
  OSSA_ASSERT(false);
}
#endif

int f32_tile_max_rows() { return k_max_rows; }

F32Tile f32_tile(DType type, int rows) {
  OSSA_ASSERT(rows >= 1 && rows <= k_max_rows);
  switch (type) {
    case DType::F32:
      return tile_for_rows<DType::F32>(rows);
    case DType::F16:
      return tile_for_rows<DType::F16>(rows);
    case DType::BF16:
      return tile_for_rows<DType::BF16>(rows);
    case DType::Q4_0:
      return tile_for_rows<DType::Q4_0>(rows);
    case DType::Q4_1:
      return tile_for_rows<DType::Q4_1>(rows);
    case DType::Q8_0:
      return tile_for_rows<DType::Q8_0>(rows);
    case DType::Q4_K:
      return tile_for_rows<DType::Q4_K>(rows);
    case DType::Q6_K:
      return tile_for_rows<DType::Q6_K>(rows);
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q5_K:
      return f32_tile_q5(type, rows);
    case DType::Q2_K:
    case DType::Q3_K:
      return f32_tile_q23k(type, rows);
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4:
      return f32_tile_iq4(type, rows);
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
      return f32_tile_iq23(type, rows);
    case DType::FP8:
      return f32_tile_fp8(rows);
    case DType::BITNET:  // (matmul.cpp runs it through bitnet_rows)
      break;
  }
  return {};
}

}  // namespace ossa
