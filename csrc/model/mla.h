#pragma once
// DeepSeek V2 / V3's multi-head latent attention (config.mla), computed in the latent space.
//
// Per token, with H heads, N = qk_nope, R = qk_rope, V = v_head_dim, C = kv_lora_rank:
//
//   q        = x_n @ wq^T, or rmsnorm(x_n @ wq_a^T, q_a_norm) @ wq_b^T      [H, N + R]
//   [c, k_r] = x_n @ wkv_a^T;  c = rmsnorm(c, kv_a_norm)                      [C], [R]
//   transformers: k_h = [c @ wk_b[h]^T ... | rope(k_r)], v_h = wv_b[h] @ c, o_h = softmax(q_h.k_h)
//   v_h
//
// Since q_nope . (W c) = (W^T q_nope) . c, every head can attend to the one cached row
// [rope(k_r) | c] (head_dim R + C, one KV head): its query is [rope(q_r) | wk_b[h] @ q_nope]
// (wk_b[h] stored C x N, i.e. already as that product's matrix), and its output's latent part,
// mapped through wv_b[h], is o_h. The cache holds R + C values per token and layer (V and K rows
// alike) instead of H * (N + R + V), and the attention kernel is the ordinary paged one,
// grouped-query with every head in the group. The result equals transformers' up to float32
// rounding; a token's result depends on its own row alone (per-head matmuls of the kernels in
// kernels/matmul.h), as in the other layers.
#include "model/batch.h"
#include "model/forward_util.h"
#include "model/llama.h"

namespace ossa {

// x += the attention sublayer of `layer` (an MLA layer) for the batch's tokens, writing each
// token's cached row first. cos_sin: the tokens' RoPE rows ([n, head_dim], the first qk_rope used).
void mla_attention(ForwardState& s, const Batch& batch, int layer, const float* cos_sin,
                   int threads, fwd::Laps& laps);

}  // namespace ossa
