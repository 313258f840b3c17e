#pragma once
// Qwen3.5's gated delta-net layers (config.h DeltaNetConfig has the math), LFM2's short
// convolutions and Mamba-2 layers (ShortConvConfig, Mamba2Config): linear attention whose
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

// LFM2's short-convolution layer `layer` (config.h ShortConvConfig): x += sc_out(C * conv(B * x'))
// with [B | C | x'] = norm(x) @ sc_in^T, the convolution's last inputs in the layer's state.
void short_conv_layer(ForwardState& s, const Batch& batch, int layer, int threads, fwd::Laps& laps);

// The Mamba-2 layer `layer` (config.h Mamba2Config; Granite 4.0-H): x += ssm_out(group_norm(
// scan(conv([x | B | C])) + D x) * SiLU(z)) with [z | x | B | C | dt] = norm(x) @ ssm_in^T, each
// head's head_dim x d_state state in the sequence's slot after the convolution's inputs.
// With `out` ([n, n_embd]), the mixer's output goes there instead of into the residual (Falcon-H1's
// parallel layers add it beside the attention's).
void mamba2_layer(ForwardState& s, const Batch& batch, int layer, int threads, fwd::Laps& laps,
                  float* out = nullptr);
// One Mamba-1 layer (config.mamba1), residual included: norm, in_proj [x | z], the causal
// convolution and SiLU on x, x_proj [dt_low | B | C] (Falcon-Mamba: each RMS-normalised), dt_proj
// and softplus, the selective scan per channel (its state in the sequence's slot), y * SiLU(z),
// out_proj.
void mamba1_layer(ForwardState& s, const Batch& batch, int layer, int threads, fwd::Laps& laps);

// Layer `layer`'s state of batch sequence sq (its slot's part, ModelConfig::state_offset).
inline float* layer_state(const ForwardState& s, int sq, int layer) {
  return s.states + static_cast<int64_t>(s.state_slots[sq]) * s.slot_floats +
         s.layer_state_start[static_cast<size_t>(layer)];
}

// The causal depthwise convolution of each batch sequence's chunk in layer `layer`: out[t] =
// sum_j taps_t[j][c] * input(t - (K - 1) + j)[c] for c < channels (in: rows of ld floats, out:
// rows of `channels`), tap by tap in order; the inputs before the chunk come from the start of the
// layer's state (K - 1 rows of `channels`; zero when the chunk starts at position 0), which then
// keeps the chunk's last K - 1 inputs; `bias` (channels values, or none) added, then SiLU on the
// output when `silu`. (Qwen3.5's delta-net, LFM2's short convolution, Mamba-2.)
void causal_conv(const ForwardState& s, const Batch& batch, int layer, const float* in, int64_t ld,
                 int64_t channels, const float* taps_t, int K, bool silu, float* out, int threads,
                 const float* bias = nullptr);

}  // namespace ossa
