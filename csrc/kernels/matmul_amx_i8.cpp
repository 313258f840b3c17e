// Q4_K and Q6_K on AMX-INT8 (many activation rows) and AVX512-VNNI (a few rows, decode): exact
// integer dot products of the weights' quants with activations split into three int8 pieces.
// Without AMX, the same for every row count, and Q8_0 as well: with VNNI the VNNI loops take every
// row count, and Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS / MXFP4 too (vnni::Kind: the
// same pieces and epilogues; AMX machines keep those on matmul_amx.cpp / matmul_amx_ext.cpp's bf16
// tiles); with AVX2 only, every quantized type on AVX2 kernels (below: Q4_0 / Q4_1 / Q5_0 / Q5_1
// / Q5_K / Q2_K / Q3_K on VPMADDUBSW as Q4_K, Q8_0 / IQ4_NL / IQ4_XS and the exact Q4_0 / Q4_1 on
// VPMADDWD).
//
// Activations: each block of 32 values x of a row is written as d * (a0 + a1 / 2^7 + a2 / 2^11)
// with d = max|x| / 127 and int8 pieces (amx_i8_split_rows): y = x * (127 / max|x|), a0 = rint(y),
// a1 = rint(128 (y - a0)), a2 = rint(16 (128 (y - a0) - a1)); every step but the first product is
// exact, |a0| <= 127, |a1| <= 64, |a2| <= 8, and the representation is off by ~1 / (127 * 4096)
// (1.9e-6) of the block's largest value (the bf16 hi + lo split of matmul_amx.cpp keeps 2^-17 of
// each value). Twin: reference.model.split_int8.
//
// Q4_K: a sub-block of 32 weights of one row is s * q + mn with q in 0..15, s = d * sc and
// mn = -dmin * m (f32). Per sub-block b, activation row r and weight row n, the pieces' dot
// products with q are int32 sums, exact whatever their order:
//
//   D = 2^11 (q . a0) + 16 (q . a1) + (q . a2)         (|D| < 2^27: no overflow)
//   acc = fma(f32(D), s[n] * (2^-11 d[r][b]), acc);  acc = fma(sum(x[r][b]), mn[n], acc)
//
// sub-blocks in order, and y[r][n] = acc, where sum(x[r][b]) is the sum of the block's split
// values (split_sum: 2^-11 d[r][b] times the integer sum of 2^11 a0 + 16 a1 + a2), so every term
// multiplies the split activations (the twin: split_int8(x) @ w.T). Q6_K: per 16 weights w = s * q
// with q = u - 32 and s = d * sc; D as above over the 16 values with the unsigned u, then acc =
// fma(f32(D - 32 S), s[n] * (2^-11 d[r][b]), acc), S the row's sum of 2^11 a0 + 16 a1 + a2 over
// those 16 values (so D - 32 S is the signed quants' dot product, no minimum term).
//
// The tile products (TDPBSUD, 16 rows at a time; Q4_K: q . a0 with K = 32, and [16 q, q] . [a1, a2]
// with K = 64, which is 16 (q . a1) + (q . a2); Q6_K: one K = 16 product per piece) and the VNNI
// loop (VPDPBUSD, a few rows at a time) compute the same integers and then the same f32 operations
// per element, with the weight rows in the vector lanes in both, so they give bitwise the same
// output: a decode row and the same row inside a prefill batch agree (batch invariance), and the
// matmul may choose either kernel by row count.
//
// Repacked layouts (amx_i8_repack_groups), per group of 16 weight rows (group-major), per
// super-block of 256 columns, at about the file's size (decode streams them: bytes are time).
// Q4_K, 2,368 bytes (the file's 2,304 and 64 of unpacked scales): per 32-column block b the quants
// as TDPBSUD's B tile wants them (rows of 4 consecutive k for 16 n), two tile rows per byte: byte
// [r][4 n + i] = q[n][4 r + i] | q[n][16 + 4 r + i] << 4 (r < 4, 256 bytes); then the 6-bit sc and
// m of the 8 blocks as bytes [b][n], and the f16 d and dmin of the 16 rows; the kernels form
// s = d * sc and dmin * m (f32 products, the same in both). Q6_K, 3,392 bytes (the file's 3,360 and
// 32 of padding): per block the low nibbles of u likewise and their high 2 bits (384 bytes), then
// the int8 scales [b][h][n] and the f16 d of the rows. Rows past the matrix are zero.
//
// Q8_0, on builds without AMX only (an AMX machine keeps Q8_0 on matmul_amx.cpp's bf16 tiles):
// w = d * q per 32 values, q any int8 (-128 included). With VNNI, the quants are stored as
// u = q + 128 and multiplied with the three int8 pieces as Q6_K's u are: D = (u's D) - 128 S
// (vnni_group_q8_0, layout at repack_q8_0). On AVX2: the same pieces, held as int16 (a0, and a12 =
// 16 a1 + a2 with |a12| <= 1032; i8_avx2_split_rows16) multiply the sign-extended quants by
// VPMADDWD into int32 pair sums, which cannot overflow, so D = 2^11 (q . a0) + (q . a12) is exact
// as above (|D| <= 32 * 128 * (2^11 * 127 + 1032) < 2^31) and acc = fma(f32(D), d[n] * (2^-11
// d[r][b]), acc), blocks in order. (VPMADDUBSW's unsigned x signed bytes would need the quants'
// signs moved onto the broadcast pieces lane by lane and int16 sums widened after each step: more
// instructions than VPMADDWD's 2 pieces.) Layout per group of 16 rows and block of 32 columns, 544
// bytes (the file's 16 x 34): byte [h][p][n][i] = q[8 h + n][2 p + i] (h < 2, p < 16, n < 8, i <
// 2), so one 16-byte load widened by VPMOVSXBW holds columns 2 p, 2 p + 1 of 8 rows, then the rows'
// f16 d.
//
// Q4_0 (w = d (u - 8)) and Q4_1 (w = d u + m), u in 0..15 per 32 values, on VNNI builds without
// AMX only (vnni::Kind Q40 / Q41): D of the nibbles as Q4_K's, then Q4_0: acc = fma(f32(D - 8 S),
// d[n] * (2^-11 d[r][b]), acc) with S the block's sum of 2^11 a0 + 16 a1 + a2 (both halves of
// i8_isum16); Q4_1: acc = fma(f32(D), d[n] * (2^-11 d[r][b]), acc), acc = fma(sum(x[r][b]),
// m[n], acc). (An AVX2-only build multiplies the exact pieces with the int16 kernel of IQ4_NL,
// avx2_group_iq4, and 8-bit activations with Q4_K's VPMADDUBSW kernel.) Layout per
// group of 16 rows and block: a Q4_K block of nibbles (the file's qs bytes already pair column j
// with 16 + j), then the f16 d (and m) of the rows: 288 (320) bytes, the file's 16 x 18 (16 x 20).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/amx_i8_pieces.h"
#include "kernels/amx_i8_rows.h"
#include "kernels/amx_tile_config.h"
#include "kernels/matmul_kernels.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512VNNI__) && \
    defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
// With matmul_amx.cpp's OSSA_HAVE_AMX (amx_available() asks the OS for both).
#define OSSA_HAVE_AMX_I8 1
#define OSSA_HAVE_I8_VNNI 1
#elif defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// VNNI without AMX (AMD Zen 4 and 5, Intel before Sapphire Rapids): the VNNI loop for Q4_K / Q6_K
// at every row count (the AMX builds' few-row kernel: the same integers, the same f32 epilogue)
// and for Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS and Q8_0 (i8_avx2_available; the
// AVX2 kernels below are compiled but not dispatched).
#define OSSA_HAVE_I8_VNNI 1
#define OSSA_HAVE_I8_AVX2 1
#elif defined(__AVX2__) && (defined(__FMA__) || defined(OSSA_FMA_EMULATED)) && defined(__F16C__)
// (OSSA_FMA_EMULATED: the perf gate's build, tools/perfgate/no_fma.h)
// No AMX / VNNI: the same integers from AVX2's VPMADDUBSW, the same f32 epilogue
// (i8_avx2_available).
#define OSSA_HAVE_I8_AVX2 1
#endif

namespace ossa {

namespace {
// Q4_K, per 16 rows and 256 columns (one super-block of each row): 8 blocks of 256 quant bytes,
// the 6-bit scales sc [j][n] and minimums m [j][n] (one byte each), then the rows' f16 d and dmin.
constexpr int64_t k4_sb_bytes = 2368;
constexpr int64_t k4_sc_at = 2048, k4_m_at = 2176, k4_d_at = 2304, k4_dmin_at = 2336;
// Q6_K, per 16 rows and 256 columns: 8 blocks of 384 bytes (the low nibbles as Q4_K's, then the
// high 2 bits: k6_high_at), the int8 scales of the 16-value sub-blocks [j][h][n] (16 per h), the
// rows' f16 d, and 32 bytes of padding (to a multiple of 64 bytes).
constexpr int64_t k6_block_bytes = 384, k6_high_at = 256;
constexpr int64_t k6_sb_bytes = 3392, k6_sc_at = 3072, k6_d_at = 3328, k6_pad_at = 3360;
// Bytes of one group of 16 weight rows (group g starts at g times this), of one block's quants
// and of one super-block (the scales follow the 8 blocks).
int64_t sb_bytes(DType t) { return t == DType::Q6_K ? k6_sb_bytes : k4_sb_bytes; }
// Q8_0 (AVX2 without VNNI), per 16 rows and 32-column block: the quants [h][p][n][i] (256 bytes per
// half h of 8 rows), then the rows' f16 d: the file's 16 x 34 bytes.
constexpr int64_t k8_block_bytes = 544, k8_d_at = 512;
// Q8_0 in VNNI builds (repack_q8_0): per group the blocks' 512 bytes of quants, then their d.
constexpr int64_t k8v_quant_bytes = 512;
// Q4_0 / Q4_1 (VNNI builds without AMX), per 16 rows and 32-column block: the nibbles as a Q4_K
// block's (256 bytes), the rows' f16 d, and Q4_1's f16 m: the file's 16 x 18 and 16 x 20 bytes.
constexpr int64_t k40_block_bytes = 288, k41_block_bytes = 320, k4x_d_at = 256, k41_m_at = 288;
// Q5_0 / Q5_1 / IQ4_NL (VNNI builds without AMX), per 16 rows and 32-column block: the nibbles as
// a Q4_K block's (256 bytes; IQ4_NL: the level indices, its layout is Q4_0's), Q5's fifth bits
// (64 bytes: k5_high_at), the rows' f16 d and Q5_1's f16 m: the file's 16 x 22 and 16 x 24 bytes.
constexpr int64_t k5_high_at = 256, k50_block_bytes = 352, k51_block_bytes = 384, k5x_d_at = 320,
                  k51_m_at = 352;
// Q5_K (VNNI builds without AMX), per 16 rows and 256 columns: 8 blocks of 320 bytes (Q4_K's
// nibbles, then the fifth bits as Q5_0's), then Q4_K's scales, minimums, d and dmin: 2,880 bytes
// (the file's 2,816 and 64 of unpacked scales).
// MXFP4 (VNNI builds without AMX), per 16 rows and 32-column block: the nibbles as Q4_0's (256
// bytes: E2M1 level indices), then the rows' E8M0 exponent bytes: the file's 16 x 17 bytes.
constexpr int64_t kmx_block_bytes = 272, kmx_e_at = 256;
constexpr int64_t k5k_block_bytes = 320, k5k_sb_bytes = 2880, k5k_sc_at = 2560, k5k_m_at = 2688,
                  k5k_d_at = 2816, k5k_dmin_at = 2848;
// IQ4_XS (VNNI builds without AMX), per 16 rows and 256 columns: 8 blocks of 256 bytes of level
// indices (Q4_K's nibbles), the scales ls - 32 as int8 [j][n], the rows' f16 d, and 32 bytes of
// padding: 2,240 bytes (the file's 2,176).
constexpr int64_t kxs_sb_bytes = 2240, kxs_sc_at = 2048, kxs_d_at = 2176, kxs_pad_at = 2208;
// Q2_K / Q3_K (AVX2 without VNNI; VNNI builds take them to matmul_amx_q23k.cpp), per 16 rows and
// 256 columns: 8 blocks of (128 bytes of the quants' low 2 bits, Q3_K's 64 bytes of third bits,
// the scale bytes [g][n] of the block's 2 groups: Q2_K the file's sc | m << 4, Q3_K sc as int8),
// then the rows' f16 d and (Q2_K) dmin: 1,344 bytes (the file's 16 x 84) and 1,824 (16 x 110 =
// 1,760, and 64 of unpacked scales). One block's bytes are contiguous: with the third bits and
// scales in regions of their own (matmul_amx_q23k.cpp's order), Q3_K streamed from DRAM at half
// its in-cache rate. Layout: repack_q23k_avx2.
template <bool Q3>
struct Q23kAvx2 {
  static constexpr int64_t hb_at = 128;               // in a block (Q3_K)
  static constexpr int64_t sc_at = Q3 ? 192 : 128;    // in a block
  static constexpr int64_t block_bytes = sc_at + 32;  // 224, 160
  static constexpr int64_t d_at = 8 * block_bytes, dmin_at = d_at + 32;
  static constexpr int64_t sb_bytes = d_at + (Q3 ? 32 : 64);
};
// Types with a block of 32 columns (the rest have super-blocks of 256).
bool block32(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
         t == DType::Q5_1 || t == DType::IQ4_NL || t == DType::MXFP4;
}
int64_t block32_bytes(DType t) {
  switch (t) {
    case DType::Q8_0:
      return k8_block_bytes;
    case DType::Q4_1:
      return k41_block_bytes;
    case DType::Q5_0:
      return k50_block_bytes;
    case DType::Q5_1:
      return k51_block_bytes;
    case DType::MXFP4:
      return kmx_block_bytes;
    default:  // Q4_0, IQ4_NL
      return k40_block_bytes;
  }
}
int64_t group_bytes(DType t, int64_t cols) {
  if (block32(t)) return cols / 32 * block32_bytes(t);
  if (t == DType::Q5_K) return cols / 256 * k5k_sb_bytes;
  if (t == DType::IQ4_XS) return cols / 256 * kxs_sb_bytes;
  if (t == DType::Q2_K) return cols / 256 * Q23kAvx2<false>::sb_bytes;
  if (t == DType::Q3_K) return cols / 256 * Q23kAvx2<true>::sb_bytes;
  return cols / 256 * sb_bytes(t);
}
// The sum of a block's split values, which multiplies the minimums (Q4_K's dmin m, Q4_1's m):
// from its two halves' integer sums 2^11 a0 + 16 a1 + a2 (|S| < 2^24, exact in f32) times the
// block's scale d / 2^11, so every term of the product is of the split activations.
[[maybe_unused]] inline float split_sum(const int32_t* isum16, float scale) {
  return static_cast<float>(isum16[0] + isum16[1]) * scale;
}
}  // namespace

bool amx_i8_type(DType t) {
#if defined(OSSA_HAVE_I8_AVX2)
  // Without AMX (an AMX machine keeps Q8_0 on the bf16 tiles of matmul_amx.cpp), on VNNI or AVX2.
  if (t == DType::Q8_0) return true;
#endif
#if defined(OSSA_HAVE_I8_VNNI) && !defined(OSSA_HAVE_AMX_I8)
  // Without AMX, the VNNI loop (AMX machines keep these on matmul_amx.cpp / matmul_amx_ext.cpp's
  // bf16 tiles). Q4_0 / Q4_1 over the AVX-512 f32 kernels, one thread: 3.6x at one row, 2.0-2.5x
  // at 512 rows.
  // MXFP4 likewise: 2.5x its f32 tile kernel at one row (benchmarks/matmul_types.py).
  if (t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
      t == DType::IQ4_NL || t == DType::Q5_K || t == DType::IQ4_XS || t == DType::MXFP4)
    return true;
#elif defined(OSSA_HAVE_I8_AVX2) && !defined(OSSA_HAVE_I8_VNNI)
  // AVX2 without VNNI: Q5_0 / Q5_1 / Q5_K on the AVX2 kernels (decode 3-5x the f32 kernels, 512
  // rows 0.7x), IQ4_NL / IQ4_XS on Q8_0's int16 scheme (avx2_group_iq4: the levels + 128 would
  // overflow VPMADDUBSW's int16 pair sums), Q2_K / Q3_K with the 32-value pieces (avx2_group_q23k;
  // VNNI builds split per 64 values for them, matmul_amx_q23k.cpp), and Q4_0 / Q4_1 (the int16
  // kernel with the exact pieces, the VPMADDUBSW one with 8-bit activations: amx_i8_takes_i16).
  if (t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q5_K || t == DType::Q4_0 ||
      t == DType::Q4_1 || t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::Q2_K ||
      t == DType::Q3_K)
    return true;
#endif
  return t == DType::Q4_K || t == DType::Q6_K;
}

bool amx_i8_takes_i16(DType t, bool quantized_activations) {
#if defined(OSSA_HAVE_I8_AVX2) && !defined(OSSA_HAVE_I8_VNNI)
  // Q4_0 / Q4_1 with the exact three pieces: the int16 kernel (avx2_group_iq4's, their quants
  // looked up as IQ4's levels are), which decodes ~2.7x faster than the f32 kernels and prefills at
  // 0.88-0.9x of them, where the three-piece VPMADDUBSW kernel prefilled at 0.74x; with one piece
  // (8-bit activations) the VPMADDUBSW kernel (1.4x the int16 one at 64 rows).
  if (t == DType::Q4_0 || t == DType::Q4_1) return !quantized_activations;
  return t == DType::Q8_0 || t == DType::IQ4_NL || t == DType::IQ4_XS;
#else
  (void)t;
  (void)quantized_activations;
  return false;
#endif
}

bool i8_vnni_available() {
#if defined(OSSA_HAVE_I8_VNNI)
  return true;
#else
  return false;
#endif
}

bool i8_avx2_available() {
#if defined(OSSA_HAVE_I8_AVX2)
  return true;
#else
  return false;
#endif
}

size_t amx_i8_repacked_bytes(const TensorView& w) {
#if !defined(OSSA_HAVE_AMX_I8) && !defined(OSSA_HAVE_I8_AVX2)
  if (w.cols >= 0) return 0;  // Q4_K and Q6_K keep the f32 kernels
#endif
  if (!amx_i8_type(w.type) || w.cols % (block32(w.type) ? 32 : 256) != 0) return 0;
  return static_cast<size_t>((w.rows + 15) / 16 * group_bytes(w.type, w.cols));
}

#if defined(__AVX2__)  // (immintrin.h comes with matmul_kernels.h on AVX2 builds)
namespace {

inline void store4(uint8_t* at, __m128i v, int lane) {
  alignas(16) uint8_t t[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(t), v);
  std::memcpy(at, t + 4 * lane, 4);
}

// lo[t] | hi[t] << 4 for the 16 bytes of two 4-bit vectors, stored as the 4 dwords of row n of
// a block's B-tile nibbles (byte [r][4 n + i], r < 4).
inline void put_nibbles(uint8_t* blk, int n, __m128i lo, __m128i hi) {
  const __m128i c =
      _mm_or_si128(lo, _mm_slli_epi16(hi, 4));  // hi <= 15: no carry into the next byte
  for (int r = 0; r < 4; ++r) store4(blk + 64 * r + 4 * n, c, r);
}

// Q6_K: u = q + 32 in 0..63 (unsigned, as VPDPBUSD / TDPBSUD take the weights), s = d * sc per 16
// values. Byte [r][4 n + i] of the high part (r < 2) holds the high 2 bits of u[n][8 m + 4 r + i]
// at bit 2 m. In the file, the 32 values of 32-block j of a super-block are (ql nibble) | (qh 2
// bits)
// << 4 - 32, the nibble from ql + 64 (j / 4) + 32 (j % 2), low for j % 4 < 2, and the 2 bits at bit
// 2 (j % 4) of qh + 32 (j / 4).
void repack_q6k(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  const int64_t nb = w.cols / 32;
  const __m128i low4 = _mm_set1_epi8(0x0F), low2 = _mm_set1_epi8(0x03);
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * (nb / 8) * k6_sb_bytes;
    if (g * 16 + 16 > w.rows) std::memset(group, 0, static_cast<size_t>(nb / 8 * k6_sb_bytes));
    for (int64_t sb = 0; sb < nb / 8; ++sb)
      std::memset(group + sb * k6_sb_bytes + k6_pad_at, 0, k6_sb_bytes - k6_pad_at);
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const BlockQ6_K* row = reinterpret_cast<const BlockQ6_K*>(w.row(g * 16 + n));
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const BlockQ6_K& q = row[sb];
        for (int j = 0; j < 8; ++j) {
          uint8_t* sbp = group + sb * k6_sb_bytes;
          uint8_t* blk = sbp + j * k6_block_bytes;
          const int half = j / 4, k = j % 4;
          const uint8_t* ql = q.ql + 64 * half + (k % 2) * 32;
          const uint8_t* qh = q.qh + 32 * half;
          __m128i l0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql));
          __m128i l1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16));
          if (k >= 2) {
            l0 = _mm_srli_epi16(l0, 4);
            l1 = _mm_srli_epi16(l1, 4);
          }
          put_nibbles(blk, n, _mm_and_si128(l0, low4), _mm_and_si128(l1, low4));
          const __m128i sh = _mm_cvtsi32_si128(2 * k);
          const __m128i h0 = _mm_and_si128(
              _mm_srl_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh)), sh), low2);
          const __m128i h1 = _mm_and_si128(
              _mm_srl_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16)), sh), low2);
          // byte t (t < 8): bits of values t, 8 + t, 16 + t, 24 + t (each <= 3: no carries).
          const __m128i x = _mm_or_si128(h0, _mm_slli_epi16(_mm_srli_si128(h0, 8), 2));
          const __m128i y = _mm_or_si128(h1, _mm_slli_epi16(_mm_srli_si128(h1, 8), 2));
          const __m128i hh = _mm_or_si128(x, _mm_slli_epi16(y, 4));
          store4(blk + k6_high_at + 4 * n, hh, 0);
          store4(blk + k6_high_at + 64 + 4 * n, hh, 1);
          sbp[k6_sc_at + 32 * j + n] = static_cast<uint8_t>(q.scales[2 * j]);
          sbp[k6_sc_at + 32 * j + 16 + n] = static_cast<uint8_t>(q.scales[2 * j + 1]);
          if (j == 0) std::memcpy(sbp + k6_d_at + 2 * n, &q.d, 2);
        }
      }
    }
  }
}

#if defined(OSSA_HAVE_I8_VNNI)
// Q8_0 for the VNNI loop: u = q + 128 (q ^ 0x80: the unsigned bytes VPDPBUSD takes) in a Q4_K
// block's tile rows, byte [k][4 n + i] = u[n][4 k + i] (k < 8: 512 bytes a block), the group's
// blocks one after another, then the f16 d of the 16 rows per block (32 bytes each): the group is
// the file's 16 x 34 bytes, and its quant vectors are 64-byte aligned when its block count is even.
void repack_q8_0(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  const int64_t nb = w.cols / 32;
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * nb * k8_block_bytes;
    if (g * 16 + 16 > w.rows) std::memset(group, 0, static_cast<size_t>(nb * k8_block_bytes));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const BlockQ8_0* row = reinterpret_cast<const BlockQ8_0*>(w.row(g * 16 + n));
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = group + b * k8v_quant_bytes;
        for (int k = 0; k < 8; ++k)
          for (int i = 0; i < 4; ++i)
            blk[64 * k + 4 * n + i] = static_cast<uint8_t>(row[b].qs[4 * k + i]) ^ 0x80;
        std::memcpy(group + nb * k8v_quant_bytes + 32 * b + 2 * n, &row[b].d, 2);
      }
    }
  }
}
#else
// Q8_0: byte [h][p][n][i] of a block is q[8 h + n][2 p + i], so one 16-byte load widened by
// VPMOVSXBW holds columns 2 p, 2 p + 1 of 8 rows as int16 pairs; the f16 d of the 16 rows follow.
void repack_q8_0(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  const int64_t nb = w.cols / 32;
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * nb * k8_block_bytes;
    if (g * 16 + 16 > w.rows) std::memset(group, 0, static_cast<size_t>(nb * k8_block_bytes));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const BlockQ8_0* row = reinterpret_cast<const BlockQ8_0*>(w.row(g * 16 + n));
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = group + b * k8_block_bytes;
        uint8_t* q = blk + 256 * (n / 8) + 2 * (n % 8);
        for (int p = 0; p < 16; ++p) std::memcpy(q + 16 * p, row[b].qs + 2 * p, 2);
        std::memcpy(blk + k8_d_at + 2 * n, &row[b].d, 2);
      }
    }
  }
}
#endif

#if !defined(OSSA_HAVE_I8_VNNI)
// IQ4_NL / IQ4_XS for the AVX2 kernel (avx2_group_iq4), per 16 rows and 32-column block: the level
// indices as 256 bytes [h][m][l][j] (half h of 8 rows, chunk m < 4, 128-bit lane l < 2, byte j <
// 16), where byte j < 8 of lane l is the file's qs[2 m + j % 2] of row 8 h + 4 l + j / 2 and byte
// j >= 8 its qs[2 m + 8 + j % 2] (qs[c] holds column c in its low nibble, c + 16 in its high one).
// A chunk's 32 bytes, looked up and widened by VPUNPCKL/HBW, are then 4 vectors of 8 rows x 2
// columns as int16 pairs, Q8_0's VPMADDWD operands: columns 2 m + 8 t + (0, 1) for t < 4 (low
// nibbles: t = 0 unpacked low, 1 high; high nibbles: 2, 3).
void put_iq4_i16(const uint8_t* qs, uint8_t* blk, int n) {
  uint8_t* at = blk + 128 * (n / 8) + 16 * ((n % 8) / 4) + 2 * (n % 4);
  for (int m = 0; m < 4; ++m) {
    std::memcpy(at + 32 * m, qs + 2 * m, 2);
    std::memcpy(at + 32 * m + 8, qs + 2 * m + 8, 2);
  }
}
#endif

// The fifth bits h (bit l: column l of a 32-column block) of one row as its 4 bytes of a packed
// block's high part: bit k of byte i is column 16 (k / 4) + 4 (k % 4) + i, the column of byte
// [k % 4][4 n + i]'s low (k < 4) or high (k >= 4) nibble.
void put_high_bits(uint32_t h, uint8_t* high, int n) {
  for (int i = 0; i < 4; ++i) {
    uint8_t byte = 0;
    for (int k = 0; k < 8; ++k)
      byte |= static_cast<uint8_t>(((h >> (16 * (k / 4) + 4 * (k % 4) + i)) & 1) << k);
    high[4 * n + i] = byte;
  }
}

// Q4_K and Q5_K (Block: BlockQ4_K / BlockQ5_K, which share the d, dmin, scales and qs fields):
// straight from the file's blocks, the kernels form s = d * sc and dmin * m (q4k_scales); Q5_K's
// bit j of qh[l] is the fifth bit of column l of block j, stored after the block's nibbles.
template <class Block>
void repack_q45k(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  constexpr bool q5 = std::is_same_v<Block, BlockQ5_K>;
  constexpr int64_t sbb = q5 ? k5k_sb_bytes : k4_sb_bytes, blkb = q5 ? k5k_block_bytes : 256;
  constexpr int64_t sc_at = q5 ? k5k_sc_at : k4_sc_at, m_at = q5 ? k5k_m_at : k4_m_at;
  constexpr int64_t d_at = q5 ? k5k_d_at : k4_d_at, dmin_at = q5 ? k5k_dmin_at : k4_dmin_at;
  const int64_t nsb = w.cols / 256;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * nsb * sbb;
    if (g * 16 + 16 > w.rows) std::memset(group, 0, static_cast<size_t>(nsb * sbb));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const Block* row = reinterpret_cast<const Block*>(w.row(g * 16 + n));
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const Block& q = row[sb];
        uint8_t* sbp = group + sb * sbb;
        std::memcpy(sbp + d_at + 2 * n, &q.d, 2);
        std::memcpy(sbp + dmin_at + 2 * n, &q.dmin, 2);
        for (int j = 0; j < 8; ++j) {
          int sc, m;
          q4_k_scale_min(j, q.scales, sc, m);
          sbp[sc_at + 16 * j + n] = static_cast<uint8_t>(sc);
          sbp[m_at + 16 * j + n] = static_cast<uint8_t>(m);
          const uint8_t* src = q.qs + 32 * (j / 2);
          __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
          __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
          if (j % 2 == 1) {
            v0 = _mm_srli_epi16(v0, 4);
            v1 = _mm_srli_epi16(v1, 4);
          }
          uint8_t* blk = sbp + blkb * j;
          put_nibbles(blk, n, _mm_and_si128(v0, low4), _mm_and_si128(v1, low4));
          if constexpr (q5) {
            uint32_t h = 0;
            for (int l = 0; l < 32; ++l) h |= static_cast<uint32_t>((q.qh[l] >> j) & 1) << l;
            put_high_bits(h, blk + k5_high_at, n);
          }
        }
      }
    }
  }
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 / MXFP4 (Block: their file blocks; IQ4_NL's is Q4_0's, d then 16
// bytes of indices): the file's qs bytes are already the Q4_K block's (qs[j] holds columns j and
// 16 + j): byte [r][4 n + i] = qs[4 r + i] of row n; Q5's bit j of qh the fifth bit of column j
// (after the nibbles); then the rows' f16 d (and m), or MXFP4's exponent bytes e.
template <class Block>
void repack_block32(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end,
                    [[maybe_unused]] bool i16_order) {
  constexpr bool q5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool with_m = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool mx = std::is_same_v<Block, BlockMXFP4>;
  constexpr int64_t d_at = q5 ? k5x_d_at : k4x_d_at, m_at = q5 ? k51_m_at : k41_m_at;
  const int64_t nb = w.cols / 32, bb = block32_bytes(w.type);
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * nb * bb;
    if (g * 16 + 16 > w.rows) std::memset(group, 0, static_cast<size_t>(nb * bb));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const Block* row = reinterpret_cast<const Block*>(w.row(g * 16 + n));
      for (int64_t b = 0; b < nb; ++b) {
        const Block& q = row[b];
        uint8_t* blk = group + b * bb;
        if constexpr (mx)
          blk[kmx_e_at + n] = q.e;
        else
          std::memcpy(blk + d_at + 2 * n, &q.d, 2);
        if constexpr (with_m) std::memcpy(blk + m_at + 2 * n, &q.m, 2);
#if !defined(OSSA_HAVE_I8_VNNI)
        if (i16_order) {  // (AVX2: the int16 kernel's order, amx_i8_takes_i16)
          put_iq4_i16(q.qs, blk, n);
          continue;
        }
#endif
        for (int r = 0; r < 4; ++r) std::memcpy(blk + 64 * r + 4 * n, q.qs + 4 * r, 4);
        if constexpr (q5) {
          uint32_t h;
          std::memcpy(&h, q.qh, 4);
          put_high_bits(h, blk + k5_high_at, n);
        }
      }
    }
  }
}

// IQ4_XS: the level indices of block j (low nibbles of qs[16 j ..] columns 0..15, high ones 16..31:
// Q4_0's order), ls - 32 of each block, d.
void repack_iq4xs(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  const int64_t nsb = w.cols / 256;
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * nsb * kxs_sb_bytes;
    if (g * 16 + 16 > w.rows) std::memset(group, 0, static_cast<size_t>(nsb * kxs_sb_bytes));
    for (int64_t sb = 0; sb < nsb; ++sb)
      std::memset(group + sb * kxs_sb_bytes + kxs_pad_at, 0, kxs_sb_bytes - kxs_pad_at);
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      const BlockIQ4_XS* row = reinterpret_cast<const BlockIQ4_XS*>(w.row(g * 16 + n));
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const BlockIQ4_XS& q = row[sb];
        uint8_t* sbp = group + sb * kxs_sb_bytes;
        std::memcpy(sbp + kxs_d_at + 2 * n, &q.d, 2);
        for (int j = 0; j < 8; ++j) {
          const int ls =
              ((q.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((q.scales_h >> (2 * j)) & 3) << 4);
          sbp[kxs_sc_at + 16 * j + n] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
#if defined(OSSA_HAVE_I8_VNNI)
          for (int r = 0; r < 4; ++r)
            std::memcpy(sbp + 256 * j + 64 * r + 4 * n, q.qs + 16 * j + 4 * r, 4);
#else
          put_iq4_i16(q.qs + 16 * j, sbp + 256 * j, n);  // (AVX2: the int16 kernel's order)
#endif
        }
      }
    }
  }
}

#if !defined(OSSA_HAVE_I8_VNNI)
// Q2_K / Q3_K for the AVX2 kernel (avx2_group_q23k; Q23kAvx2). Value l of 32-column block j of a
// super-block is bits 2 (j % 4) of qs[32 (j / 4) + l] (Q3_K: u = that plus 4 where bit j of
// hmask[l] is set, so the quant is u - 4), in group 2 j + l / 16. Byte [r][4 n + i] (r < 2) of
// block j's 128 bytes holds, at bits 2 s, the low 2 bits of value 8 s + 4 r + i of row n, so
// (byte >> 2 s) & 3 over a half's 32 bytes at 64 r + 32 h is the vector of columns 4 k .. 4 k + 3,
// k = 2 s + r, of rows 8 h .. 8 h + 7 (Q4_K's wq[k]). Q3_K: byte [4 n + i] of block j's 64 bytes
// holds u's bit 2 of value 4 k + i at bit k.
template <bool Q3>
void repack_q23k_avx2(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end) {
  using L = Q23kAvx2<Q3>;
  const int64_t n_sb = w.cols / 256;
  for (int64_t g = g_begin; g < g_end; ++g) {
    uint8_t* group = out + g * n_sb * L::sb_bytes;
    std::memset(group, 0, static_cast<size_t>(n_sb * L::sb_bytes));
    for (int n = 0; n < 16 && g * 16 + n < w.rows; ++n) {
      for (int64_t sb = 0; sb < n_sb; ++sb) {
        uint8_t* at = group + sb * L::sb_bytes;
        const uint8_t* qs;
        const uint8_t* hmask = nullptr;
        if constexpr (Q3) {
          const auto& q = reinterpret_cast<const BlockQ3_K*>(w.row(g * 16 + n))[sb];
          qs = q.qs;
          hmask = q.hmask;
          std::memcpy(at + L::d_at + 2 * n, &q.d, 2);
          for (int gi = 0; gi < 16; ++gi)
            at[L::block_bytes * (gi / 2) + L::sc_at + 16 * (gi % 2) + n] =
                static_cast<uint8_t>(static_cast<int8_t>(q3_k_scale(q.scales, gi)));
        } else {
          const auto& q = reinterpret_cast<const BlockQ2_K*>(w.row(g * 16 + n))[sb];
          qs = q.qs;
          std::memcpy(at + L::d_at + 2 * n, &q.d, 2);
          std::memcpy(at + L::dmin_at + 2 * n, &q.dmin, 2);
          for (int gi = 0; gi < 16; ++gi)
            at[L::block_bytes * (gi / 2) + L::sc_at + 16 * (gi % 2) + n] = q.scales[gi];
        }
        for (int j = 0; j < 8; ++j) {
          uint8_t v[32];
          for (int l = 0; l < 32; ++l) {
            v[l] = (qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3;
            if (Q3 && ((hmask[l] >> j) & 1)) v[l] |= 4;
          }
          for (int r = 0; r < 2; ++r)
            for (int i = 0; i < 4; ++i) {
              uint8_t byte = 0;
              for (int sh = 0; sh < 4; ++sh)
                byte |= static_cast<uint8_t>((v[8 * sh + 4 * r + i] & 3) << (2 * sh));
              at[L::block_bytes * j + 64 * r + 4 * n + i] = byte;
            }
          if constexpr (Q3)
            for (int i = 0; i < 4; ++i) {
              uint8_t byte = 0;
              for (int k = 0; k < 8; ++k) byte |= static_cast<uint8_t>((v[4 * k + i] >> 2) << k);
              at[L::block_bytes * j + L::hb_at + 4 * n + i] = byte;
            }
        }
      }
    }
  }
}
#endif

}  // namespace

void amx_i8_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end,
                          bool quantized_activations) {
  OSSA_ASSERT(amx_i8_type(w.type));
  const bool i16 = amx_i8_takes_i16(w.type, quantized_activations);
  switch (w.type) {
#if !defined(OSSA_HAVE_I8_VNNI)
    case DType::Q2_K:
      return repack_q23k_avx2<false>(w, out, g_begin, g_end);
    case DType::Q3_K:
      return repack_q23k_avx2<true>(w, out, g_begin, g_end);
#endif
    case DType::Q8_0:
      return repack_q8_0(w, out, g_begin, g_end);
    case DType::Q4_0:
    case DType::IQ4_NL:  // (Q4_0's block: d, then the 16 bytes of indices)
      return repack_block32<BlockQ4_0>(w, out, g_begin, g_end, i16);
    case DType::Q4_1:
      return repack_block32<BlockQ4_1>(w, out, g_begin, g_end, i16);
    case DType::Q5_0:
      return repack_block32<BlockQ5_0>(w, out, g_begin, g_end, false);
    case DType::Q5_1:
      return repack_block32<BlockQ5_1>(w, out, g_begin, g_end, false);
    case DType::MXFP4:
      return repack_block32<BlockMXFP4>(w, out, g_begin, g_end, false);
    case DType::Q5_K:
      return repack_q45k<BlockQ5_K>(w, out, g_begin, g_end);
    case DType::IQ4_XS:
      return repack_iq4xs(w, out, g_begin, g_end);
    case DType::Q6_K:
      return repack_q6k(w, out, g_begin, g_end);
    default:
      return repack_q45k<BlockQ4_K>(w, out, g_begin, g_end);
  }
}
#else
void amx_i8_repack_groups(const TensorView&, uint8_t*, int64_t, int64_t, bool) {
  throw ModelError("amx int8 matmul: not built");
}
#endif

#if defined(OSSA_HAVE_I8_VNNI)
namespace {
namespace vnni {  // (its helpers share names with the AVX2 section's)

#if defined(OSSA_HAVE_AMX_I8)
// Tile 0: a0 (rows x 32 bytes); 1: [a1, a2] (rows x 64); 2: B of q (8 rows of 64 bytes: K = 32);
// 3: B of [16 q, q] (16 rows: K = 64); 4, 5: C (rows x 16 int32) of tiles 0 x 2 and 1 x 3.
void load_tile_config(int rows) {
  TileConfig c;
  const uint8_t r = static_cast<uint8_t>(rows);
  c.colsb[0] = 32;
  c.rows[0] = r;
  c.colsb[1] = 64;
  c.rows[1] = r;
  c.colsb[2] = 64;
  c.rows[2] = 8;
  c.colsb[3] = 64;
  c.rows[3] = 16;
  for (int t = 4; t < 6; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = r;
  }
  _tile_loadconfig(&c);
}
#endif

// acc = fma(f32(D), s * d, acc); acc = fnma(sum, dm, acc) for one activation row: the epilogue
// both kernels run, D = 2^11 c0 + c12 from the pieces' int32 sums (c0 = q . a0, c12 = 16 q . a1 +
// q . a2), dm = dmin * m.
inline __m512 epilogue(__m512i c0, __m512i c12, __m512 s, __m512 dm, float d, float sum,
                       __m512 acc) {
  const __m512i dd = _mm512_add_epi32(_mm512_slli_epi32(c0, 11), c12);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dd), _mm512_mul_ps(s, _mm512_set1_ps(d)), acc);
  return _mm512_fnmadd_ps(_mm512_set1_ps(sum), dm, acc);
}

// The super-block holding block b of a group, and block b's quants (Q4_K: 256 bytes, Q6_K: 384).
template <bool Q6>
inline const uint8_t* super_at(const uint8_t* group, int64_t b) {
  return group + (b >> 3) * (Q6 ? k6_sb_bytes : k4_sb_bytes);
}
template <bool Q6>
inline const uint8_t* block_at(const uint8_t* group, int64_t b) {
  return super_at<Q6>(group, b) + (Q6 ? k6_block_bytes : 256) * (b & 7);
}
// The 16 rows' f16 d (or dmin) of a super-block, and s = d * sc, dm = dmin * m of its block j.
inline __m512 q4k_d(const uint8_t* sbp, int64_t at) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sbp + at)));
}
inline __m512 q4k_times(const uint8_t* sbp, int64_t at, int64_t j, __m512 d) {
  const __m128i u = _mm_load_si128(reinterpret_cast<const __m128i*>(sbp + at + 16 * j));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u)));
}
// Prefetch for the stream of a group, into L2 (prefetch_l2): the bytes of block b + 24 (Q4_K: three
// super-blocks ahead, ~7 KB) or b + 16 (Q6_K, ~7 KB), with the scales after its super-block's last
// block. (1B Q4_K_M decode, T1: Q4_K 16 blocks ahead 46-51 tok/s, 24 ahead 46-56, 32-48 ahead no
// better; 8 ahead 32.)
template <bool Q6>
inline void prefetch_ahead(const uint8_t* group, int64_t b) {
  constexpr int block_lines = Q6 ? k6_block_bytes / 64 : 4;
  constexpr int tail_lines =
      Q6 ? (k6_sb_bytes - 8 * k6_block_bytes) / 64 : (k4_sb_bytes - 2048) / 64;
  constexpr int64_t ahead = Q6 ? 16 : 24;
  const char* p = reinterpret_cast<const char*>(block_at<Q6>(group, b + ahead));
  const int lines = ((b + ahead) & 7) == 7 ? block_lines + tail_lines : block_lines;
  for (int l = 0; l < lines; ++l) prefetch_l2(p + 64 * l);
}

// acc = fma(f32(D - oS), s * d, acc) for weights s (u - o): D - oS, with oS = o times the row's sum
// of 2^11 a0 + 16 a1 + a2 over the values, is the signed quants' dot product with the pieces.
inline __m512 epilogue_signed(__m512i c0, __m512i c12, __m512 s, float d, int32_t os, __m512 acc) {
  const __m512i dd =
      _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(c0, 11), c12), _mm512_set1_epi32(os));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dd), _mm512_mul_ps(s, _mm512_set1_ps(d)), acc);
}
// Q6_K: q = u - 32 per 16 values (S: the row's sum over those 16).
inline __m512 epilogue_q6k(__m512i c0, __m512i c12, __m512 s, float d, int32_t s32, __m512 acc) {
  return epilogue_signed(c0, c12, s, d, 32 * s32, acc);
}

// Q6_K: the 8 weight vectors of a packed block (wq[j]: u of k = 4 j .. 4 j + 3 for the 16 rows,
// exactly the rows of its two B tiles), and the scales s = d * sc of its sub-block h.
inline void q6k_unpack(const uint8_t* blk, __m512i* wq) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const __m512i h[2] = {_mm512_load_si512(blk + k6_high_at),
                        _mm512_load_si512(blk + k6_high_at + 64)};
  for (int j = 0; j < 8; ++j) {
    const __m512i v = _mm512_load_si512(blk + 64 * (j % 4));
    const __m512i lo =
        j < 4 ? _mm512_and_si512(v, low4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    const int m =
        j / 2;  // the high bits of k = 4 j + i sit at bit 2 m of h[j % 2]: move them to bits 4..5
    const __m512i hs = m == 2  ? h[j % 2]
                       : m < 2 ? _mm512_slli_epi16(h[j % 2], 4 - 2 * m)
                               : _mm512_srli_epi16(h[j % 2], 2);
    wq[j] = _mm512_ternarylogic_epi32(lo, hs, bits45, 0xF8);  // lo | (hs & 0x30)
  }
}
inline __m512 q6k_scales(const uint8_t* sbp, int64_t j, int h) {
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
      _mm_load_si128(reinterpret_cast<const __m128i*>(sbp + k6_sc_at + 32 * j + 16 * h))));
  return _mm512_mul_ps(
      sc, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sbp + k6_d_at))));
}

// The A tiles of 16-row block mb and sub-block b: a0 (16 rows x 32 bytes), then [a1, a2] (16 rows x
// 64).
inline const int8_t* a_tiles(const AmxActivations& x, int64_t nb, int64_t mb, int64_t b) {
  return x.i8 + (mb * nb + b) * 1536;
}

// ---- VNNI: a few activation rows at a time ---------------------------------------------------
// One loop for the types whose blocks of 32 columns unpack into 8 vectors of unsigned bytes u (one
// weight row per dword lane, 4 columns each: the B tile's rows), with a scale s per row and block
// and either a minimum dm per row and block or a constant offset o (the weight is s (u - o)):
//   Q4_K  u = nibble;                 s = d sc, dm = dmin m                (super-blocks of 256)
//   Q5_K  u = nibble | fifth bit << 4; s, dm as Q4_K's                     (super-blocks of 256)
//   IQ4_XS u = level[nibble] + 128;   s = d (ls - 32), o = 128             (super-blocks of 256)
//   Q5_0  u as Q5_K's;                s = d, o = 16
//   Q5_1  u as Q5_K's;                s = d, dm = -m
//   IQ4_NL u as IQ4_XS's;             s = d, o = 128
//   Q4_0  u = nibble;                 s = d, o = 8
//   Q4_1  u = nibble;                 s = d, dm = -m
//   MXFP4 u = 2 E2M1[nibble] + 128;   s = 2^(e - 128), o = 128
// and per activation row and block, with the pieces' int32 sums c0 = u . a0, c12 = 16 u . a1 +
// u . a2 (|D| < 2^31: 2^11 32 241 127 + 16 32 241 64 + 32 241 8 for the largest u):
//   D = 2^11 c0 + c12;  minimum: acc = fma(f32(D), s * dsc, acc); acc = fnma(sum, dm, acc)
//                       offset:  acc = fma(f32(D - o S), s * dsc, acc), S the block's sum of
//                                2^11 a0 + 16 a1 + a2 (so D - o S is the signed weights' product)
// Without AMX this loop takes every row count (one kernel: batch invariant); with AMX, Q4_K's
// few-row kernel (the tile kernel computes the same). Q6_K has its own loop (vnni_group_q6k).
enum class Kind { Q4K, Q5K, IQ4XS, Q50, Q51, IQ4NL, Q40, Q41, MXFP4 };
constexpr bool super_kind(Kind k) { return k == Kind::Q4K || k == Kind::Q5K || k == Kind::IQ4XS; }
constexpr bool high_kind(Kind k) { return k == Kind::Q5K || k == Kind::Q50 || k == Kind::Q51; }
constexpr bool iq4_kind(Kind k) { return k == Kind::IQ4XS || k == Kind::IQ4NL; }
constexpr bool min_kind(Kind k) {
  return k == Kind::Q4K || k == Kind::Q5K || k == Kind::Q51 || k == Kind::Q41;
}
constexpr int offset_of(Kind k) {
  return iq4_kind(k) || k == Kind::MXFP4 ? 128 : k == Kind::Q50 ? 16 : k == Kind::Q40 ? 8 : 0;
}
// Bytes of a block's quants (super-block kinds) or of a whole block (the others), and where the
// scales sit: in the super-block (sc, m as bytes [j][n]; d, dmin f16 [n]) or in the block (d, m).
struct KindLayout {
  int64_t block, super, sc, m, d, dmin;
};
constexpr KindLayout layout_of(Kind k) {
  switch (k) {
    case Kind::Q4K:
      return {256, k4_sb_bytes, k4_sc_at, k4_m_at, k4_d_at, k4_dmin_at};
    case Kind::Q5K:
      return {k5k_block_bytes, k5k_sb_bytes, k5k_sc_at, k5k_m_at, k5k_d_at, k5k_dmin_at};
    case Kind::IQ4XS:
      return {256, kxs_sb_bytes, kxs_sc_at, 0, kxs_d_at, 0};
    case Kind::Q50:
      return {k50_block_bytes, 0, 0, 0, k5x_d_at, 0};
    case Kind::Q51:
      return {k51_block_bytes, 0, 0, k51_m_at, k5x_d_at, 0};
    case Kind::IQ4NL:
    case Kind::Q40:
      return {k40_block_bytes, 0, 0, 0, k4x_d_at, 0};
    case Kind::Q41:
      return {k41_block_bytes, 0, 0, k41_m_at, k4x_d_at, 0};
    case Kind::MXFP4:
      return {kmx_block_bytes, 0, 0, 0, kmx_e_at, 0};
  }
  return {};
}
inline int vnni_kind(DType t) {  // the k_vnni_groups row of a type; -1: not this loop's
  switch (t) {
    case DType::Q4_K:
      return static_cast<int>(Kind::Q4K);
    case DType::Q5_K:
      return static_cast<int>(Kind::Q5K);
    case DType::IQ4_XS:
      return static_cast<int>(Kind::IQ4XS);
    case DType::Q5_0:
      return static_cast<int>(Kind::Q50);
    case DType::Q5_1:
      return static_cast<int>(Kind::Q51);
    case DType::IQ4_NL:
      return static_cast<int>(Kind::IQ4NL);
    case DType::Q4_0:
      return static_cast<int>(Kind::Q40);
    case DType::Q4_1:
      return static_cast<int>(Kind::Q41);
    case DType::MXFP4:
      return static_cast<int>(Kind::MXFP4);
    default:
      return -1;
  }
}

template <Kind K>
inline const uint8_t* kind_block(const uint8_t* group, int64_t b) {
  constexpr KindLayout L = layout_of(K);
  if constexpr (super_kind(K)) return group + (b >> 3) * L.super + L.block * (b & 7);
  return group + b * L.block;
}
// Prefetch for the stream of a group, into L2: block b + 16's bytes (two super-blocks ahead; with
// the scales after a super-block's last block). (16 and 24 blocks ahead measured alike.)
template <Kind K>
inline void kind_prefetch(const uint8_t* group, int64_t b) {
  if constexpr (K == Kind::Q4K) return prefetch_ahead<false>(group, b);
  constexpr KindLayout L = layout_of(K);
  const char* p = reinterpret_cast<const char*>(kind_block<K>(group, b + 16));
  int64_t bytes = L.block;
  if constexpr (super_kind(K))
    if ((b & 7) == 7) bytes = L.super - 7 * L.block;
  for (int64_t at = 0; at < bytes; at += 64) prefetch_l2(p + at);
  if constexpr (!super_kind(K)) prefetch_l2(p + bytes - 1);  // (blocks straddle lines)
}
// The 8 weight vectors u of a packed block: wq[k] holds columns 4 k .. 4 k + 3 for k < 4 (low
// nibbles), 16 + 4 (k - 4) .. for k >= 4 (high ones); Q5's fifth bit of column 16 (k / 4) +
// 4 (k % 4) + i is bit k of byte [4 n + i] of the high part; IQ4's nibbles index the levels + 128,
// MXFP4's twice the E2M1 values + 128 (116..140).
template <Kind K>
inline void kind_unpack(const uint8_t* blk, __m512i* wq) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int rr = 0; rr < 4; ++rr) {
    const __m512i v = _mm512_loadu_si512(blk + 64 * rr);
    wq[rr] = _mm512_and_si512(v, low4);
    wq[rr + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  }
  if constexpr (high_kind(K)) {
    const __m512i hb = _mm512_loadu_si512(blk + k5_high_at), bit4 = _mm512_set1_epi8(0x10);
    for (int k = 0; k < 8; ++k) {  // bit k -> bit 4 (bits moved across bytes are masked off)
      const __m512i hs = k < 4   ? _mm512_slli_epi16(hb, 4 - k)
                         : k > 4 ? _mm512_srli_epi16(hb, k - 4)
                                 : hb;
      wq[k] = _mm512_ternarylogic_epi32(wq[k], hs, bit4, 0xF8);  // wq | (hs & 0x10)
    }
  }
  if constexpr (iq4_kind(K) || K == Kind::MXFP4) {
    alignas(16) int8_t t[16];
    for (int i = 0; i < 16; ++i)  // IQ4: 1..241
      t[i] = static_cast<int8_t>((K == Kind::MXFP4 ? k_mxfp4_levels[i] : k_iq4_levels[i]) + 128);
    const __m512i levels =
        _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
    for (int k = 0; k < 8; ++k) wq[k] = _mm512_shuffle_epi8(levels, wq[k]);
  }
}
// s (and dm) of block b for the 16 rows.
template <Kind K>
inline void kind_scales(const uint8_t* group, int64_t b, __m512& s, __m512& dm) {
  constexpr KindLayout L = layout_of(K);
  if constexpr (super_kind(K)) {
    const uint8_t* sbp = group + (b >> 3) * L.super;
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sbp + L.d)));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sbp + L.sc + 16 * (b & 7)));
    if constexpr (K == Kind::IQ4XS) {
      s = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
    } else {
      s = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
      dm = q4k_times(sbp, L.m, b & 7, q4k_d(sbp, L.dmin));
    }
  } else if constexpr (K == Kind::MXFP4) {
    // 2^(e - 128) as mxfp4_scale builds it: (e - 1) << 23, or the subnormal 2^21 << e for e < 2.
    const __m512i e = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kind_block<K>(group, b) + L.d)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    s = _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, sub));
  } else {
    const uint8_t* blk = kind_block<K>(group, b);
    s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + L.d)));
    if constexpr (K == Kind::Q51 || K == Kind::Q41)  // -m: fnma(sum, -m, acc) = fma(sum, m, acc)
      dm = _mm512_sub_ps(
          _mm512_setzero_ps(),
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + L.m))));
  }
}

// The three pieces of activation row r in the A tiles of block b: a0, a1, a2 (32 bytes each).
inline void row_pieces(const AmxActivations& x, int64_t nb, int64_t r, int64_t b,
                       const int8_t* a[3]) {
  const int8_t* at = a_tiles(x, nb, r / 16, b);
  a[0] = at + (r % 16) * 32;
  a[1] = at + 512 + (r % 16) * 64;
  a[2] = a[1] + 32;
}

// c[p] = wq . a[p] over a block of 32 columns, for the 16 weight rows in the lanes: wq[k] holds
// columns 4 k .. 4 k + 3 (unsigned bytes), whose pieces are at a[p] + 4 k. The sums may be split
// over NC accumulator chains (integer sums: any order gives the same value). P = 1: the
// activations are a0 alone (AmxActivations::i8_pieces), and c[1] = c[2] = 0 without multiplying the
// zero pieces.
template <int NC, int P>
inline void dot_pieces(const __m512i* wq, const int8_t* const* a, __m512i* c) {
  __m512i cc[3][NC];
  for (int p = 0; p < 3; ++p)
    for (int h = 0; h < NC; ++h) cc[p][h] = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) {
    for (int p = 0; p < P; ++p) {
      int32_t a4;
      std::memcpy(&a4, a[p] + 4 * k, 4);
      cc[p][k % NC] = _mm512_dpbusd_epi32(cc[p][k % NC], wq[k], _mm512_set1_epi32(a4));
    }
  }
  for (int p = 0; p < 3; ++p) c[p] = NC == 2 ? _mm512_add_epi32(cc[p][0], cc[p][NC - 1]) : cc[p][0];
}
// c12 = 16 c1 + c2 (zero for one piece).
template <int P>
inline __m512i pieces12(const __m512i* c) {
  if constexpr (P == 1) return _mm512_setzero_si512();
  return _mm512_add_epi32(_mm512_slli_epi32(c[1], 4), c[2]);
}

// R rows share each unpacked block of weights; P activation pieces (3, or 1: dot_pieces).
template <Kind K, int R, int P>
void vnni_group(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y, int64_t ldy,
                int64_t o0, int64_t o_end) {
  constexpr int NC = R <= 2 ? 2 : 1;
  const int64_t nb = x.cols / 32;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = kind_block<K>(group, b);
    kind_prefetch<K>(group, b);
    __m512i wq[8];
    kind_unpack<K>(blk, wq);
    __m512 s, dm = _mm512_setzero_ps();
    kind_scales<K>(group, b, s, dm);
    for (int j = 0; j < R; ++j) {
      const int64_t r = r0 + j;
      const int8_t* a[3];
      row_pieces(x, nb, r, b, a);
      __m512i c[3];
      dot_pieces<NC, P>(wq, a, c);
      const __m512i c12 = pieces12<P>(c);
      if constexpr (min_kind(K)) {
        acc[j] = epilogue(c[0], c12, s, dm, x.i8_scale[r * nb + b], x.i8_sum[r * nb + b], acc[j]);
      } else {
        const int32_t* isum = x.i8_isum16 + r * 2 * nb + 2 * b;
        acc[j] = epilogue_signed(c[0], c12, s, x.i8_scale[r * nb + b],
                                 offset_of(K) * (isum[0] + isum[1]), acc[j]);
      }
    }
  }
  for (int j = 0; j < R; ++j) store_row(acc[j], y + (r0 + j) * ldy, o0, o_end);
}

// Q6_K: per 16-value sub-block h, D = 2^11 (u . a0) + 16 (u . a1) + (u . a2), then
// acc = fma(f32(D - 32 S), s * d, acc) (epilogue_q6k).
template <int R, int P>
void vnni_group_q6k(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                    int64_t ldy, int64_t o0, int64_t o_end) {
  const int64_t nb = x.cols / 32;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sbp = super_at<true>(group, b);
    prefetch_ahead<true>(group, b);
    __m512i wq[8];
    q6k_unpack(block_at<true>(group, b), wq);
    const __m512 s[2] = {q6k_scales(sbp, b & 7, 0), q6k_scales(sbp, b & 7, 1)};
    for (int j = 0; j < R; ++j) {
      const int64_t r = r0 + j;
      const int8_t* a[3];
      row_pieces(x, nb, r, b, a);
      for (int h = 0; h < 2; ++h) {
        __m512i c[3];
        for (int p = 0; p < 3; ++p) c[p] = _mm512_setzero_si512();
        for (int k = 4 * h; k < 4 * h + 4; ++k)
          for (int p = 0; p < P; ++p) {
            int32_t a4;
            std::memcpy(&a4, a[p] + 4 * k, 4);
            c[p] = _mm512_dpbusd_epi32(c[p], wq[k], _mm512_set1_epi32(a4));
          }
        const __m512i c12 = pieces12<P>(c);
        acc[j] = epilogue_q6k(c[0], c12, s[h], x.i8_scale[r * nb + b],
                              x.i8_isum16[r * 2 * nb + 2 * b + h], acc[j]);
      }
    }
  }
  for (int j = 0; j < R; ++j) store_row(acc[j], y + (r0 + j) * ldy, o0, o_end);
}

#if !defined(OSSA_HAVE_AMX_I8)
// Q8_0 (VNNI without AMX; repack_q8_0's layout): per block, D = 2^11 (u . a0) + 16 (u . a1) +
// (u . a2) - 128 S for u = q + 128, S the block's sum of 2^11 a0 + 16 a1 + a2 (both halves of
// i8_isum16), which is the signed quants' D of the AVX2 kernel (|2^11 (u . a0)| <= 2^11 * 32 *
// 255 * 127 and the other terms leave the int32 sum below 2^31), then the same epilogue:
// acc = fma(f32(D), d * scale, acc), blocks in order.
template <int R, int P>
void vnni_group_q8_0(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                     int64_t ldy, int64_t o0, int64_t o_end) {
  constexpr int NC = R <= 2 ? 2 : 1;
  const int64_t nb = x.cols / 32;
  const uint8_t* d_at = group + nb * k8v_quant_bytes;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * k8v_quant_bytes;
    // Into L2, 16 blocks (~8 KB) ahead (1B Q8_0 decode: 24 tok/s with T0 8 ahead, 26-32 with T1
    // 12-16 ahead).
    const char* ahead = reinterpret_cast<const char*>(blk + 16 * k8v_quant_bytes);
    for (int l = 0; l < 8; ++l) prefetch_l2(ahead + 64 * l);
    prefetch_l2(d_at + 32 * (b + 16));
    __m512i wq[8];
    // (unaligned loads: a group of an odd number of blocks starts 32 bytes into a line)
    for (int k = 0; k < 8; ++k) wq[k] = _mm512_loadu_si512(blk + 64 * k);
    const __m512 d =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d_at + 32 * b)));
    for (int j = 0; j < R; ++j) {
      const int64_t r = r0 + j;
      const int8_t* a[3];
      row_pieces(x, nb, r, b, a);
      __m512i c[3];
      dot_pieces<NC, P>(wq, a, c);
      const int32_t* isum = x.i8_isum16 + r * 2 * nb + 2 * b;
      const __m512i c12 = pieces12<P>(c);
      acc[j] =
          epilogue_signed(c[0], c12, d, x.i8_scale[r * nb + b], 128 * (isum[0] + isum[1]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) store_row(acc[j], y + (r0 + j) * ldy, o0, o_end);
}
#endif

using VnniGroup = void (*)(const uint8_t*, const AmxActivations&, int64_t, float*, int64_t, int64_t,
                           int64_t);
// By row count 1..4, then 8 (Q6_K, Q8_0: 4 again), for P pieces.
template <int P>
constexpr VnniGroup k_kind_groups_q6k[5] = {vnni_group_q6k<1, P>, vnni_group_q6k<2, P>,
                                            vnni_group_q6k<3, P>, vnni_group_q6k<4, P>,
                                            vnni_group_q6k<4, P>};
#if !defined(OSSA_HAVE_AMX_I8)
template <int P>
constexpr VnniGroup k_kind_groups_q8_0[5] = {vnni_group_q8_0<1, P>, vnni_group_q8_0<2, P>,
                                             vnni_group_q8_0<3, P>, vnni_group_q8_0<4, P>,
                                             vnni_group_q8_0<4, P>};
#endif
template <Kind K, int P>
constexpr VnniGroup k_kind_groups[5] = {vnni_group<K, 1, P>, vnni_group<K, 2, P>,
                                        vnni_group<K, 3, P>, vnni_group<K, 4, P>,
                                        vnni_group<K, 8, P>};
// By vnni_kind, then Q6_K (k_q6k_row) and, without AMX, Q8_0 (k_q8_0_row), for P pieces.
constexpr int k_q6k_row = 9, k_q8_0_row = 10;
template <int P>
constexpr const VnniGroup* k_vnni_groups[] = {
    k_kind_groups<Kind::Q4K, P>, k_kind_groups<Kind::Q5K, P>, k_kind_groups<Kind::IQ4XS, P>,
    k_kind_groups<Kind::Q50, P>, k_kind_groups<Kind::Q51, P>, k_kind_groups<Kind::IQ4NL, P>,
    k_kind_groups<Kind::Q40, P>, k_kind_groups<Kind::Q41, P>, k_kind_groups<Kind::MXFP4, P>,
    k_kind_groups_q6k<P>,
#if !defined(OSSA_HAVE_AMX_I8)
    k_kind_groups_q8_0<P>,
#endif
};

void vnni_rows(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
               float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  const int kind = vnni_kind(w.type);
  OSSA_ASSERT(x.i8_pieces == 1 || x.i8_pieces == 3);
  const VnniGroup* const* table = x.i8_pieces == 1 ? k_vnni_groups<1> : k_vnni_groups<3>;
#if defined(OSSA_HAVE_AMX_I8)
  OSSA_ASSERT(kind >= 0 || w.type == DType::Q6_K);
  const VnniGroup* fns = table[kind >= 0 ? kind : k_q6k_row];
#else
  OSSA_ASSERT(kind >= 0 || w.type == DType::Q6_K || w.type == DType::Q8_0);
  const VnniGroup* fns = table[kind >= 0 ? kind : w.type == DType::Q6_K ? k_q6k_row : k_q8_0_row];
#endif
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint8_t* group = w.packed + (o0 / 16) * group_bytes(w.type, x.cols);
    // 8 rows at a time share each unpacked block (Q6_K: 4), then the rest 4 or fewer at a time:
    // every row gets the same integers and epilogue whichever group it falls in.
    const int64_t wide = kind >= 0 ? 8 : 4;
    for (int64_t r = r_begin; r < r_end;) {
      const int64_t n = r_end - r >= wide ? wide : std::min<int64_t>(4, r_end - r);
      fns[n == 8 ? 4 : n - 1](group, x, r, y, ldy, o0, o_end);
      r += n;
    }
  }
}

#if defined(OSSA_HAVE_AMX_I8)
// ---- AMX: 16 activation rows at a time (amx_i8_rows.h's driver) --------------------------------
// What both types' tile kernels share: steps of 32 values, the packed group of 16 weight rows,
// the A tiles.
struct Steps32 {
  static int64_t steps(int64_t cols) { return cols / 32; }
  static const uint8_t* group(const TensorView& w, int64_t cols, int64_t o0) {
    return w.packed + (o0 / 16) * group_bytes(w.type, cols);
  }
  static const int8_t* a_tiles(const AmxActivations& x, int64_t nb, int64_t mb, int64_t b) {
    return vnni::a_tiles(x, nb, mb, b);
  }
};

// The B tile [16 q, q] of one packed block (16 rows of 64 bytes); its rows 8..15 are the B tile of
// q. Tile row j < 8 holds k = 4 j .. 4 j + 3: the low nibbles for j < 4, the high ones for 4 <= j
// < 8. P = 1 (8-bit activations) builds rows 8..15 alone: only q . a0 is multiplied.
template <int P>
inline void build_b(const uint8_t* blk, uint8_t* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
  for (int r = 0; r < 4; ++r) {
    const __m512i v = _mm512_load_si512(blk + 64 * r);
    if constexpr (P == 3) {
      _mm512_store_si512(out + 64 * r, _mm512_and_si512(_mm512_slli_epi16(v, 4), high4));
      _mm512_store_si512(out + 64 * (r + 4), _mm512_and_si512(v, high4));
    }
    _mm512_store_si512(out + 64 * (r + 8), _mm512_and_si512(v, low4));
    _mm512_store_si512(out + 64 * (r + 12), _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
  }
}

// The tile kernels of the two types, for amx_i8_tile_rows: B tiles of a block built into bt (when
// `build`), its products with the A tiles at a into C buffer c, and c scaled into 16 rows of
// accumulators. P = 1 (8-bit activations: the pieces a1, a2 are zero): the a0 products alone, and
// the epilogues take c12 = 0, as the VNNI loop's do.
template <int P>
struct Q4kTiles : Steps32 {
  static constexpr int64_t b_bytes = 1024;  // B tiles of a block
  using CBuf = int32_t[2][256];             // q . a0 and [16 q, q] . [a1, a2]
  static void config(int rows) { load_tile_config(rows); }
  static void product(const uint8_t* group, int64_t b, bool build, uint8_t* bt, const int8_t* a,
                      CBuf& c) {
    if (build) {
      prefetch_ahead<false>(group, b);
      build_b<P>(block_at<false>(group, b), bt);
    }
    _tile_loadd(0, a, 32);
    _tile_loadd(2, bt + 512, 64);
    _tile_zero(4);
    if constexpr (P == 3) {
      _tile_loadd(1, a + 512, 64);
      _tile_loadd(3, bt, 64);
      _tile_zero(5);
    }
    _tile_dpbsud(4, 0, 2);
    if constexpr (P == 3) _tile_dpbsud(5, 1, 3);
    _tile_stored(4, c[0], 64);
    if constexpr (P == 3) _tile_stored(5, c[1], 64);
  }
  static void scale(const uint8_t* group, int64_t b, const CBuf& c, const AmxActivations& x,
                    int64_t m0, int rows, __m512* acc) {
    const int64_t nb = x.cols / 32;
    const uint8_t* sbp = super_at<false>(group, b);
    const __m512 s = q4k_times(sbp, k4_sc_at, b & 7, q4k_d(sbp, k4_d_at));
    const __m512 dm = q4k_times(sbp, k4_m_at, b & 7, q4k_d(sbp, k4_dmin_at));
    const float* dsc = x.i8_scale + m0 * nb + b;
    const float* sum = x.i8_sum + m0 * nb + b;
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) {
      if (m >= rows) break;
      const __m512i c12 = P == 3 ? _mm512_load_si512(c[1] + 16 * m) : _mm512_setzero_si512();
      acc[m] =
          epilogue(_mm512_load_si512(c[0] + 16 * m), c12, s, dm, dsc[m * nb], sum[m * nb], acc[m]);
    }
  }
};

// Q6_K: per sub-block h, the A tiles are 16 of the 32 columns of each piece (strided loads of the
// shared layout), B is 4 rows (K = 16) of u, and each piece has its own C tile.
// Tiles 0-2: a0, a1, a2 (rows x 16 bytes); 3: B (4 rows of 64 bytes); 4-6: C.
void load_tile_config_q6k(int rows) {
  TileConfig c;
  const uint8_t r = static_cast<uint8_t>(rows);
  for (int t = 0; t < 3; ++t) {
    c.colsb[t] = 16;
    c.rows[t] = r;
  }
  c.colsb[3] = 64;
  c.rows[3] = 4;
  for (int t = 4; t < 7; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = r;
  }
  _tile_loadconfig(&c);
}

template <int P>
struct Q6kTiles : Steps32 {
  static constexpr int64_t b_bytes = 512;
  using CBuf = int32_t[2][3][256];  // per sub-block h, u . a0, u . a1, u . a2
  static void config(int rows) { load_tile_config_q6k(rows); }
  static void product(const uint8_t* group, int64_t b, bool build, uint8_t* bt, const int8_t* a,
                      CBuf& c) {
    if (build) {
      prefetch_ahead<true>(group, b);
      __m512i wq[8];
      q6k_unpack(block_at<true>(group, b), wq);
      for (int j = 0; j < 8; ++j) _mm512_store_si512(bt + 64 * j, wq[j]);
    }
    for (int h = 0; h < 2; ++h) {
      if constexpr (P == 1) {
        _tile_loadd(0, a + 16 * h, 32);
        _tile_loadd(3, bt + 256 * h, 64);
        _tile_zero(4);
        _tile_dpbsud(4, 0, 3);
        _tile_stored(4, c[h][0], 64);
      } else {
        int32_t* const out[3] = {c[h][0], c[h][1], c[h][2]};
        amx_three_pieces(a + 16 * h, 32, a + 512 + 16 * h, a + 512 + 32 + 16 * h, 64, bt + 256 * h,
                         out);
      }
    }
  }
  static void scale(const uint8_t* group, int64_t b, const CBuf& c, const AmxActivations& x,
                    int64_t m0, int rows, __m512* acc) {
    const int64_t nb = x.cols / 32;
    const uint8_t* sbp = super_at<true>(group, b);
    const float* dsc = x.i8_scale + m0 * nb + b;
    const int32_t* sum = x.i8_isum16 + m0 * 2 * nb + 2 * b;
    for (int h = 0; h < 2; ++h) {
      const __m512 s = q6k_scales(sbp, b & 7, h);
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) {
        if (m >= rows) break;
        const __m512i c12 =
            P == 1 ? _mm512_setzero_si512()
                   : _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[h][1] + 16 * m), 4),
                                      _mm512_load_si512(c[h][2] + 16 * m));
        acc[m] = epilogue_q6k(_mm512_load_si512(c[h][0] + 16 * m), c12, s, dsc[m * nb],
                              sum[m * 2 * nb + h], acc[m]);
      }
    }
  }
};

// Rows below this go through the VNNI loop (the same results; measured faster for few rows).
constexpr int64_t k_vnni_rows = 4;
#endif  // OSSA_HAVE_AMX_I8

}  // namespace vnni
}  // namespace

void amx_i8_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, int8_t* tiles,
                       float* scale, float* sum, int32_t* isum16, int pieces) {
  OSSA_ASSERT(pieces == 1 || pieces == 3);
  const int64_t nb = cols / 32;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t r = r_begin; r < r_end; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + r * cols + 32 * b;
      const __m512 v[2] = {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)};
      const float mx = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_and_ps(v[0], abs_mask), _mm512_and_ps(v[1], abs_mask)));
      const __m512 inv = _mm512_set1_ps(mx > 0.0f ? 127.0f / mx : 0.0f);
      int8_t* t0 = tiles + ((r / 16) * nb + b) * 1536 + (r % 16) * 32;
      int8_t* t12 = tiles + ((r / 16) * nb + b) * 1536 + 512 + (r % 16) * 64;
      for (int h = 0; h < 2; ++h) {
        const __m512 whole = i8_pieces16(_mm512_mul_ps(v[h], inv), t0 + 16 * h, t12 + 16 * h,
                                         t12 + 32 + 16 * h, pieces == 1);
        isum16[r * 2 * nb + 2 * b + h] = static_cast<int32_t>(_mm512_reduce_add_ps(whole));
      }
      scale[r * nb + b] = mx / 127.0f * 0x1p-11f;  // D counts units of 2^-11 (exact scaling)
      sum[r * nb + b] = split_sum(isum16 + r * 2 * nb + 2 * b, scale[r * nb + b]);
    }
  }
}

#if defined(OSSA_HAVE_AMX_I8)
void amx_i8_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                    float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0 && x.i8 != nullptr);
  const bool q6 = w.type == DType::Q6_K;
  if (r_end - r_begin < vnni::k_vnni_rows)
    return vnni::vnni_rows(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  if (x.i8_pieces == 1) {  // 8-bit activations: the a0 products alone
    if (q6)
      return amx_i8_tile_rows<vnni::Q6kTiles<1>>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
    return amx_i8_tile_rows<vnni::Q4kTiles<1>>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  }
  if (q6) return amx_i8_tile_rows<vnni::Q6kTiles<3>>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
  amx_i8_tile_rows<vnni::Q4kTiles<3>>(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
}
#endif
#endif  // OSSA_HAVE_I8_VNNI

#if defined(OSSA_HAVE_I8_AVX2)
// ---- AVX2 (no AMX; with VNNI only Q8_0): the same integers and the same f32 operations --------
// The activations are split into the same pieces, in the same layout, as amx_i8_split_rows does
// with AVX-512 (every step is elementwise, and the block sums are of the pieces' integers). The
// kernels hold 8 weight rows in the lanes (half of a packed group): VPMADDUBSW multiplies a row's 4
// quants of a lane with 4 broadcast activation bytes into two int16 pair sums, which are added over
// the block in int16 while they cannot overflow, then widened by VPMADDWD. The int32 D, and every
// f32 operation after it, are the VNNI loop's.
namespace {

// 32 int32 lanes of int8 values (4 vectors of 8) -> 32 bytes in order.
inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline int32_t hsum8_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// 4 bytes broadcast to every lane, straight from memory (VBROADCASTSS: no scalar register).
inline __m256i bcast4(const int8_t* p) {
  return _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(p)));
}

inline __m256 widen8_u8(const uint8_t* p) {  // 8 unsigned bytes as f32
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 widen8_s8(const uint8_t* p) {  // 8 signed bytes as f32
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// c + VPMADDUBSW(w, a) in int16. The sums below never reach the int16 bounds (each kernel states
// its bound), so plain VPADDW is exact. Not VPADDSW: on Zen 3 it issues 2 per cycle, VPADDW 4
// (benchmarks/isa_ports.py); with it the 8-bit Q4_K kernel took 11.1-11.5 ms for 64 rows where it
// now takes 8.4-8.6 (kernel_rows.py --q8, one thread). The empty asm keeps each chain one register:
// the compiler would otherwise rebalance the plain adds into trees holding all 24 products live
// (spills).
inline __m256i acc16(__m256i c, __m256i w, __m256i a) {
  c = _mm256_add_epi16(c, _mm256_maddubs_epi16(w, a));
  __asm__("" : "+v"(c));
  return c;
}

// Q4_K, one block of 32 columns, 8 weight rows: D = 2^11 (q . a0) + 16 (q . a1) + (q . a2) per
// lane. wq[k] holds columns 4 k .. 4 k + 3 (q <= 15); the pieces of those columns are at 4 k.
// Per int16: |q . a0| over 16 columns <= 16 * 15 * 127 = 30480, |q . a1| <= 15360, |q . a2| <=
// 1920.
// Q5 (Q5_0, Q5_1, Q5_K: q <= 31): q . a0 in two int16 chains of 16 columns each (<= 8 * 31 * 127 =
// 31496 per int16), q . a1 (<= 16 * 31 * 64 = 31744) and q . a2 in one.
// P: the activation pieces (AmxActivations::i8_pieces): 3, or 1 where a1 = a2 = 0 (8-bit
// activations), whose products are zeros and are skipped: the same D.
template <bool Q5 = false, int P = 3>
inline __m256i q4k_dot(const __m256i* wq, const int8_t* a0, const int8_t* a1, const int8_t* a2) {
  __m256i c0 = _mm256_maddubs_epi16(wq[0], bcast4(a0));
  __m256i c0b = Q5 ? _mm256_maddubs_epi16(wq[4], bcast4(a0 + 16)) : _mm256_setzero_si256();
  __m256i c1 = P == 3 ? _mm256_maddubs_epi16(wq[0], bcast4(a1)) : _mm256_setzero_si256();
  __m256i c2 = P == 3 ? _mm256_maddubs_epi16(wq[0], bcast4(a2)) : _mm256_setzero_si256();
  for (int k = 1; k < 8; ++k) {
    if (Q5 && k >= 4) {
      if (k > 4) c0b = acc16(c0b, wq[k], bcast4(a0 + 4 * k));
    } else {
      c0 = acc16(c0, wq[k], bcast4(a0 + 4 * k));
    }
    if constexpr (P == 3) {
      c1 = acc16(c1, wq[k], bcast4(a1 + 4 * k));
      c2 = acc16(c2, wq[k], bcast4(a2 + 4 * k));
    }
  }
  __m256i d0 = _mm256_madd_epi16(c0, _mm256_set1_epi16(2048));
  if (Q5) d0 = _mm256_add_epi32(d0, _mm256_madd_epi16(c0b, _mm256_set1_epi16(2048)));
  if constexpr (P == 1) return d0;
  const __m256i d1 = _mm256_madd_epi16(c1, _mm256_set1_epi16(16));
  const __m256i d2 = _mm256_madd_epi16(c2, _mm256_set1_epi16(1));
  return _mm256_add_epi32(d0, _mm256_add_epi32(d1, d2));
}

// Q6_K, one 16-column sub-block, 8 weight rows: D = 2^11 (u . a0) + 16 (u . a1) + (u . a2) for the
// unsigned u <= 63 of wq[0..3]. Per int16: two columns' pairs of u . a0 (<= 2 * 2 * 63 * 127 =
// 32004), four of u . a1 (<= 32256) and of u . a2. P as q4k_dot's.
template <int P = 3>
inline __m256i q6k_dot(const __m256i* wq, const int8_t* a0, const int8_t* a1, const int8_t* a2) {
  const __m256i c0a = acc16(_mm256_maddubs_epi16(wq[0], bcast4(a0)), wq[1], bcast4(a0 + 4));
  const __m256i c0b = acc16(_mm256_maddubs_epi16(wq[2], bcast4(a0 + 8)), wq[3], bcast4(a0 + 12));
  const __m256i k2048 = _mm256_set1_epi16(2048);
  const __m256i d0 = _mm256_add_epi32(_mm256_madd_epi16(c0a, k2048), _mm256_madd_epi16(c0b, k2048));
  if constexpr (P == 1) return d0;
  __m256i c1 = _mm256_maddubs_epi16(wq[0], bcast4(a1));
  __m256i c2 = _mm256_maddubs_epi16(wq[0], bcast4(a2));
  for (int k = 1; k < 4; ++k) {
    c1 = acc16(c1, wq[k], bcast4(a1 + 4 * k));
    c2 = acc16(c2, wq[k], bcast4(a2 + 4 * k));
  }
  const __m256i d1 = _mm256_madd_epi16(c1, _mm256_set1_epi16(16));
  const __m256i d2 = _mm256_madd_epi16(c2, _mm256_set1_epi16(1));
  return _mm256_add_epi32(d0, _mm256_add_epi32(d1, d2));
}

// The 8 weight vectors of half `h` (rows 8 h .. 8 h + 7) of a block of nibbles laid out as a
// packed Q4_K block's (Q4_K, Q4_0, Q4_1): wq[k] holds columns 4 k .. 4 k + 3 (k < 4: the low
// nibbles; k >= 4: the high ones).
inline void nibbles8(const uint8_t* blk, int h, __m256i* wq) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int rr = 0; rr < 4; ++rr) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * rr + 32 * h));
    wq[rr] = _mm256_and_si256(v, low4);
    wq[rr + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  }
}
// The fifth bits of a Q5 block's (Q5_0, Q5_1, Q5_K: vnni::kind_unpack's high part) half h added
// to its nibbles8.
inline void add_high8(const uint8_t* high, int h, __m256i* wq) {
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(high + 32 * h));
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  for (int k = 0; k < 8; ++k) {  // bit k -> bit 4 (bits moved across bytes are masked off)
    const __m256i hs = k < 4   ? _mm256_slli_epi16(hb, 4 - k)
                       : k > 4 ? _mm256_srli_epi16(hb, k - 4)
                               : hb;
    wq[k] = _mm256_or_si256(wq[k], _mm256_and_si256(hs, bit4));
  }
}

// The 8 weight vectors of half `h` (rows 8 h .. 8 h + 7) of a packed Q6_K block: u of columns
// 4 j .. 4 j + 3 (q6k_unpack's, 8 rows instead of 16).
inline void q6k_unpack8(const uint8_t* blk, int h, __m256i* wq) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const __m256i hb[2] = {
      _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + k6_high_at + 32 * h)),
      _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + k6_high_at + 64 + 32 * h))};
  for (int j = 0; j < 8; ++j) {
    const __m256i v =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 64 * (j % 4) + 32 * h));
    const __m256i lo =
        j < 4 ? _mm256_and_si256(v, low4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    const int m = j / 2;
    const __m256i hs = m == 2  ? hb[j % 2]
                       : m < 2 ? _mm256_slli_epi16(hb[j % 2], 4 - 2 * m)
                               : _mm256_srli_epi16(hb[j % 2], 2);
    wq[j] = _mm256_or_si256(lo, _mm256_and_si256(hs, bits45));
  }
}

inline const int8_t* a_tiles(const AmxActivations& x, int64_t nb, int64_t mb, int64_t b) {
  return x.i8 + (mb * nb + b) * 1536;
}

inline void store_half(__m256 v, float* y, int64_t o, int64_t o_end) {
  const int64_t n_valid = std::min<int64_t>(8, o_end - o);
  if (n_valid <= 0) return;
  if (n_valid == 8) return _mm256_storeu_ps(y + o, v);
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  std::memcpy(y + o, t, static_cast<size_t>(n_valid) * sizeof(float));
}

// Prefetch the bytes of block b + 16 of a group's stream (two super-blocks ahead): Q4_K, Q6_K, or
// super-blocks of sb bytes with blocks of blk_bytes (Q5_K).
template <bool Q6, int64_t blk_bytes = Q6 ? k6_block_bytes : 256,
          int64_t sb = Q6 ? k6_sb_bytes : k4_sb_bytes>
inline void prefetch_ahead(const uint8_t* group, int64_t b) {
  const int64_t bb = b + 16;
  const char* p = reinterpret_cast<const char*>(group + (bb >> 3) * sb + blk_bytes * (bb & 7));
  const int lines = (bb & 7) == 7 ? static_cast<int>((sb - 7 * blk_bytes) / 64)
                                  : static_cast<int>(blk_bytes / 64);
  for (int l = 0; l < lines; ++l) prefetch_l2(p + 64 * l);
}

// Per activation row of a kernel call: its pieces (a0 of block 0; a1 is 512 - 32 (r % 16) further
// on, a2 32 after a1; block b is 1,536 bytes on), its block scales and sums.
struct RowPieces {
  const int8_t* a0;
  const int8_t* a1;
  const float* scale;
  const float* sum;
  const int32_t* isum16;
};
inline RowPieces row_pieces(const AmxActivations& x, int64_t r) {
  const int64_t nb = x.cols / 32;
  const int8_t* at = x.i8 + (r / 16) * nb * 1536;
  return RowPieces{at + (r % 16) * 32, at + 512 + (r % 16) * 64, x.i8_scale + r * nb,
                   x.i8_sum + r * nb, x.i8_isum16 + r * 2 * nb};
}

// R activation rows [r0, r0 + R) by the 16 weight rows of one packed group (output columns o0..).
// Q5: Q5_K (Q4_K's scheme with the fifth bits of its layout).
template <int R, bool Q5 = false, int P = 3>
void avx2_group_q4k(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                    int64_t ldy, int64_t o0, int64_t o_end) {
  constexpr int64_t sb_bytes = Q5 ? k5k_sb_bytes : k4_sb_bytes;
  constexpr int64_t blk_bytes = Q5 ? k5k_block_bytes : 256;
  constexpr int64_t sc_at = Q5 ? k5k_sc_at : k4_sc_at, m_at = Q5 ? k5k_m_at : k4_m_at;
  constexpr int64_t d_at = Q5 ? k5k_d_at : k4_d_at, dmin_at = Q5 ? k5k_dmin_at : k4_dmin_at;
  const int64_t nb = x.cols / 32;
  RowPieces rp[R];
  for (int j = 0; j < R; ++j) rp[j] = row_pieces(x, r0 + j);
  if constexpr (P == 1 && R > 1) {
    // 8-bit activations, several rows: one half (8 weight rows) over every block, then the other,
    // so that the R accumulators, the chain and the 8 weight vectors stay in the 16 registers (2x
    // the speed of both halves per block at 4 rows). Each accumulator takes the same operations in
    // the same order either way.
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* sbp = group + (b >> 3) * sb_bytes;
        const uint8_t* blk = sbp + blk_bytes * (b & 7);
        if (h == 0) prefetch_ahead<false, blk_bytes, sb_bytes>(group, b);
        __m256i wq[8];
        nibbles8(blk, h, wq);
        if constexpr (Q5) add_high8(blk + k5_high_at, h, wq);
        const __m256 s = _mm256_mul_ps(f16x8(sbp + d_at + 16 * h),
                                       widen8_u8(sbp + sc_at + 16 * (b & 7) + 8 * h));
        const __m256 dm = _mm256_mul_ps(f16x8(sbp + dmin_at + 16 * h),
                                        widen8_u8(sbp + m_at + 16 * (b & 7) + 8 * h));
        for (int j = 0; j < R; ++j) {
          const int8_t* a0 = rp[j].a0 + b * 1536;
          __asm__("" : "+r"(a0));  // (opaque: q23k_block_half's)
          const __m256i dd = q4k_dot<Q5, 1>(wq, a0, nullptr, nullptr);
          __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd),
                                     _mm256_mul_ps(s, _mm256_set1_ps(rp[j].scale[b])), acc[j]);
          acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(rp[j].sum[b]), dm, a);
        }
      }
      for (int j = 0; j < R; ++j) store_half(acc[j], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
    }
    return;
  }
  __m256 acc[R][2];
  for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sbp = group + (b >> 3) * sb_bytes;
    const uint8_t* blk = sbp + blk_bytes * (b & 7);
    prefetch_ahead<false, blk_bytes, sb_bytes>(group, b);
    for (int h = 0; h < 2; ++h) {
      __m256i wq[8];
      nibbles8(blk, h, wq);
      if constexpr (Q5) add_high8(blk + k5_high_at, h, wq);
      const __m256 s =
          _mm256_mul_ps(f16x8(sbp + d_at + 16 * h), widen8_u8(sbp + sc_at + 16 * (b & 7) + 8 * h));
      const __m256 dm = _mm256_mul_ps(f16x8(sbp + dmin_at + 16 * h),
                                      widen8_u8(sbp + m_at + 16 * (b & 7) + 8 * h));
      for (int j = 0; j < R; ++j) {
        const int8_t* a0 = rp[j].a0 + b * 1536;
        const int8_t* a1 = rp[j].a1 + b * 1536;
        __asm__("" : "+r"(a0), "+r"(a1));  // (opaque: q23k_block_half's)
        const __m256i dd = q4k_dot<Q5, P>(wq, a0, a1, a1 + 32);
        __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd),
                                   _mm256_mul_ps(s, _mm256_set1_ps(rp[j].scale[b])), acc[j][h]);
        acc[j][h] = _mm256_fnmadd_ps(_mm256_set1_ps(rp[j].sum[b]), dm, a);
      }
    }
  }
  for (int j = 0; j < R; ++j)
    for (int h = 0; h < 2; ++h) store_half(acc[j][h], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
}

template <int R, int P = 3>
void avx2_group_q6k(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                    int64_t ldy, int64_t o0, int64_t o_end) {
  const int64_t nb = x.cols / 32;
  RowPieces rp[R];
  for (int j = 0; j < R; ++j) rp[j] = row_pieces(x, r0 + j);
  if constexpr (P == 1 && R > 1) {  // one half over every block, then the other (as Q4_K's)
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* sbp = group + (b >> 3) * k6_sb_bytes;
        const uint8_t* blk = sbp + k6_block_bytes * (b & 7);
        if (h == 0) prefetch_ahead<true>(group, b);
        __m256i wq[8];
        q6k_unpack8(blk, h, wq);
        const __m256 d = f16x8(sbp + k6_d_at + 16 * h);
        const __m256 s[2] = {
            _mm256_mul_ps(widen8_s8(sbp + k6_sc_at + 32 * (b & 7) + 8 * h), d),
            _mm256_mul_ps(widen8_s8(sbp + k6_sc_at + 32 * (b & 7) + 16 + 8 * h), d)};
        for (int j = 0; j < R; ++j) {
          const int8_t* a0 = rp[j].a0 + b * 1536;
          __asm__("" : "+r"(a0));  // (opaque: q23k_block_half's)
          const __m256 dsc = _mm256_set1_ps(rp[j].scale[b]);
          for (int sub = 0; sub < 2; ++sub) {
            const __m256i dd =
                _mm256_sub_epi32(q6k_dot<1>(wq + 4 * sub, a0 + 16 * sub, nullptr, nullptr),
                                 _mm256_set1_epi32(32 * rp[j].isum16[2 * b + sub]));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd), _mm256_mul_ps(s[sub], dsc), acc[j]);
          }
        }
      }
      for (int j = 0; j < R; ++j) store_half(acc[j], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
    }
    return;
  }
  __m256 acc[R][2];
  for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sbp = group + (b >> 3) * k6_sb_bytes;
    const uint8_t* blk = sbp + k6_block_bytes * (b & 7);
    prefetch_ahead<true>(group, b);
    for (int h = 0; h < 2; ++h) {
      __m256i wq[8];
      q6k_unpack8(blk, h, wq);
      const __m256 d = f16x8(sbp + k6_d_at + 16 * h);
      const __m256 s[2] = {_mm256_mul_ps(widen8_s8(sbp + k6_sc_at + 32 * (b & 7) + 8 * h), d),
                           _mm256_mul_ps(widen8_s8(sbp + k6_sc_at + 32 * (b & 7) + 16 + 8 * h), d)};
      for (int j = 0; j < R; ++j) {
        const int8_t* a0 = rp[j].a0 + b * 1536;
        const int8_t* a1 = rp[j].a1 + b * 1536;
        __asm__("" : "+r"(a0), "+r"(a1));  // (opaque: q23k_block_half's)
        const __m256 dsc = _mm256_set1_ps(rp[j].scale[b]);
        for (int sub = 0; sub < 2; ++sub) {
          const __m256i dd = _mm256_sub_epi32(
              q6k_dot<P>(wq + 4 * sub, a0 + 16 * sub, a1 + 16 * sub, a1 + 32 + 16 * sub),
              _mm256_set1_epi32(32 * rp[j].isum16[2 * b + sub]));
          acc[j][h] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd), _mm256_mul_ps(s[sub], dsc), acc[j][h]);
        }
      }
    }
  }
  for (int j = 0; j < R; ++j)
    for (int h = 0; h < 2; ++h) store_half(acc[j][h], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
}

// c + VPMADDWD(w, a), kept one chain: the empty asm hides c's value from the compiler, which would
// otherwise reassociate the unrolled int32 adds into trees holding every product live (spills).
inline __m256i madd_chain(__m256i c, __m256i w, __m256i a) {
  c = _mm256_add_epi32(c, _mm256_madd_epi16(w, a));
  __asm__("" : "+v"(c));
  return c;
}

// Q8_0: R activation rows by the 16 weight rows of a packed group. Per block and half h of 8 rows,
// D = 2^11 (q . a0) + (q . a12), a12 = 16 a1 + a2 (int16, |a12| <= 1032), from VPMADDWD of the
// sign-extended quants (2 columns of 8 rows a vector) with broadcast int16 pairs of the pieces:
// |q . a0| <= 32 * 128 * 127 and |q . a12| <= 32 * 128 * 1032 in int32, |D| < 2^31. Then
// acc = fma(f32(D), d * (2^-11 scale), acc), blocks in order.
template <int R, int P = 3>
void avx2_group_q8_0(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                     int64_t ldy, int64_t o0, int64_t o_end) {
  const int64_t nb = x.cols / 32;
  const int16_t* a[R];
  const float* scale[R];
  for (int j = 0; j < R; ++j) {
    a[j] = x.i16 + (r0 + j) * nb * 64;
    scale[j] = x.i8_scale + (r0 + j) * nb;
  }
  __m256 acc[R][2];
  for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * k8_block_bytes;
    const char* ahead = reinterpret_cast<const char*>(blk + 8 * k8_block_bytes);
    for (int l = 0; l < 9; ++l) prefetch_l2(ahead + 64 * l);
    // Both halves per broadcast where the int32 sums fit the registers (R <= 2, or every R with
    // 8-bit activations: no a12 sums), else one half at a time (integer sums: the same D either
    // way).
    constexpr int H = R <= 2 || P == 1 ? 2 : 1;
    const int8_t* ab[R];  // the block's a0 pairs (a12's 64 bytes on)
    for (int j = 0; j < R; ++j) {
      ab[j] = reinterpret_cast<const int8_t*>(a[j] + b * 64);
      // Opaque: else GCC makes each of the 32 addresses an induction variable of its own (spills).
      __asm__("" : "+r"(ab[j]));
    }
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256i c0[R][H], c12[R][H];
      for (int j = 0; j < R; ++j)
        for (int h = 0; h < H; ++h) c0[j][h] = c12[j][h] = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) {
        __m256i wv[H];
        for (int h = 0; h < H; ++h)
          wv[h] = _mm256_cvtepi8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 256 * (h0 + h) + 16 * p)));
        for (int j = 0; j < R; ++j) {
          const __m256i p0 = bcast4(ab[j] + 4 * p), p12 = bcast4(ab[j] + 64 + 4 * p);
          for (int h = 0; h < H; ++h) {
            c0[j][h] = madd_chain(c0[j][h], wv[h], p0);
            if constexpr (P == 3) c12[j][h] = madd_chain(c12[j][h], wv[h], p12);
          }
        }
      }
      for (int h = 0; h < H; ++h) {
        const __m256 d = f16x8(blk + k8_d_at + 16 * (h0 + h));
        for (int j = 0; j < R; ++j) {
          const __m256i dd = _mm256_add_epi32(_mm256_slli_epi32(c0[j][h], 11), c12[j][h]);
          acc[j][h0 + h] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd), _mm256_mul_ps(d, _mm256_set1_ps(scale[j][b])),
                              acc[j][h0 + h]);
        }
      }
    }
  }
  for (int j = 0; j < R; ++j)
    for (int h = 0; h < 2; ++h) store_half(acc[j][h], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
}

// Q5_0 / Q5_1 (AVX2 without VNNI): Q4_K's D of the nibbles with the fifth bits, u in 0..31
// (q4k_dot<true>), per block; Q5_0 (w = d (u - 16)): acc = fma(f32(D - 16 S), d * (2^-11 scale),
// acc), S the block's sum of 2^11 a0 + 16 a1 + a2 (so D - 16 S is the signed quants' product); Q5_1
// (w = d u + m): acc = fma(f32(D), d * (2^-11 scale), acc), then acc = fma(sum, m, acc) with the
// block's split sum, as Q4_K's minimum.
// Q5 = false: Q4_0 / Q4_1 (u in 0..15, no fifth bits; Q4_0's offset 8) in a model loaded with 8-bit
// activations (one piece; the exact pieces take them to avx2_group_iq4: amx_i8_takes_i16).
template <bool Q51, int R, int P = 3, bool Q5 = true>
void avx2_group_q5_01(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                      int64_t ldy, int64_t o0, int64_t o_end) {
  constexpr int64_t bb =
      Q5 ? (Q51 ? k51_block_bytes : k50_block_bytes) : (Q51 ? k41_block_bytes : k40_block_bytes);
  constexpr int64_t d_at = Q5 ? k5x_d_at : k4x_d_at, m_at = Q5 ? k51_m_at : k41_m_at;
  constexpr int offset = Q5 ? 16 : 8;
  const int64_t nb = x.cols / 32;
  RowPieces rp[R];
  for (int j = 0; j < R; ++j) rp[j] = row_pieces(x, r0 + j);
  if constexpr (P == 1 && R > 1) {  // one half over every block, then the other (as Q4_K's)
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + b * bb;
        if (h == 0) {
          const char* ahead = reinterpret_cast<const char*>(blk + 16 * bb);
          for (int l = 0; l < bb / 64 + 1; ++l) prefetch_l2(ahead + 64 * l);
        }
        __m256i wq[8];
        nibbles8(blk, h, wq);
        if constexpr (Q5) add_high8(blk + k5_high_at, h, wq);
        const __m256 d = f16x8(blk + d_at + 16 * h);
        for (int j = 0; j < R; ++j) {
          __m256i dd = q4k_dot<Q5, 1>(wq, rp[j].a0 + b * 1536, nullptr, nullptr);
          if constexpr (!Q51)
            dd = _mm256_sub_epi32(
                dd, _mm256_set1_epi32(offset * (rp[j].isum16[2 * b] + rp[j].isum16[2 * b + 1])));
          __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd),
                                     _mm256_mul_ps(d, _mm256_set1_ps(rp[j].scale[b])), acc[j]);
          if constexpr (Q51)
            a = _mm256_fmadd_ps(_mm256_set1_ps(rp[j].sum[b]), f16x8(blk + m_at + 16 * h), a);
          acc[j] = a;
        }
      }
      for (int j = 0; j < R; ++j) store_half(acc[j], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
    }
    return;
  }
  __m256 acc[R][2];
  for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * bb;
    const char* ahead = reinterpret_cast<const char*>(blk + 16 * bb);
    for (int l = 0; l < bb / 64 + 1; ++l) prefetch_l2(ahead + 64 * l);
    for (int h = 0; h < 2; ++h) {
      __m256i wq[8];
      nibbles8(blk, h, wq);
      if constexpr (Q5) add_high8(blk + k5_high_at, h, wq);
      const __m256 d = f16x8(blk + d_at + 16 * h);
      for (int j = 0; j < R; ++j) {
        const int8_t* a1 = rp[j].a1 + b * 1536;
        __m256i dd = q4k_dot<Q5, P>(wq, rp[j].a0 + b * 1536, a1, a1 + 32);
        if constexpr (!Q51)
          dd = _mm256_sub_epi32(
              dd, _mm256_set1_epi32(offset * (rp[j].isum16[2 * b] + rp[j].isum16[2 * b + 1])));
        __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd),
                                   _mm256_mul_ps(d, _mm256_set1_ps(rp[j].scale[b])), acc[j][h]);
        if constexpr (Q51)
          a = _mm256_fmadd_ps(_mm256_set1_ps(rp[j].sum[b]), f16x8(blk + m_at + 16 * h), a);
        acc[j][h] = a;
      }
    }
  }
  for (int j = 0; j < R; ++j)
    for (int h = 0; h < 2; ++h) store_half(acc[j][h], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
}

// IQ4_NL / IQ4_XS (AVX2 without VNNI), and Q4_0 / Q4_1 with the exact pieces (their quants, u - 8
// and u, looked up the same way; Q4_1 adds acc = fma(sum, m, acc) with the block's split sum, as
// its VNNI loop): the levels -127..113 are signed and up to 127 in size, so
// VPMADDUBSW's pair sums of |w| a0 would reach 2 * 127 * 127 alone (no room to add two). Instead
// Q8_0's scheme: the levels, looked up from the indices (VPSHUFB) and widened to int16, multiply
// the same int16 pieces a0 and a12 = 16 a1 + a2 (i8_avx2_split_rows16) by VPMADDWD into int32
// pair sums: D = 2^11 (w . a0) + (w . a12) per block (|D| <= 32 * 127 * (2^11 * 127 + 1032) <
// 2^31), the signed levels' D of the VNNI loop (which forms it as (w + 128) . pieces - 128 S),
// then the same epilogue, acc = fma(f32(D), s * (2^-11 scale), acc) with s = d (IQ4_NL) or
// d (ls - 32) (IQ4_XS), blocks in order: by construction the VNNI builds' sums (not compared across
// builds). Layout: put_iq4_i16.
//
// The 4 int16 weight vectors of one 32-byte chunk (put_iq4_i16): w[t] holds columns
// 2 m + 8 t + (0, 1) of the half's 8 rows, as Q8_0's VPMADDWD operands.
enum class I16Kind { IQ4NL, IQ4XS, Q40, Q41 };
template <I16Kind K>
inline __m256i i16_table() {
  alignas(16) static constexpr int8_t q40[16] = {-8, -7, -6, -5, -4, -3, -2, -1,
                                                 0,  1,  2,  3,  4,  5,  6,  7};
  alignas(16) static constexpr int8_t q41[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                 8, 9, 10, 11, 12, 13, 14, 15};
  const int8_t* t = K == I16Kind::Q40 ? q40 : K == I16Kind::Q41 ? q41 : k_iq4_levels;
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}

inline void iq4_levels16(const uint8_t* chunk, __m256i table, __m256i* w) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk));
  const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
  const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
  const __m256i slo = _mm256_cmpgt_epi8(zero, lo), shi = _mm256_cmpgt_epi8(zero, hi);
  w[0] = _mm256_unpacklo_epi8(lo, slo);
  w[1] = _mm256_unpackhi_epi8(lo, slo);
  w[2] = _mm256_unpacklo_epi8(hi, shi);
  w[3] = _mm256_unpackhi_epi8(hi, shi);
}

// c0[j] += w . a0, c12[j] += w . a12 over one half (8 weight rows, 128 index bytes at q) of a
// block, for R rows whose block pieces are at ab[j] (a0's 32 int16, then a12's).
template <int R, int P>
inline void iq4_half(const uint8_t* q, __m256i table, const int8_t* const* ab, __m256i* c0,
                     __m256i* c12) {
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    __m256i w[4];
    iq4_levels16(q + 32 * m, table, w);
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < R; ++j) {
        const int at = 4 * (m + 4 * t);  // the byte of columns 2 m + 8 t's int16 pair
        c0[j] = madd_chain(c0[j], w[t], bcast4(ab[j] + at));
        if constexpr (P == 3) c12[j] = madd_chain(c12[j], w[t], bcast4(ab[j] + 64 + at));
      }
  }
}

template <int R, int P, I16Kind K>
void avx2_group_iq4(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                    int64_t ldy, int64_t o0, int64_t o_end) {
  constexpr bool XS = K == I16Kind::IQ4XS, Q41 = K == I16Kind::Q41;
  constexpr int64_t bb = Q41 ? k41_block_bytes : k40_block_bytes;  // (block32 kinds)
  const int64_t nb = x.cols / 32;
  const __m256i table = i16_table<K>();
  const int16_t* a[R];
  const float* scale[R];
  [[maybe_unused]] const float* sum[R];
  for (int j = 0; j < R; ++j) {
    a[j] = x.i16 + (r0 + j) * nb * 64;
    scale[j] = x.i8_scale + (r0 + j) * nb;
    sum[j] = x.i8_sum + (r0 + j) * nb;
  }
  auto quants = [group](int64_t b) {
    return XS ? group + (b >> 3) * kxs_sb_bytes + 256 * (b & 7) : group + b * bb;
  };
  auto scales = [group](int64_t b, int h) {
    if constexpr (XS) {
      const uint8_t* sbp = group + (b >> 3) * kxs_sb_bytes;
      return _mm256_mul_ps(f16x8(sbp + kxs_d_at + 16 * h),
                           widen8_s8(sbp + kxs_sc_at + 16 * (b & 7) + 8 * h));
    } else {
      return f16x8(group + b * bb + k4x_d_at + 16 * h);
    }
  };
  auto prefetch = [group](int64_t b) {
    if constexpr (XS) {
      prefetch_ahead<false, 256, kxs_sb_bytes>(group, b);
    } else {
      const char* ahead = reinterpret_cast<const char*>(group + (b + 16) * bb);
      for (int l = 0; l < bb / 64 + 1; ++l) prefetch_l2(ahead + 64 * l);
    }
  };
  // One block's half h for the R rows into acc (the same integer D and f32 operations per
  // element in either loop order below).
  auto block_half = [&](int64_t b, int h, __m256* acc) {
    const int8_t* ab[R];
    for (int j = 0; j < R; ++j) {
      ab[j] = reinterpret_cast<const int8_t*>(a[j] + b * 64);
      __asm__("" : "+r"(ab[j]));  // (one address register per row: Q8_0's)
    }
    __m256i c0[R], c12[R];
    for (int j = 0; j < R; ++j) c0[j] = c12[j] = _mm256_setzero_si256();
    iq4_half<R, P>(quants(b) + 128 * h, table, ab, c0, c12);
    const __m256 s = scales(b, h);
    for (int j = 0; j < R; ++j) {
      const __m256i dd = _mm256_add_epi32(_mm256_slli_epi32(c0[j], 11), c12[j]);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd),
                               _mm256_mul_ps(s, _mm256_set1_ps(scale[j][b])), acc[j]);
      if constexpr (Q41)
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(sum[j][b]),
                                 f16x8(group + b * bb + k41_m_at + 16 * h), acc[j]);
    }
  };
  if constexpr (R > 1) {
    // Several rows: one half over every block, then the other (the accumulators stay in
    // registers).
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        if (h == 0) prefetch(b);
        block_half(b, h, acc);
      }
      for (int j = 0; j < R; ++j) store_half(acc[j], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
    }
  } else {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      prefetch(b);
      block_half(b, 0, acc);
      block_half(b, 1, acc + 1);
    }
    for (int h = 0; h < 2; ++h) store_half(acc[h], y + r0 * ldy, o0 + 8 * h, o_end);
  }
}

// Q2_K / Q3_K (AVX2 without VNNI), per 32-column block and 16-value group g of a weight row, the
// quants (Q2_K: q in 0..3; Q3_K: u in 0..7, the quant u - 4) times the int8 pieces of the block
// (amx_i8_split_rows, as Q4_K's) in int16 (VPMADDUBSW over the group's 4 vectors: <= 8 * 7 * 127
// per int16), times the group's scale sc_g by VPMADDWD (Q2_K 0..15, Q3_K -32..31; exact int32):
//   D = sum over the block's 2 groups of sc_g (2^11 (q . a0) + 16 (q . a1) + (q . a2))
// (|D| <= 2 * 16 * 7 * 32 * (2^11 * 127 + 16 * 64 + 8) < 2^31 for Q3_K), then
//   acc = fma(f32(D), d * (2^-11 scale), acc);  acc = fnma(S_g 2^-11 scale, mn_g, acc), g = both
// with S_g the group's sum of 2^11 a0 + 16 a1 + a2 (i8_isum16) and mn_g = dmin m_g (Q2_K) or
// d 4 sc_g (Q3_K: w = d sc_g (u - 4)), exact f32 products of an f16 and a small integer; blocks in
// order. (The VNNI builds fold sc_g into the quants and split per 64 values: other roundings, the
// same weights.)
//
// The 8 vectors of half h (rows 8 h .. 8 h + 7) of block j of a super-block (wq[k]: columns 4 k ..
// 4 k + 3, Q4_K's order).
template <bool Q3>
inline void q23k_unpack8(const uint8_t* blk, int h, __m256i* wq) {
  const __m256i low2 = _mm256_set1_epi8(0x03);
  for (int r = 0; r < 2; ++r) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * r + 32 * h));
    for (int sh = 0; sh < 4; ++sh)
      wq[2 * sh + r] = _mm256_and_si256(sh == 0 ? v : _mm256_srli_epi16(v, 2 * sh), low2);
  }
  if constexpr (Q3) {
    const __m256i hb =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + Q23kAvx2<true>::hb_at + 32 * h));
    const __m256i bit2 = _mm256_set1_epi8(0x04);
    for (int k = 0; k < 8; ++k) {  // bit k -> bit 2 (bits moved across bytes are masked off)
      const __m256i hs = k < 2   ? _mm256_slli_epi16(hb, 2 - k)
                         : k > 2 ? _mm256_srli_epi16(hb, k - 2)
                                 : hb;
      wq[k] = _mm256_or_si256(wq[k], _mm256_and_si256(hs, bit2));
    }
  }
}

// The scales of a block's group gg for half h's 8 rows: sc16 the int16 pair (sc, sc) per row's
// dword (VPMADDWD's multiplier), mn the minimum per row (f32).
template <bool Q3>
inline void q23k_group_scales(const uint8_t* blk, int gg, int h, __m256 dh, __m256 dminh,
                              __m256i& sc16, __m256& mn) {
  using L = Q23kAvx2<Q3>;
  const __m128i b8 =
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + L::sc_at + 16 * gg + 8 * h));
  __m256i sc;
  if constexpr (Q3) {
    sc = _mm256_cvtepi8_epi32(b8);
    mn = _mm256_mul_ps(dh, _mm256_cvtepi32_ps(_mm256_slli_epi32(sc, 2)));  // d 4 sc
  } else {
    const __m256i byte = _mm256_cvtepu8_epi32(b8);
    sc = _mm256_and_si256(byte, _mm256_set1_epi32(0x0F));
    mn = _mm256_mul_ps(dminh, _mm256_cvtepi32_ps(_mm256_srli_epi32(byte, 4)));  // dmin m
  }
  sc16 = _mm256_blend_epi16(sc, _mm256_slli_epi32(sc, 16), 0xAA);
}

// sc_g (2^11 (q . a0) + 16 (q . a1) + (q . a2)) over one group's 4 vectors (16 columns) for one
// row, whose pieces of those columns are at a0, a1, a2.
template <int P>
inline __m256i q23k_group_dot(const __m256i* wq, __m256i sc16, const int8_t* a0, const int8_t* a1,
                              const int8_t* a2) {
  __m256i c0 = _mm256_maddubs_epi16(wq[0], bcast4(a0));
  for (int k = 1; k < 4; ++k) c0 = acc16(c0, wq[k], bcast4(a0 + 4 * k));
  const __m256i d0 = _mm256_slli_epi32(_mm256_madd_epi16(c0, sc16), 11);
  if constexpr (P == 1) return d0;
  __m256i c1 = _mm256_maddubs_epi16(wq[0], bcast4(a1));
  __m256i c2 = _mm256_maddubs_epi16(wq[0], bcast4(a2));
  for (int k = 1; k < 4; ++k) {
    c1 = acc16(c1, wq[k], bcast4(a1 + 4 * k));
    c2 = acc16(c2, wq[k], bcast4(a2 + 4 * k));
  }
  const __m256i d1 = _mm256_slli_epi32(_mm256_madd_epi16(c1, sc16), 4);
  return _mm256_add_epi32(d0, _mm256_add_epi32(d1, _mm256_madd_epi16(c2, sc16)));
}

// Block b's half h for R rows into acc[j] (rp: the rows' pieces).
template <bool Q3, int R, int P>
[[gnu::always_inline]] inline void q23k_block_half(const uint8_t* group, int64_t b, int h,
                                                   const RowPieces* rp, __m256* acc) {
  using L = Q23kAvx2<Q3>;
  const uint8_t* sbp = group + (b >> 3) * L::sb_bytes;
  const uint8_t* blk = sbp + L::block_bytes * (b & 7);
  __m256i wq[8];
  q23k_unpack8<Q3>(blk, h, wq);
  const __m256 dh = f16x8(sbp + L::d_at + 16 * h);
  const __m256 dminh = Q3 ? dh : f16x8(sbp + L::dmin_at + 16 * h);
  __m256i sc16[2];
  __m256 mn[2];
  for (int gg = 0; gg < 2; ++gg) q23k_group_scales<Q3>(blk, gg, h, dh, dminh, sc16[gg], mn[gg]);
  for (int r = 0; r < R; ++r) {
    const int8_t* a0 = rp[r].a0 + b * 1536;
    const int8_t* a1 = rp[r].a1 + b * 1536;
    // Opaque: else GCC makes each of the 24 addresses an induction variable of its own (spills).
    __asm__("" : "+r"(a0), "+r"(a1));
    __m256i dd = q23k_group_dot<P>(wq, sc16[0], a0, a1, a1 + 32);
    dd = _mm256_add_epi32(dd, q23k_group_dot<P>(wq + 4, sc16[1], a0 + 16, a1 + 16, a1 + 48));
    const float scale = rp[r].scale[b];
    __m256 a =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd), _mm256_mul_ps(dh, _mm256_set1_ps(scale)), acc[r]);
    for (int gg = 0; gg < 2; ++gg)
      a = _mm256_fnmadd_ps(_mm256_set1_ps(static_cast<float>(rp[r].isum16[2 * b + gg]) * scale),
                           mn[gg], a);
    acc[r] = a;
  }
}

template <bool Q3, int R, int P>
void avx2_group_q23k(const uint8_t* group, const AmxActivations& x, int64_t r0, float* y,
                     int64_t ldy, int64_t o0, int64_t o_end) {
  using L = Q23kAvx2<Q3>;
  const int64_t nb = x.cols / 32;
  RowPieces rp[R];
  for (int j = 0; j < R; ++j) rp[j] = row_pieces(x, r0 + j);
  auto prefetch = [group](int64_t b) {  // super-block b / 8 + 2, spread over the 8 blocks
    const char* ahead = reinterpret_cast<const char*>(group + ((b >> 3) + 2) * L::sb_bytes);
    constexpr int64_t lines = (L::sb_bytes + 63) / 64, per = (lines + 7) / 8;
    const int64_t l0 = per * (b & 7);
    for (int64_t l = l0; l < std::min(lines, l0 + per); ++l) prefetch_l2(ahead + 64 * l);
  };
  if constexpr (P == 1 && R > 1) {  // one half over every block, then the other (as Q4_K's)
    for (int h = 0; h < 2; ++h) {
      __m256 acc[R];
      for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        if (h == 0) prefetch(b);
        q23k_block_half<Q3, R, P>(group, b, h, rp, acc);
      }
      for (int j = 0; j < R; ++j) store_half(acc[j], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
    }
    return;
  }
  __m256 acc[2][R];
  for (int j = 0; j < R; ++j) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch(b);
    for (int h = 0; h < 2; ++h) q23k_block_half<Q3, R, P>(group, b, h, rp, acc[h]);
  }
  for (int j = 0; j < R; ++j)
    for (int h = 0; h < 2; ++h) store_half(acc[h][j], y + (r0 + j) * ldy, o0 + 8 * h, o_end);
}

using Avx2Group = void (*)(const uint8_t*, const AmxActivations&, int64_t, float*, int64_t, int64_t,
                           int64_t);
// By pieces (3, 1) and type: Q4_K, Q6_K, Q8_0, Q5_0, Q5_1, Q5_K, Q4_0, Q4_1, IQ4_NL, IQ4_XS,
// Q2_K, Q3_K, then Q4_0 / Q4_1 on the int16 kernel (avx2_kind).
template <int P>
constexpr Avx2Group k_avx2_groups[14][4] = {
    {avx2_group_q4k<1, false, P>, avx2_group_q4k<2, false, P>, avx2_group_q4k<3, false, P>,
     avx2_group_q4k<4, false, P>},
    {avx2_group_q6k<1, P>, avx2_group_q6k<2, P>, avx2_group_q6k<3, P>, avx2_group_q6k<4, P>},
    {avx2_group_q8_0<1, P>, avx2_group_q8_0<2, P>, avx2_group_q8_0<3, P>, avx2_group_q8_0<4, P>},
    {avx2_group_q5_01<false, 1, P>, avx2_group_q5_01<false, 2, P>, avx2_group_q5_01<false, 3, P>,
     avx2_group_q5_01<false, 4, P>},
    {avx2_group_q5_01<true, 1, P>, avx2_group_q5_01<true, 2, P>, avx2_group_q5_01<true, 3, P>,
     avx2_group_q5_01<true, 4, P>},
    {avx2_group_q4k<1, true, P>, avx2_group_q4k<2, true, P>, avx2_group_q4k<3, true, P>,
     avx2_group_q4k<4, true, P>},
    {avx2_group_q5_01<false, 1, P, false>, avx2_group_q5_01<false, 2, P, false>,
     avx2_group_q5_01<false, 3, P, false>, avx2_group_q5_01<false, 4, P, false>},
    {avx2_group_q5_01<true, 1, P, false>, avx2_group_q5_01<true, 2, P, false>,
     avx2_group_q5_01<true, 3, P, false>, avx2_group_q5_01<true, 4, P, false>},
    {avx2_group_iq4<1, P, I16Kind::IQ4NL>, avx2_group_iq4<2, P, I16Kind::IQ4NL>,
     avx2_group_iq4<3, P, I16Kind::IQ4NL>, avx2_group_iq4<4, P, I16Kind::IQ4NL>},
    {avx2_group_iq4<1, P, I16Kind::IQ4XS>, avx2_group_iq4<2, P, I16Kind::IQ4XS>,
     avx2_group_iq4<3, P, I16Kind::IQ4XS>, avx2_group_iq4<4, P, I16Kind::IQ4XS>},
    {avx2_group_q23k<false, 1, P>, avx2_group_q23k<false, 2, P>, avx2_group_q23k<false, 3, P>,
     avx2_group_q23k<false, 4, P>},
    {avx2_group_q23k<true, 1, P>, avx2_group_q23k<true, 2, P>, avx2_group_q23k<true, 3, P>,
     avx2_group_q23k<true, 4, P>},
    {avx2_group_iq4<1, P, I16Kind::Q40>, avx2_group_iq4<2, P, I16Kind::Q40>,
     avx2_group_iq4<3, P, I16Kind::Q40>, avx2_group_iq4<4, P, I16Kind::Q40>},
    {avx2_group_iq4<1, P, I16Kind::Q41>, avx2_group_iq4<2, P, I16Kind::Q41>,
     avx2_group_iq4<3, P, I16Kind::Q41>, avx2_group_iq4<4, P, I16Kind::Q41>}};
int avx2_kind(DType t, bool i16) {
  switch (t) {
    case DType::Q6_K:
      return 1;
    case DType::Q8_0:
      return 2;
    case DType::Q5_0:
      return 3;
    case DType::Q5_1:
      return 4;
    case DType::Q5_K:
      return 5;
    case DType::Q4_0:
      return i16 ? 12 : 6;
    case DType::Q4_1:
      return i16 ? 13 : 7;
    case DType::IQ4_NL:
      return 8;
    case DType::IQ4_XS:
      return 9;
    case DType::Q2_K:
      return 10;
    case DType::Q3_K:
      return 11;
    default:
      return 0;
  }
}

// One block of 32 values of a row split into the pieces (amx_i8_split_rows' steps): the values v,
// max |v| and a0, a1, a2 as int32 lanes, 8 values a vector.
struct BlockPieces {
  __m256 v[4];
  float mx;
  __m256i q[3][4];
};
inline void split_block(const float* p, BlockPieces& o) {
  constexpr int k_rint = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int i = 0; i < 4; ++i) o.v[i] = _mm256_loadu_ps(p + 8 * i);
  o.mx = hmax8(_mm256_max_ps(
      _mm256_max_ps(_mm256_and_ps(o.v[0], abs_mask), _mm256_and_ps(o.v[1], abs_mask)),
      _mm256_max_ps(_mm256_and_ps(o.v[2], abs_mask), _mm256_and_ps(o.v[3], abs_mask))));
  const __m256 inv = _mm256_set1_ps(o.mx > 0.0f ? 127.0f / o.mx : 0.0f);
  for (int i = 0; i < 4; ++i) {
    const __m256 yv = _mm256_mul_ps(o.v[i], inv);
    const __m256 a0 = _mm256_round_ps(yv, k_rint);
    const __m256 r1 = _mm256_mul_ps(_mm256_sub_ps(yv, a0), _mm256_set1_ps(128.0f));  // exact
    const __m256 a1 = _mm256_round_ps(r1, k_rint);
    const __m256 a2 =
        _mm256_round_ps(_mm256_mul_ps(_mm256_sub_ps(r1, a1), _mm256_set1_ps(16.0f)), k_rint);
    o.q[0][i] = _mm256_cvtps_epi32(a0);
    o.q[1][i] = _mm256_cvtps_epi32(a1);
    o.q[2][i] = _mm256_cvtps_epi32(a2);
  }
}

// The integer sums 2^11 a0 + 16 a1 + a2 of a split block's two halves of 16 values (exact), as the
// block sums of amx_i8_split_rows (i8_isum16) and the split sums (split_sum) take them.
inline void block_isum16(const BlockPieces& bp, int32_t* isum) {
  for (int h = 0; h < 2; ++h) {
    __m256i whole = _mm256_setzero_si256();
    for (int i = 2 * h; i < 2 * h + 2; ++i)
      whole = _mm256_add_epi32(whole,
                               _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(bp.q[0][i], 11),
                                                                 _mm256_slli_epi32(bp.q[1][i], 4)),
                                                bp.q[2][i]));
    isum[h] = hsum8_epi32(whole);
  }
}

// 16 int32 lanes of int16 values (2 vectors of 8) -> 16 int16 in order.
inline __m256i pack_i16(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
}

}  // namespace

#if !defined(OSSA_HAVE_I8_VNNI)  // (VNNI builds split with AVX-512 above: the same pieces)
void amx_i8_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, int8_t* tiles,
                       float* scale, float* sum, int32_t* isum16, int pieces) {
  OSSA_ASSERT(pieces == 1 || pieces == 3);
  const int64_t nb = cols / 32;
  for (int64_t r = r_begin; r < r_end; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      BlockPieces bp;
      split_block(x + r * cols + 32 * b, bp);
      if (pieces == 1)
        for (int i = 0; i < 4; ++i) bp.q[1][i] = bp.q[2][i] = _mm256_setzero_si256();
      const auto& q = bp.q;
      int8_t* t0 = tiles + ((r / 16) * nb + b) * 1536 + (r % 16) * 32;
      int8_t* t12 = tiles + ((r / 16) * nb + b) * 1536 + 512 + (r % 16) * 64;
      int8_t* dst[3] = {t0, t12, t12 + 32};
      for (int pc = 0; pc < 3; ++pc)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[pc]),
                            pack_i8(q[pc][0], q[pc][1], q[pc][2], q[pc][3]));
      block_isum16(bp, isum16 + r * 2 * nb + 2 * b);
      scale[r * nb + b] = bp.mx / 127.0f * 0x1p-11f;  // D counts units of 2^-11 (exact scaling)
      sum[r * nb + b] = split_sum(isum16 + r * 2 * nb + 2 * b, scale[r * nb + b]);
    }
  }
}

#endif

void i8_avx2_split_rows16(const float* x, int64_t cols, int64_t r_begin, int64_t r_end,
                          int16_t* pieces, float* scale, float* sum, int n_pieces) {
  OSSA_ASSERT(n_pieces == 1 || n_pieces == 3);
  const int64_t nb = cols / 32;
  for (int64_t r = r_begin; r < r_end; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      BlockPieces bp;
      split_block(x + r * cols + 32 * b, bp);
      if (n_pieces == 1)  // (a12 = 0: a0 alone, as amx_i8_split_rows' one piece)
        for (int i = 0; i < 4; ++i) bp.q[1][i] = bp.q[2][i] = _mm256_setzero_si256();
      int16_t* out = pieces + (r * nb + b) * 64;
      for (int i = 0; i < 4; i += 2) {
        const __m256i a12[2] = {
            _mm256_add_epi32(_mm256_slli_epi32(bp.q[1][i], 4), bp.q[2][i]),
            _mm256_add_epi32(_mm256_slli_epi32(bp.q[1][i + 1], 4), bp.q[2][i + 1])};
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * i),
                            pack_i16(bp.q[0][i], bp.q[0][i + 1]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 + 8 * i), pack_i16(a12[0], a12[1]));
      }
      scale[r * nb + b] = bp.mx / 127.0f * 0x1p-11f;  // amx_i8_split_rows' scale
      if (sum != nullptr) {                           // amx_i8_split_rows' sum (Q4_1's minimum)
        int32_t isum[2];
        block_isum16(bp, isum);
        sum[r * nb + b] = split_sum(isum, scale[r * nb + b]);
      }
    }
  }
}

void amx_i8_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                    float* y, int64_t ldy, int64_t o_begin, int64_t o_end) {
  // (the layout of Q4_0 / Q4_1 follows the model's activations: they are 8-bit blocks, one piece,
  // in every matmul of a model loaded with quantized_activations, the repack's flag)
  const bool i16 = amx_i8_takes_i16(w.type, x.i8_pieces == 1);
  // With VNNI every type here runs VPDPBUSD on 16 weight rows (the same results as the kernels
  // below)
#if defined(OSSA_HAVE_I8_VNNI)
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0 && x.i8 != nullptr);
  return vnni::vnni_rows(w, x, r_begin, r_end, y, ldy, o_begin, o_end);
#else
  OSSA_ASSERT(r_begin % 16 == 0 && o_begin % 16 == 0 &&
              (i16 ? x.i16 != nullptr : x.i8 != nullptr) && (!i16 || x.i8_sum != nullptr));
#endif
  OSSA_ASSERT(x.i8_pieces == 1 || x.i8_pieces == 3);
  const int kind = avx2_kind(w.type, i16);
  const Avx2Group* fns = x.i8_pieces == 1 ? k_avx2_groups<1>[kind] : k_avx2_groups<3>[kind];
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    const uint8_t* group = w.packed + (o0 / 16) * group_bytes(w.type, x.cols);
    for (int64_t r = r_begin; r < r_end; r += 4)
      fns[std::min<int64_t>(4, r_end - r) - 1](group, x, r, y, ldy, o0, o_end);
  }
}

#endif  // OSSA_HAVE_I8_AVX2

#if !defined(OSSA_HAVE_I8_VNNI) && !defined(OSSA_HAVE_I8_AVX2)
// No int8 kernels in this build: nothing is repacked for them (amx_available() is false).

void amx_i8_split_rows(const float*, int64_t, int64_t, int64_t, int8_t*, float*, float*, int32_t*,
                       int) {
  throw ModelError("amx int8 matmul: not built");
}
void amx_i8_compute(const TensorView&, const AmxActivations&, int64_t, int64_t, float*, int64_t,
                    int64_t, int64_t) {
  throw ModelError("amx int8 matmul: not built");
}

#endif

#if !defined(OSSA_HAVE_I8_AVX2)
void i8_avx2_split_rows16(const float*, int64_t, int64_t, int64_t, int16_t*, float*, float*, int) {
  throw ModelError("AVX2 int8 Q8_0 matmul: not built");
}
#endif

}  // namespace ossa
