#pragma once
// The shape and hyper-parameters of a Llama-family model, from GGUF metadata or config.json.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace ossa {

struct RopeScaling {
  std::string type = "none";  // "none", "linear", "llama3", "longrope", "yarn"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
  // "longrope" (Phi-3's "su"): per-frequency divisors [head_dim_rotated / 2] for positions below
  // original_max_position (short) and from it on (long), and the factor cos/sin are multiplied by.
  std::vector<float> short_factor, long_factor;
  float attn_factor = 1.0f;  // longrope and yarn: cos/sin multiplied by it
  // "yarn": frequencies whose wavelength spans fewer than beta_fast turns over
  // original_max_position are kept, those spanning more than beta_slow divided by factor, a linear
  // ramp over the dimensions between (their bounds rounded outwards when truncate).
  float beta_fast = 32.0f, beta_slow = 1.0f;
  bool truncate = true;
};

// Mixture of experts (Qwen3-MoE, Qwen2-MoE, Mixtral; model/moe.h): in the layers listed, the
// feed-forward is a router over n_expert experts of which each token uses its n_expert_used best.
// n_expert == 0 for a dense model.
struct MoeConfig {
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_expert = 0;          // rows of each expert's gate and up matrices
  int n_ff_shared = 0;          // Qwen2-MoE's shared expert (0: none)
  bool norm_topk_prob = false;  // the chosen experts' weights renormalised to sum to 1
  std::vector<int> layers;      // the MoE layers, ascending (the others are dense)
  // gpt-oss: the router and every expert matrix have biases; the weights are a softmax over the
  // chosen experts' logits alone; the experts' activation is its clamped SwiGLU, with
  // g = min(gate, limit), u = clamp(up, -limit, limit): (u + 1) * g * sigmoid(alpha * g).
  bool bias = false;
  bool softmax_topk = false;
  float swiglu_alpha = 0.0f;  // > 0: that activation (with swiglu_limit); 0: SiLU(gate) * up
  float swiglu_limit = 0.0f;
  // ERNIE 4.5 MoE: the experts are chosen by their softmax probability plus a per-expert bias
  // (e_score_correction_bias, MoeWeights::selection_bias) and weighted by the probability alone,
  // divided by max(the chosen ones' sum, norm_min).
  bool selection_bias = false;
  float norm_min = 0.0f;
  // DeepSeek V2 / V3 (deepseek2): the router's scores are a softmax (V2) or sigmoids (V3,
  // sigmoid_gating) of the logits, plus the selection bias where there is one (V3's
  // e_score_correction_bias) for choosing; with n_group > 1 the experts form n_group equal groups
  // and only the topk_group best groups (V2: by their best score; V3: by the sum of their two best)
  // are eligible. The chosen experts are weighted by their scores (divided by their sum plus 1e-20
  // with norm_topk_prob), times routed_scale.
  bool deepseek = false;
  bool sigmoid_gating = false;
  bool group_top2 = false;  // a group scored by its two best (V3, Mistral 4), else its best (V2)
  int n_group = 1, topk_group = 1;
  float routed_scale = 1.0f;
  float norm_eps = 1e-20f;  // added to the chosen weights' sum (LFM2-MoE: 1e-6)
  // Llama 4: the experts of the k largest logits, each weighted by sigmoid(its logit), the weight
  // multiplying the expert's input rather than its output; the shared expert ungated.
  bool input_weighted = false;
  // Phi-3.5-MoE's sparsemixer (top 2 at inference): the best logit's expert, weighted by the
  // softmax over the logits within 2 sparsemixer_eps (relative: (top - s) / max(|s|, top)) of it;
  // then the best of the others, weighted by the softmax over the others within 2 eps of that one.
  bool sparsemixer = false;
  float sparsemixer_eps = 0.0f;
  bool is_moe_layer(int layer) const;
};

// DeepSeek V2 / V3's multi-head latent attention (model/mla.cpp): q from a low-rank projection
// (q_lora_rank > 0) or a plain one, [qk_nope | qk_rope] per head; K and V of every head
// decompressed from one cached row per token, a kv_lora_rank latent plus a qk_rope key part shared
// by the heads. ossa attends in the latent space (the up-projections absorbed into q and the
// output), so the cache holds [rope | latent] once per token: head_dim = qk_rope + kv_lora_rank,
// n_head_kv = 1.
struct MlaConfig {
  int q_lora_rank = 0;  // 0: q = x @ wq^T directly
  int kv_lora_rank = 0;
  int qk_nope = 0, qk_rope = 0, v_head_dim = 0;
  bool active() const { return kv_lora_rank > 0; }
};

// Qwen3.5's gated delta-net layers (model/delta_net.cpp): linear attention with a recurrent state
// per sequence instead of a KV cache. A token's in_proj_qkv row [q | k | v] (n_k_heads * k_dim
// twice, then n_v_heads * v_dim) goes through a causal depthwise convolution of conv_kernel taps
// (its last conv_kernel - 1 inputs are state) and SiLU; q and k are L2-normalised per head, q
// scaled by 1/sqrt(k_dim); each value head h, reading key head kh(h), updates its k_dim x v_dim
// state S by the gated delta rule
//   S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q
// with beta = sigmoid(b), g = a_neg * softplus(a + dt_bias); o is RMS-normalised (ssm_norm, plain
// weights) times SiLU(z) and projected by ssm_out.
struct DeltaNetConfig {
  int n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
  // Which key head a value head reads: llama.cpp's converter stores the value heads tiled
  // (h -> h % n_k_heads) so that ggml's broadcast repeats keys; Hugging Face groups them
  // (h -> h / (n_v_heads / n_k_heads)).
  bool v_tiled = false;
  std::vector<uint8_t> layers;  // [n_layer] 1 = delta-net layer (empty: none)
  bool active() const { return n_v_heads > 0; }
  bool is_layer(int layer) const { return !layers.empty() && layers[layer] != 0; }
  int64_t conv_dim() const { return 2 * int64_t{n_k_heads} * k_dim + int64_t{n_v_heads} * v_dim; }
  int key_head(int v_head) const {
    return v_tiled ? v_head % n_k_heads : v_head / (n_v_heads / n_k_heads);
  }
  // Floats of one sequence's state in one layer: the convolution's last conv_kernel - 1 inputs,
  // then n_v_heads states of k_dim x v_dim.
  int64_t conv_floats() const { return int64_t{conv_kernel - 1} * conv_dim(); }
  int64_t layer_floats() const { return conv_floats() + int64_t{n_v_heads} * k_dim * v_dim; }
};

// LFM2's short-convolution layers (model/delta_net.cpp short_conv_layer): a token's in_proj row
// [B | C | x]
// (n_embd each), B * x through a causal depthwise convolution of `kernel` taps (its last kernel - 1
// inputs are a sequence's state), times C, then out_proj.
struct ShortConvConfig {
  int kernel = 0;
  std::vector<uint8_t> layers;  // [n_layer] 1 = short-convolution layer (empty: none)
  bool active() const { return kernel > 0; }
  bool is_layer(int layer) const { return !layers.empty() && layers[layer] != 0; }
};

// Mamba-2 layers (model/delta_net.cpp mamba2_layer: Granite 4.0-H's, Nemotron-H's): a token's
// in_proj row is [z | x | B | C | dt] (d_inner, d_inner, n_groups * d_state twice, n_heads); [x | B
// | C] goes through a causal depthwise convolution of conv_kernel taps (plus its bias) and SiLU;
// head h (head_dim = d_inner / n_heads values of x; group g(h) = h / (n_heads / n_groups) of B and
// C) updates its head_dim x d_state state, with dt = softplus(dt + dt_bias) and a = -exp(A_log):
//   S = exp(dt a) S + (dt B) x^T (as rows: S[p] += dt x[p] B);  y = S C + D x
// then y * SiLU(z) is RMS-normalised in n_groups groups (ssm_norm) and projected by ssm_out.
struct Mamba2Config {
  int d_inner = 0, d_state = 0, n_heads = 0, n_groups = 0, conv_kernel = 0;
  bool conv_bias = false;       // the convolution has a bias (ssm_conv_b)
  bool gated_norm = true;       // y * SiLU(z) RMS-normalised (ssm_norm); false: not normalised
                                // (Falcon-H1's mamba_rms_norm false)
  std::vector<uint8_t> layers;  // [n_layer] 1 = Mamba-2 layer (empty: none)
  bool active() const { return n_heads > 0; }
  bool is_layer(int layer) const { return !layers.empty() && layers[layer] != 0; }
  int head_dim() const { return d_inner / n_heads; }
  int group(int head) const { return head / (n_heads / n_groups); }
  int64_t conv_dim() const { return d_inner + 2 * int64_t{n_groups} * d_state; }
  int64_t proj_dim() const { return int64_t{d_inner} + conv_dim() + n_heads; }
  // Floats of one sequence's state in one layer: the convolution's last conv_kernel - 1 inputs,
  // then n_heads states of head_dim x d_state (row p of head h: S[h][p][0 .. d_state)).
  int64_t conv_floats() const { return int64_t{conv_kernel - 1} * conv_dim(); }
  int64_t layer_floats() const { return conv_floats() + int64_t{d_inner} * d_state; }
};

// Mamba-1 layers (model/delta_net.cpp mamba1_layer: Mamba, Falcon-Mamba): a token's in_proj row is
// [x | z] (d_inner each); x goes through a causal depthwise convolution of conv_kernel taps (plus
// its bias) and SiLU; x_proj gives [dt_low | B | C] (dt_rank, d_state, d_state; Falcon-Mamba
// RMS-normalises each, without weights: dt_b_c_rms, eps bc_eps); dt = softplus(dt_proj dt_low +
// dt_bias) per channel; channel c updates its d_state state with A = -exp(A_log) [d_inner x
// d_state]:
//   h[c][n] = exp(dt[c] A[c][n]) h[c][n] + dt[c] B[n] x[c];  y[c] = h[c] . C + D[c] x[c]
// then y * SiLU(z) is projected by ssm_out.
struct Mamba1Config {
  int d_inner = 0, d_state = 0, dt_rank = 0, conv_kernel = 0;
  bool conv_bias = false;       // the convolution has a bias (ssm_conv_b)
  bool dt_b_c_rms = false;      // RMS norms of dt_low, B and C (Falcon-Mamba's without weights)
  bool dt_b_c_weights = false;  // those norms have weights (Jamba: ssm_dt_norm, ssm_b_norm, ...)
  float bc_eps = 1e-6f;         // their epsilon
  std::vector<uint8_t> layers;  // [n_layer] 1 = Mamba-1 layer (empty: none)
  bool active() const { return d_inner > 0; }
  bool is_layer(int layer) const { return !layers.empty() && layers[layer] != 0; }
  int64_t x_proj_dim() const { return int64_t{dt_rank} + 2 * int64_t{d_state}; }
  // Floats of one sequence's state in one layer: the convolution's last conv_kernel - 1 inputs,
  // then d_inner states of d_state.
  int64_t conv_floats() const { return int64_t{conv_kernel - 1} * d_inner; }
  int64_t layer_floats() const { return conv_floats() + int64_t{d_inner} * d_state; }
};

// Falcon-H1's mu-P multipliers, applied at run time to a folder's weights (llama.cpp's converter
// folds them into a GGUF file's, which then needs none): the attention's input (q, k, v) and the
// keys, its output, the Mamba-2 mixer's input (and its projection's five segments [z | x | B | C |
// dt]) and output, the MLP's gate (before SiLU) and its output.
struct MupScales {
  bool active = false;
  float attn_in = 1.0f, key = 1.0f, attn_out = 1.0f, ssm_in = 1.0f, ssm_out = 1.0f;
  float zxbcdt[5] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  float mlp_gate = 1.0f, mlp_down = 1.0f;
};

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", "qwen3", "mistral", "qwen3moe", "qwen2moe", "mixtral",
                     // "gemma", "gemma2", "gemma3", "phi3", "smollm3", "granite", "granitemoe",
                     // "gpt-oss", "olmo2", "olmo3", "exaone4", "ernie4_5", "ernie4_5-moe",
                     // "deepseek2", "glm4moe", "olmoe", "glm4", "mistral3", "qwen35",
                     // "qwen35moe", "qwen3next", "lfm2", "lfm2moe", "granitehybrid", "nemotron_h",
                     // "nemotron_h_moe"
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // may differ from n_embd / n_head (Qwen3, odd test models)
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::Neox;
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k before RoPE
  bool tied_embeddings = false;  // output projection shares tok_embd
  MoeConfig moe;
  MlaConfig mla;         // DeepSeek V2 / V3 (deepseek2); inactive otherwise
  DeltaNetConfig delta;  // Qwen3.5 / Qwen3-Next (qwen35, qwen35moe, qwen3next); inactive otherwise
  ShortConvConfig conv;  // LFM2 (lfm2, lfm2moe); inactive otherwise
  Mamba2Config ssm;      // Mamba-2 layers (granitehybrid); inactive otherwise
  Mamba1Config mamba1;   // Mamba-1 layers (mamba); inactive otherwise
  // Falcon-H1: every Mamba-2 layer runs attention beside the mixer on the same normalised input,
  // the two outputs summed into the residual (the layer keeps K/V and a state).
  bool parallel_ssm = false;
  MupScales mup;  // (Falcon-H1's folders)
  // granitehybrid read from a BambaForCausalLM folder: a plain gated MLP (feed_forward.*, not the
  // shared MLP's fused input_linear), the final norm final_layernorm.
  bool hf_bamba = false;
  // Qwen3.5's attention layers: wq yields [query | gate] per head (2 * head_dim rows a head) and
  // the attention's output is multiplied by sigmoid(gate) before wo. attn_gate_proj (AFMoE): the
  // gate from a projection of its own (LayerWeights::wg), wq the query alone.
  bool attn_gate = false;
  bool attn_gate_proj = false;

  // Beyond the Llama family (zero / empty when unused; see docs/models.md).
  int sliding_window = 0;  // a windowed layer attends to this many positions, itself included
  std::vector<uint8_t> layer_sliding;  // [n_layer] 1 = sliding-window layer (empty: none)
  float rope_theta_swa =
      0.0f;          // RoPE base of the sliding layers, unscaled (Gemma 3); 0 = as global
  int rope_dim = 0;  // rotated dimensions of a head (Phi-4-mini's partial rotary); 0 = all
  // llama.cpp's rope_freqs tensor (its converters' Llama-3 scaling: a divisor per rotated pair,
  // applied before any scaling type's); empty = none
  std::vector<float> rope_freqs;
  float attn_scale = 0.0f;          // scores scale; 0 = 1/sqrt(head_dim)
  float final_softcap = 0.0f;       // logits -> cap * tanh(logits / cap); 0 = off
  float attn_softcap = 0.0f;        // attention scores -> cap * tanh(s / cap) (Gemma 2); 0 = off
  float embd_scale = 0.0f;          // embeddings multiplied by it (Gemma: sqrt(n_embd)); 0 = off
  std::vector<uint8_t> layer_nope;  // [n_layer] 1 = no RoPE in that layer (SmolLM3); empty: none
  float residual_scale =
      0.0f;                  // sublayer outputs times it before the residual add (Granite); 0 = 1
  float logit_scale = 0.0f;  // logits divided by it (Granite's logits_scaling); 0 = off
  bool o_bias = false;       // the attention output projection has a bias (gpt-oss)
  bool attn_sinks = false;   // one learned sink logit per head in the softmax (gpt-oss)
  // q, k, v clamped to [-c, c] after their norms (OLMoE's clip_qkv); 0 = off
  float clamp_qkv = 0.0f;
  // Llama 4's attention temperature (Ministral 3, Mistral Large 3): each query, after RoPE, times
  // 1 + attn_temp_scale * ln(1 + floor(position / attn_temp_length)) (1 below attn_temp_length).
  float attn_temp_scale = 0.0f;  // 0 = off
  int attn_temp_length = 0;
  // Llama 4 itself: floor((position + attn_temp_offset) / attn_temp_length), in the NoPE layers
  // alone (attn_temp_nope).
  int attn_temp_offset = 0;
  bool attn_temp_nope = false;
  // Llama 4's chunked attention: a sliding layer's token attends to the positions of its own chunk
  // of sliding_window (from position / window * window on), not to a trailing window.
  bool attn_chunked = false;
  // Llama 4: each head of q and k RMS-normalised without a weight after RoPE, in the RoPE layers.
  bool qk_l2_norm = false;
  // Hunyuan: the q / k norms (weighted, per head) applied after RoPE instead of before it.
  bool qk_norm_after_rope = false;
  // StarCoder2: the norms' biases (LayerNorm with bias: LayerWeights::attn_norm_b / ffn_norm_b,
  // ModelWeights::output_norm_b), a feed-forward of two matrices with GELU (tanh) between them,
  // down(gelu(up x + b_up)) + b_down, and the MLP's biases (b_up / b_down).
  bool norm_bias = false;
  bool ffn_gelu = false;
  bool ffn_bias = false;
  // GPT-NeoX / Falcon: ffn_gelu's GELU exact (erf), not the tanh approximation; and the parallel
  // block's MLP reading its own norm of the layer's input (ffn_norm, with its bias) instead of the
  // attention's: x + attn(ln1 x) + mlp(ln2 x).
  bool gelu_erf = false;
  bool parallel_norms = false;
  // OPT: ffn_gelu's activation a ReLU instead: down(relu(up x + b_up)) + b_down.
  bool ffn_relu = false;
  // VaultGemma (VaultGemmaForCausalLM, run as gemma2): Gemma 2's layers without the sublayers'
  // output norms (only input_layernorm and pre_feedforward_layernorm).
  bool no_post_norms = false;
  // FlexOlmo (FlexOlmoForCausalLM, run as olmoe): OLMoE's layers with OLMo 2's norms, after each
  // sublayer alone (post_attention_layernorm, post_feedforward_layernorm).
  bool no_pre_norms = false;
  // BitNet: LayerWeights::attn_sub_norm / ffn_sub_norm (RMSNorms before wo and w_down), and the
  // gated MLP's activation relu(gate)^2 * up (Glu::Relu2) instead of SwiGLU.
  bool sub_norms = false;
  bool glu_relu2 = false;
  // BLOOM, MPT: ALiBi in place of RoPE (every layer NoPE), one slope per head ([n_head], empty:
  // none; alibi_slopes); BLOOM's LayerNorm of the embeddings (ModelWeights::tok_embd_norm, with
  // its bias); GPT-2, StarCoder: learned absolute positions (ModelWeights::pos_embd, one row per
  // position below n_ctx_train) added to the embeddings.
  std::vector<float> alibi;
  bool embd_norm = false;
  bool pos_embd = false;
  // Cohere (Command R, Aya, Command R7B / A): LayerNorm (mean removed, no bias) wherever the others
  // RMS-normalise; attention and MLP both read the same normalised input and are summed into the
  // residual (x + attn + mlp; no ffn_norm); the q / k norms (where present) one weight row per
  // head.
  bool layer_norm = false;
  bool parallel_block = false;
  bool qk_norm_heads = false;
  // Gemma 3n (model/gemma4.cpp, gemma3n_forward; Gemma 4's attention, MLPs and per-layer inputs):
  // AltUp's streams (the residual as `altup` parallel rows, the first active: predicted before a
  // layer and corrected after it from a router over the active row), LAuReL's rank (a low-rank
  // residual beside the attention), each layer's activation sparsity as the cut of its MLP's gate
  // in standard deviations above the gate's mean (Phi^-1(share cut); -inf or empty: none), and
  // whether the corrected active stream is scaled before the per-layer branch.
  int altup = 0;
  int laurel_rank = 0;
  std::vector<float> layer_sparsity;
  bool altup_correct_scale = true;

  // Nemotron-H's blocks hold one sublayer each: a mixer (attention or Mamba-2) without a
  // feed-forward (layer_no_ffn), or a feed-forward (dense or experts) without a mixer
  // (layer_no_mixer), each after the block's one norm (attn_norm, or ffn_norm for a feed-forward).
  std::vector<uint8_t> layer_no_ffn, layer_no_mixer;  // [n_layer]; empty: every layer has both
  // Nemotron-51B / Super / Ultra (deci): a layer's attention replaced by one linear map, wo(norm
  // x), without K/V ("linear attention"); its no-op attention / feed-forward layers are
  // layer_no_mixer / layer_no_ffn, its feed-forward sizes layer_n_ff.
  std::vector<uint8_t> layer_linear_attn;  // [n_layer]; empty: none
  // The feed-forward is down(relu(up x)^2), no gate (Nemotron-H's relu2), experts likewise.
  bool ffn_relu2 = false;
  // Apertus: the feed-forward is down(xielu(up x)), no gate, with each layer's xIELU parameters
  // (kernels/ops.h xielu_row) as applied: [n_layer * 4] alpha_p, alpha_n, beta, eps.
  bool ffn_xielu = false;
  std::vector<float> xielu;

  // Gemma 4 (gemma4; model/gemma4.cpp). Attention shapes per layer (empty: head_dim and n_head_kv
  // everywhere): its global layers have wider heads and fewer KV heads than its sliding ones.
  std::vector<int> layer_head_dim, layer_n_head_kv;  // [n_layer]
  std::vector<int> layer_n_ff;  // [n_layer] feed-forward size (its double-wide MLPs); empty: n_ff
  // [n_layer] the layer whose K/V a layer attends to: itself, or (Gemma 4's last
  // num_kv_shared_layers) the last earlier layer of its kind that keeps its own; empty: itself.
  std::vector<int> kv_source;
  // The global layers' RoPE (Gemma 4's "proportional"): over the whole head (NeoX pairs), the first
  // rope_pairs of its head_dim / 2 frequencies base^(-2i / head_dim), the rest 0 (unrotated);
  // 0 = every frequency turns (the usual RoPE).
  int rope_pairs = 0;
  bool v_norm = false;  // V RMS-normalised per head without a weight (Gemma 4)
  // Per-layer embeddings (Gemma 4 E2B / E4B): ple_dim values per layer and token, from a token
  // table and a projection of the embeddings, gating a per-layer residual branch; 0 = none.
  int ple_dim = 0;

  bool sliding(int layer) const { return !layer_sliding.empty() && layer_sliding[layer] != 0; }
  int head_dim_of(int layer) const {
    return layer_head_dim.empty() ? head_dim : layer_head_dim[static_cast<size_t>(layer)];
  }
  int n_head_kv_of(int layer) const {
    return layer_n_head_kv.empty() ? n_head_kv : layer_n_head_kv[static_cast<size_t>(layer)];
  }
  int n_ff_of(int layer) const {
    return layer_n_ff.empty() ? n_ff : layer_n_ff[static_cast<size_t>(layer)];
  }
  // K (or V) floats of one token in a layer's cache, and the widest of any layer (q: n_head heads).
  int64_t kv_dim(int layer) const { return int64_t{n_head_kv_of(layer)} * head_dim_of(layer); }
  int64_t max_kv_dim() const {
    int64_t m = int64_t{n_head_kv} * head_dim;
    for (int l = 0; l < n_layer && !layer_head_dim.empty(); ++l) m = std::max(m, kv_dim(l));
    return m;
  }
  int max_head_dim() const {
    int m = head_dim;
    for (int d : layer_head_dim) m = std::max(m, d);
    return m;
  }
  int max_n_ff() const {
    int m = n_ff;
    for (int f : layer_n_ff) m = std::max(m, f);
    return m;
  }
  int kv_source_of(int layer) const {
    return kv_source.empty() ? layer : kv_source[static_cast<size_t>(layer)];
  }
  // Elements of one slot before layer `layer`'s K in the pool (every earlier K/V layer's K and V
  // rows; one row for a shared-row cache), and of all layers (K/V elements a token takes).
  int64_t kv_offset(int layer) const {
    const int64_t regions = kv_shared() ? 1 : 2;
    if (layer_head_dim.empty() && layer_n_head_kv.empty())
      return int64_t{kv_index(layer)} * regions * n_head_kv * head_dim;
    int64_t n = 0;
    for (int l = 0; l < layer; ++l)
      if (has_kv(l)) n += regions * kv_dim(l);
    return n;
  }
  int64_t kv_elems_per_token() const { return kv_offset(n_layer); }
  bool no_ffn(int layer) const { return !layer_no_ffn.empty() && layer_no_ffn[layer] != 0; }
  bool no_mixer(int layer) const { return !layer_no_mixer.empty() && layer_no_mixer[layer] != 0; }
  bool linear_attn(int layer) const {
    return !layer_linear_attn.empty() && layer_linear_attn[static_cast<size_t>(layer)] != 0;
  }
  // K and V of a token are one row (DeepSeek's latent attention: [rope(k_r) | c]): the KV pool
  // holds it once, in V's row layout, and the attention reads K from it (AttentionArgs::k_rows).
  bool kv_shared() const { return mla.active(); }
  // A layer with a recurrent state instead of K/V (a delta-net, short-convolution or Mamba-2
  // layer).
  bool recurrent(int layer) const {
    return delta.is_layer(layer) || conv.is_layer(layer) || ssm.is_layer(layer) ||
           mamba1.is_layer(layer);
  }
  // Floats of one sequence's state in layer `layer` (0 for an attention layer).
  int64_t layer_state_floats(int layer) const {
    if (delta.is_layer(layer)) return delta.layer_floats();
    if (conv.is_layer(layer)) return int64_t{conv.kernel - 1} * n_embd;
    if (ssm.is_layer(layer)) return ssm.layer_floats();
    if (mamba1.is_layer(layer)) return mamba1.layer_floats();
    return 0;
  }
  // A layer whose mixer is attention: K/V in the cache (not a recurrent layer, not a feed-forward
  // alone).
  bool has_kv(int layer) const {
    return (!recurrent(layer) || (parallel_ssm && ssm.is_layer(layer))) && !no_mixer(layer) &&
           !linear_attn(layer) && kv_source_of(layer) == layer;
  }
  // The layers with K/V in the cache, and a layer's index among them.
  int kv_layers() const {
    int n = 0;
    for (int l = 0; l < n_layer; ++l) n += has_kv(l);
    return n;
  }
  int kv_index(int layer) const {
    if (!delta.active() && !conv.active() && !ssm.active() && !mamba1.active() &&
        layer_no_mixer.empty() && layer_linear_attn.empty() && kv_source.empty())
      return layer;
    int n = 0;
    for (int l = 0; l < layer; ++l) n += has_kv(l);
    return n;
  }
  // Floats of one sequence's recurrent state, all layers (0: a model without recurrent layers),
  // and where layer `layer`'s starts.
  int64_t state_floats() const { return state_offset(n_layer); }
  int64_t state_offset(int layer) const {
    int64_t n = 0;
    for (int l = 0; l < layer; ++l) n += layer_state_floats(l);
    return n;
  }
  // Nemotron-H (nemotron_h, nemotron_h_moe): blocks of one sublayer each.
  bool nemotron_h() const { return arch == "nemotron_h" || arch == "nemotron_h_moe"; }
  // LFM2 and LFM2-MoE (lfm2, lfm2moe): short convolutions among attention layers.
  bool lfm2() const { return arch == "lfm2" || arch == "lfm2moe"; }
  bool nope(int layer) const { return !layer_nope.empty() && layer_nope[layer] != 0; }
  // Gemma 1, 2 and 3: GeGLU, scaled embeddings, norms stored as 1 + w (model/gemma3.cpp); 2 and 3
  // also normalise each sublayer's output (post_norms).
  bool gemma() const { return arch == "gemma" || arch == "gemma2" || arch == "gemma3"; }
  bool gemma4() const { return arch == "gemma4" || arch == "gemma3n"; }
  // (GLM-4 (glm4) has both: its sandwich norms.)
  bool post_norms() const {
    if (no_post_norms) return false;  // (VaultGemma: Gemma 2 without them)
    return arch == "gemma2" || arch == "gemma3" || arch == "glm4" || arch == "afmoe" ||
           !pre_norms();
  }
  // OLMo 2 and 3, EXAONE 4: no norm before the sublayers (their outputs are normalised:
  // post_norms); OLMo's q / k (OLMoE's too) are RMS-normalised over the whole projection (all
  // heads at once) rather than per head.
  bool olmo() const { return arch == "olmo2" || arch == "olmo3"; }
  bool pre_norms() const { return !no_pre_norms && !olmo() && arch != "exaone4"; }
  bool qk_norm_full() const { return olmo() || arch == "olmoe" || arch == "minimax-m2"; }
};

}  // namespace ossa
