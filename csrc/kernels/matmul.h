#pragma once
// y = x @ W^T for a weight matrix W [rows x cols] in any supported storage type.
//
// Batch invariance: every y[r, o] is computed by one thread with one fixed sequence of operations
// that depends only on W's row o, x's row r and cols, never on how many rows x has, on the thread
// count or on which tile the row falls in. Rows are tiled (several activation rows share each
// decoded weight block), but each row keeps its own accumulators in the same order as when computed
// alone.
//
// Quantized weights (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) are decoded block by block in registers, never
// expanded to f32 in memory. Three activation modes:
//  - AMX (default where the CPU has AMX): Q4_0/Q4_1/Q8_0/BF16 matrices repacked at load
//    (same integers, tile layout) times activations split into bf16 hi + lo, f32 accumulation
//    (matmul_amx.cpp); ~3e-6 of sum |x w| from the f32 result. Q4_K/Q6_K repacked for int8 tiles
//    times activations split into three int8 pieces, exact int32 sums (matmul_amx_i8.cpp: AMX-INT8
//    for batches, VNNI for a few rows, bitwise the same), Q2_K/Q3_K likewise with pieces per 64
//    values (matmul_amx_q23k.cpp), Q5_0/Q5_1/IQ4_NL/Q5_K/IQ4_XS as Q4_0 (matmul_amx_ext.cpp).
//    F16/F32 use the f32 kernels.
//  - f32 (without AMX, or OSSA_AMX=0, MatmulInput::q8 == nullptr): weights widened to f32, FMA with
//    f32 activations; matches a float32 product with the dequantized weights (what transformers
//    computes).
//  - 8-bit (q8 given): activations quantized to 8-bit blocks (BlockQ8, llama.cpp-style), each
//    32-element block reduced exactly in int32 (VNNI vpdpbusd, or AVX2 maddubs/madd giving the same
//    integers), blocks accumulated in f32 lanes. Faster for prefill, noisier.
// F32 and F16 weights always take f32 activations and accumulate in f32 with FMA.
// A fourth mode is chosen per model at load, not per call: dtype "bfloat16" (prepare_weights.h,
// TensorView::bf16_compute) rounds every matrix and its activations to bf16 and accumulates in f32:
// one AMX tile product per 16 x 16 x 32 step (matmul_amx.cpp), vLLM-CPU's numerics, about 2.4x the
// prefill throughput of the Q4 kernels (docs/performance.md); without AMX the f32 kernels on a BF16
// copy.
#include <cstdint>

#include "formats/tensor.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace ossa {

// compressed-tensors' activation quantization of n_rows rows (TensorView::act_quant's mode; scale
// the static one, or 0: per token), into out: each value q * s, or with row_scale q alone and each
// row's s in row_scale[r] (twin: quants.act_quantize).
void act_quantize_rows(const float* x, int64_t n_rows, int64_t cols, uint8_t mode, float scale,
                       float* out, float* row_scale = nullptr);

// Activations for one matmul: n_rows x cols f32 values, plus their 8-bit blocks when the weight is
// quantized (quantize_rows_q8 over the same rows; may be null otherwise).
struct MatmulInput {
  const float* f32 = nullptr;   // [n_rows, cols]
  const BlockQ8* q8 = nullptr;  // [n_rows, cols / 32]
  int64_t n_rows = 0;
  int64_t cols = 0;
  // Instead of f32, for weights that take_bf16_tiles(): the activations already rounded to bf16 in
  // the AMX tile layout (as matmul_gate_up_swiglu's out_tiles writes them; bf16_tiles_elems long).
  const uint16_t* bf16_tiles = nullptr;
  // 8-bit activations (a model loaded with quantized_activations): the takes_q8 matrices multiply
  // x rounded to blocks of 32: q8 (built only when a matrix of matmul_q8.cpp's kernels takes
  // part), or the int8 kernels' first piece alone.
  bool quantized = false;
};

// Whether w multiplies bf16 activation tiles on AMX (dtype bfloat16 on an AMX machine), so that the
// op producing its input may write MatmulInput::bf16_tiles directly.
bool takes_bf16_tiles(const TensorView& w);
// Whether a model loaded with quantized_activations rounds w's inputs to 8-bit blocks of 32 values
// (MatmulInput::q8): the quantized types of matmul_q8.cpp's kernels where not repacked, and the
// matrices repacked for the int8 kernels (matmul_amx_i8.cpp), which then multiply the first piece
// alone, the same rounding. The others keep their own inputs: Q2_K / Q3_K, float types, bfloat16
// compute, and the matrices repacked for bf16 tiles (an AMX machine's Q4_0 / Q4_1 / Q8_0 / Q5_0 /
// Q5_1 / IQ4_NL / Q5_K / IQ4_XS, where 8-bit blocks would take slower kernels).
bool takes_q8(const TensorView& w);
// Whether such a matrix multiplies MatmulInput::q8 (matmul_q8.cpp's kernels), not the int8 ones.
bool needs_q8_blocks(const TensorView& w);
// uint16 elements of the bf16 tiles of n_rows x cols activations.
int64_t bf16_tiles_elems(int64_t n_rows, int64_t cols);
// Row r (cols values, a multiple of 32) into those tiles, rounded as matmul_many rounds it.
void bf16_tiles_row(const float* row, int64_t cols, int64_t r, uint16_t* tiles);

// y[r * ldy + o] = sum_k W[o, k] * x[r, k] for r < n_rows, o < w.rows. Parallel over output rows
// (kernels/parallel.h). Throws ModelError if w's type is unsupported or cols is not a multiple of
// its block.
void matmul(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy);

// Several weights sharing the same activations (Q/K/V, gate/up) as one parallel job.
struct MatmulTarget {
  const TensorView* w = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  // y += x @ W^T (one f32 addition per element, as add_row) instead of y = x @ W^T; only for
  // weights that take_bf16_tiles(), whose kernel adds in its epilogue (the residual connections).
  bool accumulate = false;
};
void matmul_many(const MatmulTarget* targets, int n_targets, const MatmulInput& x);

// The feed-forward's first half in one pass: out[r * ldo + o] = swiglu(gate[r, o], up[r, o]) with
// gate = x @ W_gate^T and up = x @ W_up^T (same shapes). Each work item computes a block of both
// products into thread-local scratch and applies swiglu_row (kernels/ops.h) to it, so the two
// products are never written out whole; bitwise equal to matmul_many followed by swiglu_row on each
// row (items start at multiples of 16 columns, where swiglu_row's vector lanes do).
//
// out_tiles (only when both weights take_bf16_tiles(), which makes every item 32 columns wide): the
// result is written as the next matmul's bf16 activation tiles instead of f32 rows (out unused),
// the same values matmul_many would round them to.
// glu: the activation (kernels/ops.h glu_row); SwiGLU unless told.
void matmul_gate_up_swiglu(const TensorView& gate, const TensorView& up, const MatmulInput& x,
                           float* out, int64_t ldo, uint16_t* out_tiles = nullptr,
                           Glu glu = Glu::Silu);

// dtype "bfloat16"'s weight copies (bf16_compute_bytes, make_bf16_compute) and the AMX repacks are
// made at load by kernels/prepare_weights.h.

// Whether the AMX kernels (matmul_amx.cpp) can run here: compiled in and granted by the OS. A
// weight goes through them when it was repacked for them at load (TensorView::packed), which a
// model's load option decides (load_model's amx, default amx_default()).
bool amx_available();
// The load default: amx_available(), unless OSSA_AMX=0 is in the environment.
bool amx_default();
// Whether load_model repacks weights by default (its amx option): for the AMX kernels, or where
// there is no AMX, Q4_K and Q6_K for the AVX2 int8 kernels (the AMX / VNNI numerics); OSSA_AMX=0
// turns both off (every matrix on the f32 kernels).
bool repack_default();

}  // namespace ossa
