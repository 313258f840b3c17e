#pragma once
// The Llama-family forward pass (Llama, SmolLM, Mistral, Qwen2 with qkv bias, Qwen3 with q/k norm)
// over one flattened Batch, against the paged K/V pool. ModelRunner owns the storage; this file
// holds only the math, so every buffer it touches was sized before the step began.
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/quant.h"
#include "model/batch.h"
#include "model/moe.h"
#include "model/weights.h"
#include "util/aligned.h"
#include "util/zero_pages.h"

namespace ossa {

// K/V pool and work buffers, planned for up to max_tokens tokens per step (see runner.h).
struct ForwardState {
  const Model* model = nullptr;
  int num_blocks = 0, block_size = 0, max_tokens = 0, max_threads = 1;
  void* kv = nullptr;  // the K/V pool, layout in runner.h
  KvType kv_type = KvType::F32;
  int64_t n_slots = 0;  // num_blocks * block_size

  // The buffers sized by max_tokens are mapped, not written, when planned (util/zero_pages.h): a
  // step touches the pages of the tokens it runs.
  ZeroPageVector<float> x, h, q, k, v, attn, tmp,
      gate;                    // [max_tokens, width]; gate holds swiglu(gate, up)
  ZeroPageVector<BlockQ8> xq;  // [max_tokens, max_width / 32]
  // dtype bfloat16 on AMX: matmul inputs written straight as bf16 tiles (kernels/matmul.h) by the
  // op that produces them: the norms' outputs (norm_tiles) and swiglu's (ffn_tiles).
  AlignedVector<uint16_t> norm_tiles, ffn_tiles;
  std::vector<float> inv_freq;                   // [head_dim / 2]
  std::vector<float> cos_sin;                    // [max_tokens, head_dim]
  std::vector<float> inv_freq_swa, cos_sin_swa;  // the sliding layers' (config.rope_theta_swa > 0)
  std::vector<float> inv_freq_long;              // LongRoPE: from original_max_position on
  ZeroPageVector<float> scores;                  // [max_threads, n_slots]
  std::vector<int32_t> token_seq;                // [max_tokens]
  MoeBuffers moe;                                // MoE layers' buffers (model/moe.h)
  // Latent attention (config.mla, model/mla.cpp): q before absorption [max_tokens, H * (N + R)],
  // its low-rank half [max_tokens, q_lora_rank], one head's gathered inputs [max_tokens, max(N, C)]
  // and the heads' outputs [max_tokens, H * V].
  ZeroPageVector<float> mla_q, mla_qa, mla_in, mla_o;
  // Qwen3.5 (config.delta, model/delta_net.h): the delta-net layers' projections [max_tokens,
  // conv_dim | V | n_v_heads | n_v_heads], convolved inputs [max_tokens, conv_dim] and outputs
  // [max_tokens, V]; the gated attention's [query | gate] rows [max_tokens, 2 * n_head *
  // head_dim]. The recurrent states: n_state_slots slots of config.state_floats() floats
  // (ModelRunner's pool).
  ZeroPageVector<float> dn_qkv, dn_z, dn_b, dn_a, dn_conv, dn_o, qg;
  // LFM2 (config.conv, model/short_conv.h): in_proj's rows [max_tokens, 3 n_embd] and the
  // convolution's output [max_tokens, n_embd].
  ZeroPageVector<float> sc_bcx, sc_y;
  // Mamba-2 (config.ssm, model/delta_net.h): in_proj's rows [max_tokens, proj_dim], the convolved
  // [x | B | C] [max_tokens, conv_dim] and the scan's outputs [max_tokens, d_inner].
  ZeroPageVector<float> ssm_proj, ssm_xbc, ssm_y;
  ZeroPageVector<float> par_out, mup_up;  // (Falcon-H1: the mixer's output; the MLP's up rows)
  // Gemma 4's per-layer inputs [max_tokens, n_layer * ple_dim] and its branch's gate [max_tokens,
  // ple_dim].
  ZeroPageVector<float> ple, ple_tok, ple_h;
  ZeroPageVector<float> router_in, moe_out;  // Gemma 4's MoE layers: [max_tokens, n_embd] each
  std::vector<float> ones;                   // [max head_dim] 1s: the weight of Gemma 4's V norm
  // Gemma 3n: AltUp's streams and predictions [altup, max_tokens, n_embd] each, the active stream
  // and the LAuReL branch [max_tokens, n_embd], LAuReL's middle [max_tokens, rank], the MLP's up
  // rows where the gate is made sparse [max_tokens, n_ff], the routers' outputs [max_tokens,
  // altup].
  ZeroPageVector<float> alt, alt_pred, active, laurel, laurel_mid, ffn_up;
  std::vector<float> altup_mod;
  float* states = nullptr;
  int n_state_slots = 0;
  int64_t slot_floats = 0;                 // config.state_floats()
  std::vector<int64_t> layer_state_start;  // [n_layer]: config.state_offset(layer)
  const int32_t* state_slots = nullptr;    // this step's: sequence s's state is slot state_slots[s]

  void plan(const Model& m, int num_blocks, int block_size, int max_tokens, void* kv_pool,
            KvType kv_type);
  // Layer `layer`'s K or V cache (elements of kv_type).
  void* k_cache(int layer) const;
  void* v_cache(int layer) const;
};

// logits: [batch.logits_rows.size(), n_vocab]. The batch must have been validated.
void llama_forward(ForwardState& s, const Batch& batch, float* logits);

}  // namespace ossa
