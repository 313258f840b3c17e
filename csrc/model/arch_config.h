#pragma once
// Reading the hyper-parameters of the architectures beyond the Llama family from a GGUF file's
// metadata or a Hugging Face config.json (loader.cpp calls these; docs/models.md describes them).
#include <functional>
#include <string>
#include <vector>

#include "formats/config_json.h"
#include "formats/gguf.h"
#include "model/config.h"

namespace ossa {

// Gemma 3 or Gemma 2 (c.arch) from GGUF, after the keys every architecture shares were read into
// c: what llama.cpp's converter writes (attention.sliding_window, final_logit_softcapping, and
// Gemma 2's attn_logit_softcapping; rope scaling of Gemma 3's global layers) and what llama.cpp
// assumes where it writes nothing (Gemma 3: every 6th layer global, local RoPE base 10000; Gemma
// 2: every other layer sliding, from the first, one RoPE base; scores scaled by head_dim^-1/2, or
// (n_embd / n_head)^-1/2 for the 27B models: 62 layers for Gemma 3, 46 for Gemma 2).
void gemma3_config_gguf(const GGUFFile& g, ModelConfig& c);

// Gemma 3 (Gemma3TextConfig, or the text_config of a Gemma3ForConditionalGeneration folder) or
// Gemma 2 (Gemma2Config; c.arch says which) from config.json: every field, with the config class's
// defaults for those a file leaves out.
void gemma3_config_hf(const Json& cfg, ModelConfig& c);

// YaRN RoPE scaling from config.json's rope_scaling / rope_parameters `s` (transformers'
// _compute_yarn_parameters): factor (null: max_position_embeddings / original), the original
// context (the config's top-level original_max_position_embeddings, else s's, else
// max_position_embeddings), attention_factor (else from mscale / mscale_all_dim, else 1 + 0.1
// ln(factor)), beta_fast, beta_slow, truncate.
void yarn_config_hf(const Json& cfg, const Json& s, ModelConfig& c);

// Granite (IBM Granite 3.x, and its MoE granitemoe): the four multipliers. GGUF:
// {arch}.embedding_scale, {arch}.residual_scale, {arch}.attention.scale, {arch}.logit_scale
// (llama.cpp's keys; absent: 1, and 1/sqrt(head_dim) for the scores). config.json:
// embedding_multiplier, residual_multiplier, attention_multiplier (the scores' scale itself,
// default 1), logits_scaling.
void granite_config_gguf(const GGUFFile& g, ModelConfig& c);
void granite_config_hf(const Json& cfg, ModelConfig& c);
// GraniteSWA / GraniteMoeSWA (model_type granite_swa / granitemoe_swa): Granite's multipliers plus
// a window (sliding_window, default 128, null none) on the layers layer_types marks (default: all
// but every 4th from layer 0), a learnable sink per head, and layer_rope_theta (0: NoPE; one base
// for the full layers and one for the sliding ones, the latter as rope_theta_swa, else refused).
void granite_swa_config_hf(const Json& cfg, ModelConfig& c);

// SmolLM3's NoPE layers (c.layer_nope): from config.json's no_rope_layers (1: the layer uses RoPE)
// or no_rope_layer_interval (default 4: every 4th layer without RoPE), and its sliding window
// (use_sliding_window: the layers layer_types marks, by default the NoPE ones); from GGUF, every
// 4th layer, as llama.cpp hard-codes (no key holds it).
void smollm3_config_gguf(ModelConfig& c);
void smollm3_config_hf(const Json& cfg, ModelConfig& c);

// gpt-oss from GGUF, after the shared keys (window_config_gguf included): attention sinks, the
// output bias where the file has one, and the window on the even-numbered layers (llama.cpp
// hard-codes that pattern; a sliding_window_pattern key overrides it). Its experts:
// read_moe_config_gguf.
void gpt_oss_config_gguf(const GGUFFile& g, ModelConfig& c, bool o_bias);

// gpt-oss from config.json: sliding_window (default 128) on the layers layer_types marks (default:
// the even-numbered ones), attention_bias (default true: q/k/v and output biases), sinks.
void gpt_oss_config_hf(const Json& cfg, ModelConfig& c);

// OLMo 3 from config.json: sliding_window (default 4096) on the layers layer_types marks (default:
// all but every 4th), and RoPE per layer type (transformers 5's rope_parameters {full_attention,
// sliding_attention}; older files: rope_theta and a rope_scaling for the full layers): the full
// layers' parameters are the model's, the sliding layers get their own unscaled table
// (c.rope_theta_swa) when they differ. Returns the full layers' rope parameters (to be read as
// any model's), or null for the top-level keys.
const JsonValue* olmo3_config_hf(const Json& cfg, ModelConfig& c);

// EXAONE 4 from config.json: sliding_window (transformers' default 4096; null: none) on the
// layers layer_types marks (default: sliding_window_pattern, an int n: all but every n-th layer,
// or a string of L (local) / G (global) repeated over the layers; default 4); with a window the
// global layers attend without RoPE (c.layer_nope). From GGUF: llama.cpp's reading, a window only
// for the 64-layer (32B) model (attention.sliding_window, default 4096) on all but every 4th
// layer (a sliding_window_pattern key: those layers, for any depth).
void exaone4_config_hf(const Json& cfg, ModelConfig& c);
void exaone4_config_gguf(const GGUFFile& g, ModelConfig& c);
// EXAONE MoE (K-EXAONE) from GGUF: the MTP layers llama.cpp's converter appends left out, EXAONE
// 4's window and NoPE global layers where the file gives a window.
void exaone_moe_config_gguf(const GGUFFile& g, ModelConfig& c);

// OLMo 2 GGUF files with attention.sliding_window (llama.cpp's OLMo 3 conversions): every 4th layer
// full, the others windowed, as llama.cpp assumes (a sliding_window_pattern key overrides it).
void olmo_window_gguf(const GGUFFile& g, ModelConfig& c);

// Phi-3 (Phi-3-mini, Phi-3.5-mini, Phi-4-mini) from GGUF, after the shared keys: partial rotary
// (rope.dimension_count), LongRoPE from llama.cpp's rope_factors_long / rope_factors_short tensors
// (given here, empty when the file has none) with rope.scaling.original_context_length and
// rope.scaling.attn_factor, and attention.sliding_window over every layer.
void phi3_config_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                      std::vector<float> short_factor);

// Phi-3 from config.json, after the shared keys: partial_rotary_factor, rope scaling "longrope" /
// "su" (`scaling`: rope_scaling or rope_parameters, may be null) and sliding_window.
// Phi-3.5-MoE from a folder, after phi3_config_hf: LayerNorms with biases, LongRoPE's factor on
// cos / sin from short_mscale (equal to long_mscale).
void phimoe_config_hf(const JsonValue* scaling, ModelConfig& c, const std::string& path);
// The rotated dimensions of a partial RoPE: 0 when the whole head rotates; an odd, empty or
// too-wide count refused (where: the key or file, for the message).
int rotated_dims(int64_t dims, const ModelConfig& c, const std::string& where);
// LongRoPE ("longrope" / "su") from a folder's rope scaling (Phi-3's and MiniCPM3's): the short and
// long factors over the rotated dimensions, the original context, the cos / sin factor.
void longrope_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c);
// MiniCPM3 from a folder: DeepSeek V2's latent attention with rotate_half RoPE, LongRoPE, and
// Granite's embedding, residual and logit multipliers from scale_emb, scale_depth, dim_model_base.
void minicpm3_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c);
// MiniCPM3 from llama.cpp's files: the latent attention (key_length = nope + rope, no value length:
// hidden / heads; kv_b fused), rotate_half RoPE with LongRoPE from the rope factor tensors, and the
// release's multipliers, which llama.cpp's graph hard-codes (12, 1.4 / sqrt(layers), hidden / 256).
void minicpm3_config_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                          std::vector<float> short_factor, const std::string& path);
// MiniCPM 1 / 2 / 4 (model_type minicpm, remote code; llama.cpp's minicpm): Llama's layers with
// Granite's three multipliers (embeddings times scale_emb, each sublayer's output times
// scale_depth / sqrt(layers), logits divided by hidden / dim_model_base; MiniCPMConfig's defaults
// 1, 1, 1) and LongRoPE where rope_scaling says (MiniCPM4). GGUF: llama.cpp's
// minicpm.embedding_scale / residual_scale / logit_scale keys, LongRoPE from its rope factor
// tensors. Experts (MiniCPM-MoE) are refused by name.
void minicpm_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c);
void minicpm_config_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                         std::vector<float> short_factor, const std::string& path);
void phi3_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c);

// Nemotron-51B / Nemotron Super / Ultra (deci; DeciLMForCausalLM, model_type nemotron-nas): Llama's
// layers, each with its own shape: per layer a query head count (0: no attention, the layer's
// residual passes; else the model's), a KV head count (0 with query heads: "linear attention", the
// attention replaced by wo(norm x); else the attention layers' one count: differing counts are
// refused) and a feed-forward size (0: none). deci_layers sets the per-layer config from the three
// lists. GGUF: llama.cpp's per-layer attention.head_count / head_count_kv / feed_forward_length
// arrays. config.json: block_configs (attention.n_heads_in_group / no_op / replace_with_linear,
// ffn.ffn_mult / no_op; sizes as DeciLM derives them: 2 ffn_mult hidden / 3 rounded up to 256), the
// other options refused by name; deci_keys writes the attention layers' KV heads and the widest
// feed-forward into the config first (as num_key_value_heads / intermediate_size) for the shared
// reading.
void deci_layers(ModelConfig& c, const std::vector<int64_t>& heads, const std::vector<int64_t>& kv,
                 const std::vector<int64_t>& ff, const std::string& where);
void deci_keys(JsonValue& cfg, const std::string& path);
void deci_config_hf(const Json& cfg, ModelConfig& c);

// The sliding window of the Llama-family and MoE architectures (and Phi-3's) in GGUF:
// {arch}.attention.sliding_window over every layer, or over the layers a bool per layer in
// {arch}.attention.sliding_window_pattern marks. llama.cpp's converter writes the key for Phi-3
// only; a Mistral or Qwen2 file that carries it gets the window transformers applies.
void window_config_gguf(const GGUFFile& g, ModelConfig& c);

// The same from config.json, as transformers applies it (c.arch set, n_layer read):
//   mistral, mixtral  sliding_window on every layer (absent: Mistral 4096, Mixtral none; null:
//   none); qwen2, qwen3      only with use_sliding_window: the layers layer_types marks, else those
//   from
//                     max_window_layers (28) on;
//   qwen2moe          the same, else the even-numbered layers below max_window_layers;
//   qwen3moe          only with use_sliding_window, every layer; llama: none.
void window_config_hf(const Json& cfg, ModelConfig& c);

// DeepSeek V2 / V3 (deepseek2) from GGUF, after the shared keys: the latent attention's ranks and
// head sizes (attention.q_lora_rank, kv_lora_rank, key_length_mla / value_length_mla as llama.cpp's
// converter writes them since it splits kv_b, else key_length / value_length), RoPE on interleaved
// pairs of the qk_rope dimensions, and the scores' scale 1/sqrt(qk_nope + qk_rope) times YaRN's
// mscale squared (1 + rope.scaling.yarn_log_multiplier * ln(factor)). Its experts:
// read_moe_config_gguf.
void deepseek2_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);

// The same from a DeepseekV2Config / DeepseekV3Config config.json (q_lora_rank, kv_lora_rank,
// qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope_interleave, YaRN's mscale_all_dim).
void deepseek2_config_hf(const Json& cfg, ModelConfig& c);

// GLM-4.5 / 4.6 (glm4moe) from GGUF: NeoX RoPE on the first rope.dimension_count dimensions of a
// head (half of them in the releases); the last nextn_predict_layers blocks of llama.cpp's files
// hold the multi-token-prediction layer, which is not run (n_layer excludes them).
void glm4moe_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
// ... and from a folder: partial_rotary_factor (top-level or in rope_parameters; Glm4MoeConfig's
// default 0.5), biased q / k / v (attention_bias), per-head q / k norms (use_qk_norm).
void glm4moe_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c);

// GLM-4 (dense: glm4, GLM-4-9B-0414 / GLM-Z1): RoPE on interleaved pairs of the first
// rope.dimension_count dimensions of a head (partial_rotary_factor, default 0.5, in a folder), q /
// k / v biases (attention_bias, Glm4Config's default true); its four norms: post_norms().
void glm4_config_gguf(const GGUFFile& g, ModelConfig& c);

// Llama 4's attention temperature from GGUF (attention.temperature_scale / temperature_length,
// where llama.cpp reads them: mistral3, deepseek2).
void temperature_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
// Ministral 3 (mistral3) from GGUF: llama.cpp's mistral3 graph divides YaRN's cos/sin factor out
// (1 / (1 + 0.1 ln factor)), so the factor is 1 (transformers': mscale / mscale_all_dim, 1 in the
// releases); attention.scale where set. From a folder (Ministral 3, Mistral 4): rope_parameters'
// llama_4_scaling_beta over original_max_position_embeddings.
void mistral3_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void temperature_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c);

// Llama 4 (text) from GGUF, as llama.cpp reads it: every 4th layer without RoPE, with full
// attention and the attention temperature (0.1 ln(1 + floor((position + 1) / 8192)), the NoPE
// layers alone), the others RoPE'd (interleaved pairs, as the folder's rows) with chunked attention
// over 8192 positions (sliding_window_pattern: another period) and q / k normalised without a
// weight after RoPE unless the model has 128 experts (Maverick); a file whose sliding_window is 0
// (the converter's mark of all-full-attention models) has RoPE everywhere and full attention. From
// a folder (Llama4TextConfig, or a Llama4Config's text_config): no_rope_layers (1 = RoPE),
// layer_types / attention_chunk_size, attn_temperature_tuning / attn_scale / floor_scale,
// use_qk_norm, the dense layers' intermediate_size_mlp.
void llama4_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void llama4_config_hf(const Json& cfg, ModelConfig& c);

// Cohere (command-r / cohere: Command R, R+, Aya 23 / Expanse; cohere2: Command R7B, Command A):
// LayerNorm without a bias, attention and MLP in parallel from one norm, RoPE on interleaved pairs,
// the logits times logit_scale (kept as its reciprocal in logit_scale, which divides), tied; q / k
// LayerNorms with a weight row per head where present (use_qk_norm). cohere2: a window over 3 of
// every 4 layers (GGUF: llama.cpp's fixed pattern; folders: layer_types / sliding_window_pattern),
// which alone rotate; the others attend fully without RoPE.
void cohere_config_gguf(const GGUFFile& g, ModelConfig& c, bool qk_norm, const std::string& path);

// MiniMax-M2 (minimax-m2; MiniMaxM2ForCausalLM): q / k RMS-normalised over all heads at once, NeoX
// RoPE on the first rotary_dim dimensions of each head (GGUF rope.dimension_count; a folder's
// rotary_dim or partial_rotary_factor), RoPE base 5e6 by default; experts on every layer
// (moe_loader).
void minimax_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void minimax_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c);
void cohere_config_hf(const Json& cfg, ModelConfig& c);
void glm4_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c);

// Qwen3.5 (qwen35, qwen35moe): its gated delta-net layers (config.delta) among gated attention
// layers with q / k norms and NeoX RoPE on the first rotated dimensions of each head. GGUF:
// {arch}.ssm.{conv_kernel, state_size (key head size), group_count (key heads), time_step_rank
// (value heads), inner_size (value heads x their size)}, full_attention_interval (every n-th layer
// attention; default 4), rope.dimension_count, the MTP layers left out; the value heads tiled as
// llama.cpp's converter orders them. config.json (Qwen3_5TextConfig): linear_* sizes, layer_types
// (else full_attention_interval), partial_rotary_factor (default 0.25).
void qwen35_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void qwen35_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c);

// LFM2 (lfm2): short-convolution layers (config.conv) among GQA attention layers with q / k norms.
// GGUF: {arch}.shortconv.l_cache (the taps), attention.head_count_kv as one count per layer (0: a
// convolution layer; `kv_per_layer`). config.json (Lfm2Config): conv_L_cache, layer_types ("conv" /
// "full_attention", else full_attn_idxs), norm_eps, and the feed-forward's size as
// Lfm2MLP derives it (block_auto_adjust_ff_dim: 2/3 of intermediate_size, times
// block_ffn_dim_multiplier, rounded up to block_multiple_of).
void lfm2_config_gguf(const GGUFFile& g, ModelConfig& c, const std::vector<int64_t>& kv_per_layer,
                      const std::string& path);
void lfm2_config_hf(const Json& cfg, ModelConfig& c);

// Granite 4.0-H (granitehybrid; GraniteMoeHybridForCausalLM): Granite's multipliers, Mamba-2 layers
// (config.ssm) among attention layers without RoPE unless the file asks for it, a dense shared MLP
// or experts beside it. GGUF: ssm.conv_kernel / inner_size / state_size / time_step_rank (the head
// count) / group_count, the Mamba-2 layers those whose attention.head_count_kv entry is 0,
// rope.scaling.finetuned the RoPE switch. config.json: mamba_d_conv / d_state / n_heads /
// n_groups / expand / conv_bias, layer_types ("mamba" / "attention", or transformers 5's
// "linear_attention" / "full_attention"), position_embedding_type ("rope" or not).
void granitehybrid_config_gguf(const GGUFFile& g, ModelConfig& c,
                               const std::vector<int64_t>& kv_per_layer, const std::string& path);
void granitehybrid_config_hf(const Json& cfg, ModelConfig& c);

// Nemotron-H (nemotron_h, nemotron_h_moe; NemotronHForCausalLM: Nemotron-H, Nemotron Nano 2,
// Nemotron 3 Nano): blocks of one sublayer each after one RMSNorm: Mamba-2 (config.ssm), attention
// without RoPE, or a relu2 feed-forward (dense or experts). GGUF: the ssm.* sizes, and per layer
// attention.head_count_kv (> 0: attention) and feed_forward_length (> 0: a feed-forward; neither:
// Mamba-2). config.json: mamba_num_heads x mamba_head_dim, ssm_state_size, n_groups, conv_kernel,
// use_conv_bias, layer_norm_epsilon, and the layers from layers_block_type or
// hybrid_override_pattern (M, *, -, E).
void nemotronh_config_gguf(const GGUFFile& g, ModelConfig& c,
                           const std::vector<int64_t>& kv_per_layer,
                           const std::vector<int64_t>& ff_per_layer, const std::string& path);
void nemotronh_config_hf(const Json& cfg, ModelConfig& c);
// Mamba-2 alone (mamba2 GGUF, Mamba2ForCausalLM: Mamba-Codestral, state-spaces' mamba2 models):
// every layer a Mamba-2 mixer after its norm (config.ssm, layer_no_ffn), no attention; the
// attention sizes hold the mixer's heads (unused).
void mamba2_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void mamba2_config_hf(const Json& cfg, ModelConfig& c);
// Mamba-1 alone (mamba GGUF, MambaForCausalLM / FalconMambaForCausalLM): every layer a Mamba-1
// mixer after its norm (config.mamba1, layer_no_ffn), no attention; Falcon-Mamba's weightless norms
// of dt, B and C (GGUF ssm.dt_b_c_rms, with the model's norm epsilon as llama.cpp applies it).
void mamba1_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void mamba1_config_hf(const Json& cfg, ModelConfig& c);
// Jamba (jamba GGUF, JambaForCausalLM): Mamba-1 layers with weighted norms of dt, B and C among
// attention layers without RoPE (GGUF: those with KV heads; HF: attn_layer_period / offset); the
// experts' layers are moe_loader's.
void jamba_config_gguf(const GGUFFile& g, ModelConfig& c, const std::vector<int64_t>& kv_per_layer,
                       const std::string& path);
void jamba_config_hf(const Json& cfg, ModelConfig& c);
// Falcon-H1 (falcon-h1 GGUF, FalconH1ForCausalLM): every layer attention and a Mamba-2 mixer side
// by side (parallel_ssm), the mixer's gated norm optional; a folder's mu-P multipliers (config.mup,
// embd_scale, logit_scale), which llama.cpp's converter folds into a GGUF file's weights.
void falconh1_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path);
void falconh1_config_hf(const Json& cfg, ModelConfig& c);
// One character per layer (M, *, -, E) from config.json's layers_block_type (or layer_types) or
// hybrid_override_pattern; checked against n_layer when it is > 0.
std::string nemotronh_layer_kinds(const Json& cfg, int n_layer);

// Gemma 4 (gemma4 GGUF, Gemma4TextConfig / a Gemma4ForConditionalGeneration folder's text_config):
// sliding and global layers with their own head sizes, KV heads and RoPE (the global layers'
// "proportional": rope_pairs), the last num_kv_shared_layers layers attending to an earlier layer's
// K/V (kv_source), their double-wide MLPs (layer_n_ff), per-layer embeddings (ple_dim), q / k
// norms with weights and V's without, scores unscaled, embeddings times sqrt(n_embd), the final
// soft-cap. GGUF: what llama.cpp's converter writes (key_length / key_length_swa, head_count_kv and
// feed_forward_length per layer, sliding_window_pattern, shared_kv_layers,
// embedding_length_per_layer_input, the rope_freqs tensor's 1 / 1e30 factors: rope_freqs, its
// values, or empty when absent).
void gemma4_config_gguf(const GGUFFile& g, ModelConfig& c, const std::vector<float>& rope_freqs,
                        const std::string& path);
void gemma4_config_hf(const Json& cfg, ModelConfig& c);
// Gemma 3n (gemma3n GGUF, Gemma3nTextConfig / a Gemma3nForConditionalGeneration folder's
// text_config): Gemma 4's reader for what the two share (one head size, plain RoPE on both kinds of
// layer), then AltUp's streams (altup), LAuReL's rank (laurel_rank, from a folder's config; a GGUF
// reader takes it from blk.0.laurel_l), each layer's activation sparsity (layer_sparsity: GGUF's
// activation_sparsity_scale holds the cuts; a folder's activation_sparsity_pattern the shares),
// altup_correct_scale. The active stream must be the first (altup_active_idx 0).
void gemma3n_config_hf(const Json& cfg, ModelConfig& c);

// A GELU MLP's activation (GPT-NeoX, Falcon, GPT-J, the GPT-2-era families) from the config's
// `key` (`dflt` when absent): true for the exact one ("gelu"), false for the tanh approximations;
// any other refused by name.
bool gelu_is_exact(const Json& cfg, const char* key, const char* dflt);

// AFMoE (Arcee Trinity): RoPE on the sliding layers alone (the global ones NoPE), the window on
// those, the attention's output gated by its own projection (attn_gate_proj), the embeddings
// scaled by sqrt(n_embd) (llama.cpp's files always; a folder's where mup_enabled). GGUF: every 4th
// layer global (llama.cpp's pattern) unless the file's sliding_window_pattern says otherwise;
// folders: layer_types, else global_attn_every_n_layers (4).
void afmoe_config_gguf(const GGUFFile& g, ModelConfig& c);
void afmoe_config_hf(const Json& cfg, ModelConfig& c);

// ALiBi's slope of each of n_head heads for a bias bound max_bias (8 in BLOOM and MPT): with n2 the
// largest power of two <= n_head, head h < n2 gets 2^(-max_bias (h + 1) / n2), the others the
// series between them, 2^(-max_bias (2 (h - n2) + 1) / (2 n2)) (the papers', transformers' and
// llama.cpp's formula), computed in double and rounded once.
std::vector<float> alibi_slopes(int n_head, double max_bias);

// The GPT-2-era families read through the Llama forward pass with switches: BLOOM (bloom), MPT
// (mpt), GPT-2 (gpt2) and StarCoder / SantaCoder (starcoder; HF gpt_bigcode). LayerNorms (with
// bias where the file has it), fused q / k / v, a GELU MLP (up, down), biases; positions by ALiBi
// (BLOOM, MPT: every layer NoPE, config.alibi) or by a learned table (GPT-2, StarCoder; an MPT file
// with position_embd too), BLOOM's LayerNorm of the embeddings. `has` tells which tensors the file
// holds.
void gpt_classic_config_gguf(const GGUFFile& g, ModelConfig& c,
                             const std::function<bool(const std::string&)>& has,
                             const std::string& path);
// The same from a folder (config keys already under Llama's names: gpt_classic_keys); refuses the
// options transformers does not run (MPT's qk_ln, multi-query or learned positions, GPT-2's
// scale_attn_by_inverse_layer_idx, BLOOM's apply_residual_connection_post_layernorm).
void gpt_classic_config_hf(const Json& cfg, ModelConfig& c);

}  // namespace ossa
