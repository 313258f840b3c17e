#pragma once
// The weights of a Llama-family model, as views into the file(s) it came from.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "model/config.h"
#include "model/moe.h"

namespace ossa {

// Shapes (rows x cols), with q = n_head*head_dim, kv = n_head_kv*head_dim:
//   wq q x n_embd, wk/wv kv x n_embd, wo n_embd x q, bq/bk/bv 1 x (q|kv),
//   q_norm/k_norm 1 x head_dim, w_gate/w_up n_ff x n_embd, w_down n_embd x n_ff,
//   attn_norm/ffn_norm 1 x n_embd. Optional ones are empty().
// Gemma 3 also normalises each sublayer's output before the residual addition (post_attn_norm,
// post_ffn_norm, 1 x n_embd); its norm weights are stored as the factor applied (HF's 1 + w).
struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm;
  TensorView ffn_norm, w_gate, w_up, w_down;  // w_gate/w_up/w_down empty in a MoE layer
  MoeWeights moe;                             // a MoE layer's router and experts (model/moe.h)
  TensorView post_attn_norm, post_ffn_norm;
  // BitNet: RMSNorms of the attention's output before wo [Q] and of the MLP's product before
  // w_down [n_ff] (ModelConfig::sub_norms).
  TensorView attn_sub_norm, ffn_sub_norm;
  TensorView bo;     // 1 x n_embd: the attention output's bias (gpt-oss); empty otherwise
  TensorView sinks;  // 1 x n_head: the attention sinks (gpt-oss); empty otherwise
  TensorView wg;     // n_head*head_dim x n_embd: the attention's own gate projection (AFMoE)
  // DeepSeek's latent attention (config.mla, model/mla.cpp), with H = n_head, R = qk_rope,
  // N = qk_nope, V = v_head_dim, C = kv_lora_rank: wq (H*(N+R) x n_embd) or wq_a (q_lora x n_embd),
  // q_a_norm (1 x q_lora), wq_b (H*(N+R) x q_lora); wkv_a ((C+R) x n_embd), kv_a_norm (1 x C);
  // per head, wk_b[h] (C x N: k_nope = c @ wk_b[h], applied to q instead) and wv_b[h] (V x C);
  // wo (n_embd x H*V).
  TensorView wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm;
  std::vector<TensorView> wk_b, wv_b;
  // Qwen3.5's gated delta-net layers (config.delta; loader.cpp build_delta_weights has the
  // shapes), in place of wq ... wo. Its attention layers' wq has 2 * n_head * head_dim rows
  // ([query | gate] per head).
  TensorView ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_conv, ssm_dt, ssm_a, ssm_norm, ssm_out;
  TensorView ssm_conv_t;  // ssm_conv transposed (conv_kernel x C, F32): the taps by channel
  // Mamba-2 layers (config.ssm; loader.cpp build_mamba2_weights has the shapes) use ssm_conv(_t),
  // ssm_dt, ssm_a, ssm_norm and ssm_out as well, with ssm_in ([z | x | B | C | dt] x n_embd), the
  // convolution's bias ssm_conv_b and the skip ssm_d (1 x n_heads).
  TensorView ssm_in, ssm_conv_b, ssm_d;
  // Mamba-1 layers (config.mamba1; loader.cpp build_mamba1_weights) use ssm_in ([x | z]),
  // ssm_conv(_t, _b), ssm_dt (1 x d_inner: dt_proj's bias), ssm_a (d_inner x d_state: -exp(A_log)),
  // ssm_d and ssm_out, with ssm_x (x_proj: [dt_low | B | C] x d_inner) and ssm_dt_w (dt_proj:
  // d_inner x dt_rank).
  TensorView ssm_x, ssm_dt_w;
  TensorView ssm_dt_norm, ssm_b_norm, ssm_c_norm;  // (Jamba's weighted norms of dt_low, B and C)
  // LFM2's short-convolution layers (config.conv), in place of wq ... wo: sc_in (3 n_embd x
  // n_embd: B, C, x), sc_conv_t (kernel x n_embd, F32: the taps by channel), sc_out (n_embd x
  // n_embd).
  TensorView sc_in, sc_conv_t, sc_out;
  // Gemma 4 (model/gemma4.cpp), with P = config.ple_dim: the per-layer branch's ple_gate (P x
  // n_embd), ple_proj (n_embd x P) and ple_norm (1 x n_embd); out_scale (1 x 1): the layer's
  // output multiplier (layer_scalar); empty when absent. A layer without wv (k = v) takes V from
  // wk's rows.
  TensorView ple_gate, ple_proj, ple_norm, out_scale;
  // Gemma 4's MoE layers (moe beside the dense MLP): the experts' input norm (ffn_norm_2), the
  // norms of the MLP's and the experts' outputs (post_ffn_norm_1 / _2), the router's input scale
  // (router_scale); all 1 x n_embd.
  TensorView ffn_norm_2, post_ffn_norm_1, post_ffn_norm_2, router_scale;
  // Gemma 3n's AltUp (A = config.altup streams): the router (A x n_embd) and its input norm (1 x
  // n_embd), the prediction (A*A x A) and correction (A x A) coefficients' maps, the corrected
  // active stream's scale (1 x n_embd); LAuReL (R = config.laurel_rank): laurel_l (R x n_embd),
  // laurel_r (n_embd x R), laurel_norm (1 x n_embd). All F32 but the two LAuReL matrices.
  TensorView altup_router, altup_router_norm, altup_predict, altup_correct, altup_correct_scale;
  TensorView laurel_l, laurel_r, laurel_norm;
  // StarCoder2 (config.norm_bias / ffn_bias): the norms' biases and the MLP's (1 x n_embd, 1 x
  // n_ff, 1 x n_embd).
  TensorView attn_norm_b, ffn_norm_b, b_up, b_down;
};

struct ModelWeights {
  TensorView tok_embd;     // n_vocab x n_embd
  TensorView output_norm;  // 1 x n_embd
  TensorView output;       // n_vocab x n_embd; equals tok_embd when tied
  std::vector<LayerWeights> layers;
  // Optional, 1 x head_dim/2 F32: llama.cpp's per-frequency RoPE divisors (theta_i /
  // rope_freqs[i]), written by llama.cpp's converter for Llama-3 rope scaling. Present only in such
  // GGUF files; when config.rope_scaling.type is "llama3" the same scaling is described by the
  // config as well.
  TensorView rope_freqs;
  // Gemma 4's per-layer embeddings (config.ple_dim = P > 0): the token table (>= n_vocab rows x
  // n_layer * P), the embeddings' projection (n_layer * P x n_embd) and its norm (1 x P).
  TensorView ple_tok_embd, ple_model_proj, ple_proj_norm;
  // Gemma 3n: the projections of the embeddings into AltUp's other streams and back (A - 1 each,
  // n_embd x n_embd).
  std::vector<TensorView> altup_proj, altup_unembd;
  TensorView output_norm_b;  // (StarCoder2: the final LayerNorm's bias)
  // BLOOM: the embeddings' LayerNorm (1 x n_embd each); GPT-2 / StarCoder: the learned position
  // table (n_ctx_train x n_embd).
  TensorView tok_embd_norm, tok_embd_norm_b, pos_embd;
  TensorView output_b;  // (Phi-2: the output matrix's bias, 1 x n_vocab)
};

// Every tensor of the model file(s) as stored, in file order (name as in the file), for listings
// and tests. `view` is empty for a tensor of a type ossa does not read (e.g. an unused one).
struct NamedTensor {
  std::string name;
  std::string type_name;  // "Q4_1", "F32", "BF16", ...
  int64_t rows = 0;
  int64_t cols = 0;
  size_t nbytes = 0;
  TensorView view;
};

// A loaded model. `storage` keeps the memory maps (and any converted buffers) alive.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  std::shared_ptr<void> storage;
  std::vector<NamedTensor> tensors;  // all tensors of the file(s)
  // "float32" (default: quantized weights exact, activations with 16 significant bits on AMX) or
  // "bfloat16" (weights and matmul inputs rounded to bf16, f32 accumulation: vLLM-CPU's numerics).
  std::string compute_dtype = "float32";
  // Load options that shape the forward pass (see load_model).
  bool amx = false;                    // matrices repacked for the AMX kernels
  bool quantized_activations = false;  // quantized weights multiply 8-bit activation blocks

  // A tensor by file name ("blk.0.attn_q.weight") or canonical name ("layers.0.wq", "tok_embd",
  // "output", ...); nullptr if there is none. Canonical views are what the forward pass uses (1-D
  // tensors converted to F32).
  const TensorView* find_tensor(const std::string& name) const;

  // Whether the forward pass multiplies any matrix on the AMX kernels: some were repacked for them
  // at load (kernels/matmul_amx.cpp).
  bool uses_amx() const;
  // The matrices multiplied with activations split into int8 pieces, by the twin's names
  // ("layers.3.wq", "layers.1.experts.5.w_up", "output"), each with the number of values that share
  // a scale: 32 (kernels/matmul_amx_i8.cpp) or 64 (Q2_K / Q3_K, kernels/matmul_amx_q23k.cpp), so
  // ossa.reference can round their inputs alike (reference.model.split_int8). With
  // quantized_activations, 32 marks the matrices whose inputs are rounded to 8-bit blocks instead
  // (kernels/matmul.h takes_q8; the int8 kernels' first piece alone).
  std::map<std::string, int> int8_matrices() const;
};

// Loads a GGUF file or a Hugging Face folder (config.json + *.safetensors). Throws ModelError
// naming the problem: unknown architecture, unsupported tensor type, missing tensor, shape
// mismatch, corrupt or truncated file. dtype: "auto" or "float32" (the default numerics) or
// "bfloat16" (every matrix rounded to bf16 at load and multiplied by bf16-rounded activations;
// faster prefill). InputError for any other.
struct LoadOptions {
  std::string dtype = "auto";
  // Repack the matrices for the AMX kernels where the CPU allows and OSSA_AMX=0 is not in the
  // environment (kernels/matmul.h: amx_default). false: the exact f32 kernels, what a CPU without
  // AMX runs.
  bool amx = true;
  // Quantized weights multiply activations rounded to 8-bit blocks (llama.cpp's scheme; faster,
  // less exact); default: f32 activations.
  bool quantized_activations = false;
};
std::shared_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace ossa
