#include "model/gemma3.h"

#include <algorithm>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/forward_util.h"

namespace ossa {

using namespace fwd;

void gemma3_forward(ForwardState& s, const Batch& batch, float* logits) {
  const Model& m = *s.model;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd, F = c.n_ff, hd = c.head_dim;
  const int64_t Q = c.n_head * hd;
  const int threads = std::min(s.max_threads, parallel_threads());
  const bool local_rope = !s.cos_sin_swa.empty();
  Laps laps;

  fill_token_seq(s, batch);
  per_token(n, threads, [&](int t) {
    embed_row(s, batch.token_ids[t], s.x.data() + t * E);
    rope_cos_sin(batch.positions[t], s.inv_freq.data(), c.head_dim, s.cos_sin.data() + t * hd);
    if (local_rope)
      rope_cos_sin(batch.positions[t], s.inv_freq_swa.data(), c.head_dim,
                   s.cos_sin_swa.data() + t * hd);
  });
  laps.lap(kEmbed);

  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    const bool sliding = c.sliding(l);
    const std::vector<float>& cos_sin = sliding && local_rope ? s.cos_sin_swa : s.cos_sin;
    attention_qkv(s, batch, l, cos_sin.data(), threads, laps);
    AttentionArgs a = attention_args(s, batch, l, threads);
    a.scale = c.attn_scale;
    a.softcap = c.attn_softcap;
    a.window = sliding ? c.sliding_window : 0;
    paged_attention(a);
    laps.lap(kAttention);

    MatmulInput in = prepare(s, s.attn.data(), n, Q, threads, {&L.wo});
    matmul(L.wo, in, s.tmp.data(), E);
    add_normed(s, c.post_norms() ? f32(L.post_attn_norm) : nullptr, n, threads);
    laps.lap(kWo);
    in = norm_for(s, f32(L.ffn_norm), n, threads, {&L.w_gate, &L.w_up});
    laps.lap(kNorm);
    const bool tiles = !s.ffn_tiles.empty() && takes_bf16_tiles(L.w_gate) &&
                       takes_bf16_tiles(L.w_up) && takes_bf16_tiles(L.w_down);
    matmul_gate_up_swiglu(L.w_gate, L.w_up, in, s.gate.data(), F,
                          tiles ? s.ffn_tiles.data() : nullptr, Glu::GeluTanh);
    laps.lap(kGateUp);
    in = tiles ? MatmulInput{nullptr, nullptr, n, F, s.ffn_tiles.data()}
               : prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
    matmul(L.w_down, in, s.tmp.data(), E);
    add_normed(s, c.post_norms() ? f32(L.post_ffn_norm) : nullptr, n, threads);
    laps.lap(kDown);
  }

  output_logits(s, batch, threads, logits);  // (soft-capped when the config says)
  laps.lap(kOutput);
  count_step(n);
}

}  // namespace ossa
