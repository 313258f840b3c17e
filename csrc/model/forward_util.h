#pragma once
// Pieces of the forward pass shared by the architecture files (llama.cpp, gemma3.cpp): per-token
// loops, matmul inputs, norms feeding matmuls, residual additions, the attention call and the
// output head. Each keeps the batch invariance of the kernels it calls: a row's result depends on
// that row.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/parallel.h"
#include "model/batch.h"
#include "model/llama.h"

namespace ossa::fwd {

// OSSA_PROFILE=1 in the environment: wall time per op of the forward pass, summed over the process
// and printed to stderr at exit (a developer tool; off by default, then each lap is one branch).
enum Op { kEmbed, kNorm, kQkv, kRope, kAttention, kWo, kGateUp, kDown, kOutput, kNumOps };
bool profiling();
void add_op_time(Op op, int64_t ns);
void count_step(int n_tokens);

struct Laps {
  bool on = profiling();
  std::chrono::steady_clock::time_point last =
      on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  void lap(Op op) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    add_op_time(op, std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count());
    last = now;
  }
};

// f(t) for each token t < n: inline for one token, else spread over the pool in runs of `grain`.
template <class F>
void per_token(int n, int threads, F&& f, int64_t grain = 4) {
  if (n == 1) return f(0);
  parallel_for(n, grain, threads, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) f(static_cast<int>(t));
  });
}

// Activations x[n, cols] as the matmul input of a set of weights sharing them: quantized to 8-bit
// blocks into q8 (n * cols / 32 blocks) once if quantized_activations and any of them is quantized.
MatmulInput matmul_input(bool quantized_activations, const float* x, int64_t n, int64_t cols,
                         BlockQ8* q8, int threads,
                         std::initializer_list<const TensorView*> weights);

// matmul_input for the dense layers: the model's own switch, quantized into s.xq.
MatmulInput prepare(ForwardState& s, const float* x, int64_t n, int64_t cols, int threads,
                    std::initializer_list<const TensorView*> weights);

// x[t] normalised for the matmuls of `weights`: as f32 rows in s.h, or (dtype bfloat16 on AMX)
// straight into s.norm_tiles, skipping the f32 rows and the matmul's own rounding pass.
// norm_w null (OLMo 2's sublayers): x itself. src: the rows to normalise (default s.x).
MatmulInput norm_for(ForwardState& s, const float* norm_w, int n, int threads,
                     std::initializer_list<const TensorView*> weights, const float* src = nullptr,
                     const float* norm_b = nullptr);

// x += in @ W^T (the residual connection): added in the matmul's epilogue where the kernel can
// (dtype bfloat16 on AMX), else through s.tmp and add_row; the same f32 additions either way. With
// a bias (gpt-oss's attention output): x += (in @ W^T + bias), through s.tmp; with a post norm
// (OLMo 2): x += rmsnorm(in @ W^T, post_norm).
void residual(ForwardState& s, const TensorView& w, const MatmulInput& in, int n, int threads,
              const TensorView& bias = {}, const TensorView& post_norm = {});

// RoPE cos/sin of a token at `position` (rope_cos_sin over the rotated dimensions), from the global
// table: LongRoPE's long factors from original_max_position on, its short ones before (a fixed
// choice per position, so a token's rotation never depends on the batch or the sequence's length),
// times LongRoPE's attention factor.
void token_cos_sin(const ForwardState& s, int32_t position, float* cs);

// Rotates n_heads heads of one token in place: their first rotated (config.rope_dim) dimensions.
void rope_heads(float* x, int n_heads, const ModelConfig& c, const float* cs);

// The model's norm of one row: LayerNorm (Cohere) or RMSNorm.
inline void norm_row(const ModelConfig& c, const float* x, const float* w, int64_t n, float* out,
                     const float* bias = nullptr) {
  if (c.layer_norm)
    layernorm_row(x, w, n, c.rms_eps, out);
  else
    rmsnorm_row(x, w, n, c.rms_eps, out);
  if (bias != nullptr)  // (StarCoder2's LayerNorm bias)
    for (int64_t i = 0; i < n; ++i) out[i] += bias[i];
}

// The attention temperature's factor at a position (ModelConfig::attn_temp_scale; 1 when off), in
// double as llama.cpp computes it, rounded once to float.
inline float attn_temp_factor(const ModelConfig& c, int32_t position) {
  if (c.attn_temp_scale <= 0.0f || c.attn_temp_length <= 0) return 1.0f;
  const double k = std::floor((static_cast<double>(position) + c.attn_temp_offset) /
                              c.attn_temp_length);  // (Llama 4 counts from 1)
  return static_cast<float>(1.0 + static_cast<double>(c.attn_temp_scale) * std::log(1.0 + k));
}
// x[0 .. n) times the factor of `position` (nothing when it is 1).
inline void scale_by_temperature(const ModelConfig& c, int32_t position, float* x, int64_t n) {
  const float f = attn_temp_factor(c, position);
  if (f != 1.0f)
    for (int64_t e = 0; e < n; ++e) x[e] *= f;
}

// x += y, or x += y * scale with scale > 0 (Granite's residual_multiplier, as transformers rounds
// it: the product first): a sublayer's output joining the residual stream.
void add_residual(float* x, const float* y, int64_t n, float scale);

// y += b, when the bias b exists.
void add_bias(float* y, const TensorView& b, int64_t n);

// A tensor's data as f32 (norms, biases and the other tensors kept in f32).
inline const float* f32(const TensorView& v) { return reinterpret_cast<const float*>(v.data); }

// x += norm(s.tmp): a sublayer's output, normalised by `post_norm` (the Gemmas; Gemma 1 has none:
// nullptr), into the residual stream.
void add_normed(ForwardState& s, const float* post_norm, int n, int threads);

// The first half of layer `layer`'s attention, for the batch's n tokens: q, k, v = norm(x) @
// (wq, wk, wv)^T (one matmul_many over the normalised rows), plus the biases where the model has
// them; where it has q/k norms (Qwen3, Gemma 3) each head of q and k RMS-normalised; q and k
// rotated by the tokens' rows of `cos_sin` ([n, head_dim]: s.cos_sin, or Gemma 3's sliding layers'
// table); k and v stored in the layer's cache at the batch's slots. Laps kNorm, kQkv and kRope.
void attention_qkv(ForwardState& s, const Batch& batch, int layer, const float* cos_sin,
                   int threads, Laps& laps);

// s.token_seq from the batch's sequence starts.
void fill_token_seq(ForwardState& s, const Batch& batch);

// The arguments of paged_attention over layer `layer`'s cache for s.q -> s.attn (default scale, no
// window, no soft-capping; the caller sets those).
AttentionArgs attention_args(const ForwardState& s, const Batch& batch, int layer, int threads);

// logits[i] = output(norm(x[logits_rows[i]])) for the batch's logits rows, then the config's
// final soft-cap (Gemma 2/3: cap * tanh(l / cap)) or division by logit_scale (Granite).
void output_logits(ForwardState& s, const Batch& batch, int threads, float* logits);

// x = the token's embedding row, times the config's embd_scale (Gemma: sqrt(n_embd); Granite's
// embedding_multiplier) when it is set; plus the learned position row of `position` (GPT-2,
// StarCoder: config.pos_embd; check_positions first) and through the embeddings' LayerNorm
// (BLOOM: config.embd_norm) where the model has them.
void embed_row(const ForwardState& s, int32_t token, float* x, int32_t position = 0);

// Throws InputError when a token's position is beyond a learned position table (GPT-2's
// n_positions): the engine keeps max_model_len within it, so this guards direct callers.
void check_positions(const ModelConfig& c, const ModelWeights& w, const Batch& batch);

}  // namespace ossa::fwd
