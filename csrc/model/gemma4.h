#pragma once
// The Gemma 4 (text) forward pass over one flattened Batch (model/gemma4.cpp; ossa.reference.gemma4
// is its twin): Gemma 3's sandwich norms and GeGLU with per-layer attention shapes (the global
// layers' wider heads, fewer KV heads, proportional RoPE, V from K's projection where wv is
// absent), q / k / v RMS-normalised per head (v without a weight) and unscaled scores, layers that
// attend to an earlier layer's K/V (config.kv_source), per-layer embeddings gating a residual
// branch after the feed-forward, each layer's output multiplier, the final soft-cap.
#include "model/batch.h"
#include "model/llama.h"

namespace ossa {

void gemma4_forward(ForwardState& s, const Batch& batch, float* logits);

}  // namespace ossa
