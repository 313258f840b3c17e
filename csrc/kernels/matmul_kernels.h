#pragma once
// Internal to the matmul: the per-ISA tile kernels that matmul.cpp schedules.
//
// A tile kernel computes a block of dot products: `mo` weight rows times `rows` activation rows,
//
//   out[o * rows + r] = sum_k W[o, k] * x[r, k]      o < mo, r < rows
//
// and each of those sums is computed exactly as if the tile were 1 x 1 (one accumulator chain per
// output element, in column order, then one fixed horizontal sum), which is what makes the matmul
// batch invariant whatever tile a row lands in.
#include <cstdint>

#include "formats/tensor.h"
#include "kernels/quant.h"
#include "kernels/vec_math.h"  // (hsum8, hmax8)

#if defined(__AVX2__)
// GCC 12 flags the _mm512_undefined_* inside the intrinsic headers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace ossa {

#if defined(__AVX2__)
// One line of a weight stream that a kernel reads soon, asked for into L2 (prefetcht1): the decode
// kernels' software prefetch. Into L1 (prefetcht0, as before) a decode step ran 15-35% slower on
// the Zen 4 VM (1B Q4_K_M: 38-41 -> 48-59 tok/s; docs/performance-kquant.md, seventeenth pass),
// likely because the L1's few miss buffers fill with prefetches that the loads behind them then
// wait on, where L2 keeps far more requests in flight and the L1 still gets each line from L2 in
// time. (The AMX-only decode paths keep prefetcht0: not measured.)
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
#endif

// f32 activations (any weight type): w_rows[mo], x_rows[rows], cols elements.
using F32TileFn = void (*)(const uint8_t* const* w_rows, const float* const* x_rows, int64_t cols,
                           float* out);
// A weight row's exact f32 values, as the build's tile kernel forms them in registers (cols
// elements, a multiple of 32).
using F32DecodeFn = void (*)(const uint8_t* w_row, int64_t cols, float* out);
// The columns [k0, k1) of fn's product (k0 a multiple of 16, k1 one too or cols), its mo x rows
// accumulators of 16 lanes kept in acc between calls (zeroed before the first); with out, the last
// call also finishes them as fn does. Calls over consecutive chunks give fn's output bitwise (the
// same FMAs per element in the same order), with each chunk's activations reused from L1 by every
// weight row (the float types, AVX-512).
using F32ChunkFn = void (*)(const uint8_t* const* w_rows, const float* const* x_rows, int64_t k0,
                            int64_t k1, int64_t cols, float* acc, float* out);
struct F32Tile {
  F32TileFn fn = nullptr;
  int mo = 1;  // weight rows per call
  // AVX2 builds, quantized types: the weights fn multiplies, decoded once into memory, so that a
  // work item of many activation rows decodes each weight row once (f32_decoded_rows) instead of
  // once per tile. fn and f32_decoded_rows on the decoded rows give bitwise the same output (the
  // same FMAs per element in the same order). Null where the tiles decode in registers only.
  F32DecodeFn decode = nullptr;
  F32ChunkFn chunk = nullptr;  // null where the build has none for the type
};
// Largest `rows` a tile takes on this build, and the kernel for 1 <= rows <= f32_tile_max_rows().
int f32_tile_max_rows();
F32Tile f32_tile(DType type, int rows);
// AVX2: out[r * ldo + o] = the dot product of decoded weight row o (w + o * ldw) and x_rows[r],
// o < mo, r < rows, in float_tile's order (8 lanes per column step, columns in order, hsum8).
void f32_decoded_rows(const float* w, int64_t ldw, int mo, const float* const* x_rows, int rows,
                      int64_t cols, float* out, int64_t ldo);

// The types of the Q2_K..Q5_K_M and IQ4 files (f32 activations only; matmul_tile.h):
// Q5_0/Q5_1/Q5_K (matmul_q5.cpp), Q2_K/Q3_K (matmul_q23k.cpp), IQ4_NL/IQ4_XS (matmul_iq4.cpp).
F32Tile f32_tile_q5(DType type, int rows);
F32Tile f32_tile_q23k(DType type, int rows);
F32Tile f32_tile_iq4(DType type, int rows);
// IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS / IQ3_S / IQ1_S / IQ1_M (matmul_iq23.cpp).
F32Tile f32_tile_iq23(DType type, int rows);
// Their 8-bit activation kernels (quantized_activations), as q8_dot's, for 1, 4 or 8 rows (null for
// other types).
using Q8DotFn = void (*)(const uint8_t* w_row, const BlockQ8* const* x_rows, int64_t n_blocks,
                         float* out);
Q8DotFn q8_dot_iq23(DType type, int rows);
// A folder's FP8 (E4M3) matrices with their block scales (matmul_fp8.cpp).
F32Tile f32_tile_fp8(int rows);
// On AVX-512, Q5_K reads the rows kquant_prepare_row lays out for Q4_K; IQ4_XS and Q2_K / Q3_K read
// rows laid out by these (called through kquant_prepare_row; q23k adds the sums of each 16 values).
void iq4xs_prepare_row(const float* x, int64_t cols, float* out);
void q23k_prepare_row(const float* x, int64_t cols, float* out);

// Q4_K and Q6_K on AVX-512 (matmul_kquant.cpp): f32_tile returns kernels that read each activation
// row laid out by kquant_prepare_row (kquant_prepared_floats(t, cols) floats; 0 where this build's
// kernels read plain rows), once per matmul call.
int64_t kquant_prepared_floats(DType t, int64_t cols);
void kquant_prepare_row(DType t, const float* x, int64_t cols, float* out);
F32Tile kquant_tile(DType t, int rows);

// BitNet's ternary matrices (DType::BITNET, matmul_bitnet.cpp): each activation row quantized once
// per matmul call to int8 with its own scale (bitnet_prepare_row: k_bitnet_header floats holding
// the scale and the int32 sum of the codes, then the cols int8 values), and y[r * ldy + o] for
// output rows [o_begin, o_end) of activation rows [r_begin, r_end) from those prepared rows (stride
// floats apart). The storage: rows in groups of four (rows a multiple of 4), group g's bytes from
// g * cols on; per 64 columns 64 bytes, 16 for each of the group's rows in turn, byte i of those
// holding columns i, 16 + i, 32 + i and 48 + i in bits 0-1, 2-3, 4-5 and 6-7 as w + 1: a tile of
// the group's four rows reads one 64-byte line per 64 columns, one stream, not four.
// bitnet_pack_row stores row `row` (cols ternary values, a multiple of 64) into such storage;
// bitnet_weight reads value (row, col) back; bitnet_byte is the byte holding it.
constexpr int64_t k_bitnet_header = 16;
int64_t bitnet_prepared_floats(int64_t cols);
void bitnet_prepare_row(const float* x, int64_t cols, float* out);
void bitnet_rows(const TensorView& w, const float* prepared, int64_t stride, int64_t r_begin,
                 int64_t r_end, float* y, int64_t ldy, int64_t o_begin, int64_t o_end);
void bitnet_pack_row(const int8_t* w, int64_t row, int64_t cols, uint8_t* data);
int8_t bitnet_weight(const uint8_t* data, int64_t row, int64_t col, int64_t cols);

// 8-bit activations (quantized weights only): one weight row, `rows` (1 or 4) activation rows
// (Q8DotFn above).
Q8DotFn q8_dot(DType type, int rows);

// AMX (matmul_amx.cpp): bf16 tiles with f32 accumulation, activations split into hi + lo bf16.
// amx_available(): compiled in (a native build on an AMX CPU) and the OS granted the tile state.
bool amx_available();
// Without AMX, dtype bfloat16's weights on AVX512_BF16's VDPBF16PS (matmul_amx.cpp, bf16dp): the
// same bf16 tile layout as AMX's (amx_repack_bf16_rounded, activations amx_round_rows), two bf16
// products per f32 lane an instruction, for every row count. False in builds without AVX512_BF16
// (or with AMX, whose tiles take that layout instead).
bool bf16dp_available();

// Repacked Q4_0/Q4_1/Q8_0/BF16 weights (TensorView::packed, built at load by amx_repack_groups over
// groups of 16 rows) multiply activations split into bf16 hi/lo tiles plus f32 block sums; Q4_K
// and Q6_K (also repacked by amx_repack_groups) the int8 pieces below.
struct AmxActivations {
  // A tiles: for 16-row block mb and 32-column step b, a hi tile then a lo tile of 16 rows x 32
  // bf16: tiles[((mb * steps + b) * 2 + part) * 512 + row * 32 + j]; for bfloat16 compute only
  // the rounded tile: tiles[(mb * steps + b) * 512 + row * 32 + j] (amx_round_rows).
  const uint16_t* tiles = nullptr;
  const float* block_sum = nullptr;  // [rows][cols / 32]; null for bfloat16 compute
  int64_t n_rows = 0;
  int64_t cols = 0;
  // Q4_K, Q6_K (AVX2: also Q4_0, Q4_1; matmul_amx_i8.cpp): the rows as three int8 pieces per 32
  // values, per 16-row block mb and step b 1,536 bytes at i8 + (mb * steps + b) * 1536: the a0 tile
  // (16 rows x 32 bytes), then the [a1, a2] tile (16 rows x 64); the scale and the sum of each 32
  // values: i8_scale / i8_sum[row * steps + b]. Null where no such matrix takes part.
  const int8_t* i8 = nullptr;
  // 3, or 1 for a model loaded with quantized_activations (i8 holds a0 alone, a1 = a2 = 0: the
  // VNNI loops and the AMX tile kernels skip those products).
  int i8_pieces = 3;
  const float* i8_scale = nullptr;
  const float* i8_sum = nullptr;
  // Q6_K and Q8_0 (VNNI): per 16 values, the sum of the pieces' integers 2^11 a0 + 16 a1 + a2, [row
  // * 2 steps
  // + j].
  const int32_t* i8_isum16 = nullptr;
  // Q8_0 on AVX2 without VNNI (matmul_amx_i8.cpp, i8_avx2_split_rows16): the same pieces of each 32
  // values as int16, a0 then a12 = 16 a1 + a2, at i16 + (row * steps + b) * 64; the scale is
  // i8_scale's.
  const int16_t* i16 = nullptr;
  // Q2_K, Q3_K (matmul_amx_q23k.cpp): the same pieces per 64 values, per 16-row block mb and
  // 64-column step b 3,072 bytes at q23k + (mb * steps64 + b) * 3072 (the a0, a1, a2 tiles, 16 rows
  // x 64 bytes each); q23k_scale[row * steps64 + b] the step's scale, q23k_xs[row * cols / 16 + g]
  // the pieces' integer sum over 16 values times it. Null where no Q2_K / Q3_K matrix takes part.
  const int8_t* q23k = nullptr;
  const float* q23k_scale = nullptr;
  const float* q23k_xs = nullptr;
};
bool amx_repackable(DType t);
size_t amx_repacked_bytes(const TensorView& w);  // 0 if w cannot be repacked
// quantized_activations: the model's (Q4_0 / Q4_1 on AVX2 take another layout: amx_i8_takes_i16).
void amx_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end,
                       bool quantized_activations = false);
// bfloat16 compute (TensorView::bf16_compute): W dequantized and rounded to bf16 (ties to even) in
// the BF16 tile layout, amx_repacked_bytes of a BF16 matrix of the same shape.
void amx_repack_bf16_rounded(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end);
void amx_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, uint16_t* tiles,
                    float* block_sum);
// bfloat16 compute: rows rounded to bf16 (ties to even), one tile per 16-row block and 32-column
// step: tiles[(mb * steps + b) * 512 + row * 32 + j].
void amx_round_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, uint16_t* tiles);
// 32 values rounded the same way, into one 32-element row of a tile.
void round_bf16_32(const float* x, uint16_t* out);
// Rows [r_begin, r_end) (r_begin a multiple of 16) x weight rows [o_begin, o_end)
// (o_begin a multiple of 16).
// accumulate (bfloat16 compute only): y += the product instead of y = it.
void amx_compute_packed(const TensorView& w, const AmxActivations& x, int64_t r_begin,
                        int64_t r_end, float* y, int64_t ldy, int64_t o_begin, int64_t o_end,
                        bool accumulate = false);

// Q4_K and Q6_K on AMX-INT8 / AVX512-VNNI (matmul_amx_i8.cpp): exact int32 products of the quants
// with activations split into three int8 pieces, the same sums from the tile kernel (16 rows at a
// time) and the VNNI one (a few rows). amx_repacked_bytes / amx_repack_groups / amx_compute_packed
// dispatch Q4_K and Q6_K here; amx_i8_repacked_bytes is 0 where this build has no such kernels.
bool amx_i8_type(DType t);
// Without AMX: the same integers and f32 epilogue from the AVX-512 VNNI loops (where the CPU has
// VNNI) or AVX2 (VPMADDUBSW), for every row count; amx_i8_repacked_bytes is then non-zero and the
// matmul dispatches the repacked matrices here. There (only: AMX machines keep them on the bf16
// tiles) amx_i8_type is true for Q8_0 as well (with VNNI it multiplies the int8 pieces as Q6_K
// does, quants stored as q + 128; on AVX2 the same pieces as int16, a0 and 16 a1 + a2,
// i8_avx2_split_rows16, by VPMADDWD), for Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS
// with VNNI (the VNNI loop) and for Q5_0 / Q5_1 / Q5_K and Q4_0 / Q4_1 with AVX2 only (the int8
// pieces as Q4_K).
bool i8_avx2_available();
// Whether the kernels of type t read the int16 pieces (i8_avx2_split_rows16) instead of the int8
// ones, for activations of one piece (quantized_activations) or three: Q8_0, IQ4_NL, IQ4_XS and,
// with three pieces, Q4_0 / Q4_1, on AVX2 without VNNI (their layout follows: a model loaded with
// quantized_activations repacks Q4_0 / Q4_1 for the one-piece kernels).
bool amx_i8_takes_i16(DType t, bool quantized_activations);
// Whether this build has the AVX-512 VNNI loops (Q4_K / Q6_K and Q2_K / Q3_K, with or without AMX;
// without AMX also the types above).
bool i8_vnni_available();
size_t amx_i8_repacked_bytes(const TensorView& w);
void amx_i8_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end,
                          bool quantized_activations = false);
// pieces 3 (exact) or 1 (a0 alone; a1 = a2 = 0, and the sums are of a0's integers).
void amx_i8_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end, int8_t* tiles,
                       float* scale, float* sum, int32_t* isum16, int pieces = 3);
// sum (nullable): the blocks' split sums, as amx_i8_split_rows' (Q4_1's minimum).
void i8_avx2_split_rows16(const float* x, int64_t cols, int64_t r_begin, int64_t r_end,
                          int16_t* pieces, float* scale, float* sum, int n_pieces = 3);
void amx_i8_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                    float* y, int64_t ldy, int64_t o_begin, int64_t o_end);
// Q2_K and Q3_K on AMX-INT8 / AVX512-VNNI (matmul_amx_q23k.cpp): Q4_K's scheme with int8 pieces
// per 64 values (amx_q23k_split_rows), the scale folded into the quant; repacked at about the
// file's size. amx_repacked_bytes / amx_repack_groups / amx_compute_packed dispatch them here.
bool amx_q23k_type(DType t);
void amx_q23k_split_rows(const float* x, int64_t cols, int64_t r_begin, int64_t r_end,
                         int8_t* tiles, float* scale, float* xs);
size_t amx_q23k_repacked_bytes(const TensorView& w);
void amx_q23k_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end);
void amx_q23k_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                      float* y, int64_t ldy, int64_t o_begin, int64_t o_end);
// Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS on AMX (matmul_amx_ext.cpp): the bf16 hi + lo scheme of the
// types above, weights repacked at about the file's size; amx_repacked_bytes / amx_repack_groups /
// amx_compute_packed dispatch these types there (amx_ext_repacked_bytes is 0 without AMX).
bool amx_ext_type(DType t);
size_t amx_ext_repacked_bytes(const TensorView& w);
void amx_ext_repack_groups(const TensorView& w, uint8_t* out, int64_t g_begin, int64_t g_end);
void amx_ext_compute(const TensorView& w, const AmxActivations& x, int64_t r_begin, int64_t r_end,
                     float* y, int64_t ldy, int64_t o_begin, int64_t o_end);

// Block b (32 elements) of a quantized weight row as integers, the scale of each group of 4
// elements (scale[l] for elements 4l..4l+3) and the minimum added to every weight (matmul_q8.cpp;
// the scalar kernels and the AMX repack use it).
void decode_block_scalar(DType t, const uint8_t* row, int64_t b, int* w, float* scale, float& wmin);

#if defined(__AVX2__)
// 16 packed bytes -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  return _mm256_set_m128i(hi, lo);
}
#endif

}  // namespace ossa
