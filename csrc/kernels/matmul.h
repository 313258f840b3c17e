#pragma once
// y = x @ W^T for a weight matrix W [rows x cols] in any supported storage type.
//
// Batch invariance: every y[r, o] is computed by one thread with one fixed sequence of operations
// that depends only on W's row o, x's row r and cols, never on how many rows x has, on the thread
// count or on which tile the row falls in. Rows are tiled (several activation rows share each decoded
// weight block), but each row keeps its own accumulators in the same order as when computed alone.
//
// Quantized weights (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) are decoded block by block in registers, never
// expanded to f32 in memory. Three activation modes:
//  - AMX (default where the CPU has AMX-BF16): Q4_0/Q4_1/Q4_K/Q8_0/BF16 matrices repacked at load
//    (same integers, tile layout) times activations split into bf16 hi + lo, f32 accumulation
//    (matmul_amx.cpp); ~3e-6 of sum |x w| from the f32 result. Other types use the f32 kernels.
//  - f32 (without AMX, or OSSA_AMX=0, MatmulInput::q8 == nullptr): weights widened to f32, FMA with
//    f32 activations; matches a float32 product with the dequantized weights (what transformers computes).
//  - 8-bit (q8 given): activations quantized to 8-bit blocks (BlockQ8, llama.cpp-style), each
//    32-element block reduced exactly in int32 (VNNI vpdpbusd, or AVX2 maddubs/madd giving the same
//    integers), blocks accumulated in f32 lanes. Faster for prefill, noisier.
// F32 and F16 weights always take f32 activations and accumulate in f32 with FMA.
#include <cstdint>

#include "kernels/quant.h"
#include "model/tensor.h"

namespace ossa {

// Activations for one matmul: n_rows x cols f32 values, plus their 8-bit blocks when the weight is
// quantized (quantize_rows_q8 over the same rows; may be null otherwise).
struct MatmulInput {
  const float* f32 = nullptr;   // [n_rows, cols]
  const BlockQ8* q8 = nullptr;  // [n_rows, cols / 32]
  int64_t n_rows = 0;
  int64_t cols = 0;
};

// y[r * ldy + o] = sum_k W[o, k] * x[r, k] for r < n_rows, o < w.rows. Parallel over output rows
// (kernels/parallel.h). Throws ModelError if w's type is unsupported or cols is not a multiple of
// its block.
void matmul(const TensorView& w, const MatmulInput& x, float* y, int64_t ldy);

// Several weights sharing the same activations (Q/K/V, gate/up) as one parallel job.
struct MatmulTarget {
  const TensorView* w = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
};
void matmul_many(const MatmulTarget* targets, int n_targets, const MatmulInput& x);

// The feed-forward's first half in one pass: out[r * ldo + o] = swiglu(gate[r, o], up[r, o]) with
// gate = x @ W_gate^T and up = x @ W_up^T (same shapes). Each work item computes a block of both
// products into thread-local scratch and applies swiglu_row (kernels/ops.h) to it, so the two
// products are never written out whole; bitwise equal to matmul_many followed by swiglu_row on each
// row (items start at multiples of 16 columns, where swiglu_row's vector lanes do).
void matmul_gate_up_swiglu(const TensorView& gate, const TensorView& up, const MatmulInput& x, float* out,
                           int64_t ldo);

// Process-wide: use the AMX kernels (matmul_amx.cpp) for the weights repacked for them, when the CPU
// and OS allow (default on; OSSA_AMX=0 in the environment turns it off; models loaded while it is off
// are not repacked and keep the f32 kernels). Returns whether AMX is in use after the call.
bool set_amx(bool on);
bool amx_available();
bool amx_enabled();

// Process-wide activation mode for quantized weights used by the forward pass (default false: f32).
void set_quantized_activations(bool on);
bool quantized_activations();

}  // namespace ossa
