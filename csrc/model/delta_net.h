#pragma once
// Qwen3.5's gated delta-net layers (config.h DeltaNetConfig has the math): linear attention whose
// memory is a fixed-size recurrent state per sequence rather than K/V rows per token.
//
// The states live in ModelRunner's state pool, one slot per running sequence
// (Batch::state_slots), laid out per slot as each delta-net layer's in turn:
//
//   slot s: | layer l0: conv [(conv_kernel - 1) x conv_dim] | S [n_v_heads x k_dim x v_dim] |
//           | layer l1: ...                                                                 |
//
// A sequence's chunk whose first position is 0 starts from a zero state (a new sequence, or one
// preempted and recomputed); any other chunk continues the slot's state. Each sequence's tokens are
// run one after another in the recurrent form (no chunked algorithm), so a token's result is
// bitwise the same whatever the chunking, the batch around it or the thread count.
#include "model/batch.h"
#include "model/forward_util.h"
#include "model/llama.h"

namespace ossa {

// The delta-net layer `layer` for the batch: x += ssm_out(gated_norm(delta_rule(conv(norm(x) @
// ssm_qkv^T)), z)), reading and advancing each sequence's state.
void delta_net_layer(ForwardState& s, const Batch& batch, int layer, int threads, fwd::Laps& laps);

// Offset (floats) of layer `layer`'s state within a slot; -1 for a layer without one.
int64_t delta_state_offset(const ModelConfig& c, int layer);

}  // namespace ossa
