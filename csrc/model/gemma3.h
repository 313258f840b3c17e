#pragma once
// The Gemma forward pass (Gemma 3 text, Gemma 2, Gemma 1: config.gemma()) over one flattened Batch,
// against the paged K/V pool (the same ForwardState as the Llama family, llama.h). What differs
// from Llama:
//  - embeddings multiplied by sqrt(n_embd) (config.embd_scale);
//  - RMSNorm over each head of q and k (Gemma 3: config.qk_norm); norm weights stored as the factor
//    applied (HF's 1 + w);
//  - each sublayer's output normalised again before the residual addition (Gemma 2 and 3:
//    config.post_norms(), post_attn_norm / post_ffn_norm);
//  - sliding-window layers (config.layer_sliding) with their own RoPE base (Gemma 3), global layers
//    with the file's base and scaling; scores scaled by query_pre_attn_scalar^-1/2
//    (config.attn_scale) and soft-capped (Gemma 2: config.attn_softcap; transformers ignores
//    attn_logit_softcapping for Gemma 3); final logits optionally soft-capped (output_logits);
//  - GeGLU (tanh-approximate GELU) instead of SwiGLU.
#include "model/batch.h"
#include "model/llama.h"

namespace ossa {

// logits: [batch.logits_rows.size(), n_vocab]. The batch must have been validated.
void gemma3_forward(ForwardState& s, const Batch& batch, float* logits);

}  // namespace ossa
