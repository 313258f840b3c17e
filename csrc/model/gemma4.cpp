#include "model/gemma4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/dequantize.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/forward_util.h"

namespace ossa {

using namespace fwd;

namespace {

const float* f32(const TensorView& v) { return reinterpret_cast<const float*>(v.data); }

// x += rmsnorm(s.tmp, norm): a sublayer's output, normalised, into the residual stream.
void add_normed(ForwardState& s, const float* norm, int n, int threads) {
  const ModelConfig& c = s.model->config;
  const int64_t E = c.n_embd;
  per_token(n, threads, [&](int t) {
    float* y = s.tmp.data() + t * E;
    rmsnorm_row(y, norm, E, c.rms_eps, y);
    add_row(s.x.data() + t * E, y, E);
  });
}

// The per-layer inputs of every token into s.ple ([n, n_layer * P]): the embeddings' projection
// (times n_embd^-1/2) normalised per layer, plus the token's row of the table (times sqrt(P)), the
// sum times 2^-1/2 (transformers' project_per_layer_inputs, in its order).
void per_layer_inputs(ForwardState& s, const Batch& batch, int n, int threads) {
  const ModelConfig& c = s.model->config;
  const ModelWeights& w = s.model->weights;
  const int64_t E = c.n_embd, P = c.ple_dim, LP = c.n_layer * P;
  MatmulInput in = prepare(s, s.x.data(), n, E, threads, {&w.ple_model_proj});
  matmul(w.ple_model_proj, in, s.ple.data(), LP);
  const float proj_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  const float tok_scale = std::sqrt(static_cast<float>(P));
  const float half = static_cast<float>(1.0 / std::sqrt(2.0));
  per_token(n, threads, [&](int t) {
    float* p = s.ple.data() + t * LP;
    float* tok = s.ple_tok.data() + t * LP;
    dequantize_row(w.ple_tok_embd, batch.token_ids[t], tok);
    for (int64_t e = 0; e < LP; ++e) p[e] *= proj_scale;
    for (int l = 0; l < c.n_layer; ++l)
      rmsnorm_row(p + l * P, f32(w.ple_proj_norm), P, c.rms_eps, p + l * P);
    for (int64_t e = 0; e < LP; ++e) p[e] = (p[e] + tok[e] * tok_scale) * half;
  });
}

// Layer l's attention: q (and, in a layer with its own K/V, k and v stored in its cache) from
// norm(x), then the attention over the cache of config.kv_source(l) into s.attn ([n, n_head *
// head_dim(l)]).
void attention(ForwardState& s, const Batch& batch, int l, int threads, Laps& laps) {
  const ModelConfig& c = s.model->config;
  const LayerWeights& L = s.model->weights.layers[static_cast<size_t>(l)];
  const int n = batch.n_tokens();
  const int hd = c.head_dim_of(l), kvh = c.n_head_kv_of(l);
  const int64_t Q = int64_t{c.n_head} * hd, KV = int64_t{kvh} * hd;
  const bool own = c.has_kv(l), k_eq_v = own && L.wv.empty();
  const float* attn_norm = f32(L.attn_norm);
  MatmulInput in = own ? (k_eq_v ? norm_for(s, attn_norm, n, threads, {&L.wq, &L.wk})
                                 : norm_for(s, attn_norm, n, threads, {&L.wq, &L.wk, &L.wv}))
                       : norm_for(s, attn_norm, n, threads, {&L.wq});
  laps.lap(kNorm);
  const MatmulTarget qkv[3] = {
      {&L.wq, s.q.data(), Q}, {&L.wk, s.k.data(), KV}, {&L.wv, s.v.data(), KV}};
  matmul_many(qkv, own ? (k_eq_v ? 2 : 3) : 1, in);
  laps.lap(kQkv);
  const bool sliding = c.sliding(l);
  const std::vector<float>& cos_sin = sliding ? s.cos_sin_swa : s.cos_sin;
  void* k_cache = own ? s.k_cache(l) : nullptr;
  void* v_cache = own ? s.v_cache(l) : nullptr;
  per_token(
      n, threads,
      [&](int t) {
        const float* cs = cos_sin.data() + t * hd;
        float* q = s.q.data() + t * Q;
        for (int h = 0; h < c.n_head; ++h)
          rmsnorm_row(q + h * hd, f32(L.q_norm), hd, c.rms_eps, q + h * hd);
        rope_apply(q, c.n_head, hd, RopeStyle::Neox, cs);
        if (!own) return;
        float* k = s.k.data() + t * KV;
        float* v = s.v.data() + t * KV;
        if (k_eq_v)
          std::memcpy(v, k, sizeof(float) * static_cast<size_t>(KV));  // (before k's norm)
        for (int h = 0; h < kvh; ++h) {
          rmsnorm_row(k + h * hd, f32(L.k_norm), hd, c.rms_eps, k + h * hd);
          rmsnorm_row(v + h * hd, s.ones.data(), hd, c.rms_eps, v + h * hd);
        }
        rope_apply(k, kvh, hd, RopeStyle::Neox, cs);
        const int64_t slot = batch.slot_mapping[t];
        store_k(k_cache, s.kv_type, slot, s.block_size, KV, k);
        store_v(v_cache, s.kv_type, slot, KV, v);
      },
      s.block_size);  // K is transposed per block: one thread writes a block's lines
  laps.lap(kRope);
  const int src = c.kv_source_of(l);
  AttentionArgs a = attention_args(s, batch, src, threads);  // (the source layer's cache)
  a.ldq = a.ldo = Q;
  a.head_dim = hd;
  a.n_head_kv = kvh;
  a.scale = c.attn_scale;
  a.window = sliding ? c.sliding_window : 0;
  paged_attention(a);
  laps.lap(kAttention);
}

}  // namespace

void gemma4_forward(ForwardState& s, const Batch& batch, float* logits) {
  const Model& m = *s.model;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd, P = c.ple_dim, LP = c.n_layer * P;
  const int threads = std::min(s.max_threads, parallel_threads());
  const int hd_full = static_cast<int>(s.inv_freq.size()) * 2, hd_swa = c.head_dim;
  Laps laps;

  fill_token_seq(s, batch);
  per_token(n, threads, [&](int t) {
    embed_row(s, batch.token_ids[t], s.x.data() + t * E);
    rope_cos_sin(batch.positions[t], s.inv_freq.data(), hd_full, s.cos_sin.data() + t * hd_full);
    rope_cos_sin(batch.positions[t], s.inv_freq_swa.data(), hd_swa,
                 s.cos_sin_swa.data() + t * hd_swa);
  });
  if (P > 0) per_layer_inputs(s, batch, n, threads);
  laps.lap(kEmbed);

  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const int64_t Q = int64_t{c.n_head} * c.head_dim_of(l), F = c.n_ff_of(l);
    attention(s, batch, l, threads, laps);
    MatmulInput in = prepare(s, s.attn.data(), n, Q, threads, {&L.wo});
    matmul(L.wo, in, s.tmp.data(), E);
    add_normed(s, f32(L.post_attn_norm), n, threads);
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
    if (c.moe.is_moe_layer(l)) {  // the experts beside the MLP, from the same residual
      const float root = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
      per_token(n, threads, [&](int t) {
        float* r = s.router_in.data() + t * E;
        rmsnorm_row(s.x.data() + t * E, s.ones.data(), E, c.rms_eps, r);
        const float* scale = f32(L.router_scale);
        for (int64_t e = 0; e < E; ++e) r[e] = r[e] * scale[e] * root;
      });
      laps.lap(kDown);
      MoeCall call;
      call.norm = f32(L.ffn_norm_2);
      call.router_in = s.router_in.data();
      call.out = s.moe_out.data();
      call.glu = Glu::GeluTanh;
      moe_forward(s, L, n, threads, call);
      per_token(n, threads, [&](int t) {  // norm(mlp, post_1) + norm(experts, post_2)
        float* y = s.tmp.data() + t * E;
        float* z = s.moe_out.data() + t * E;
        rmsnorm_row(y, f32(L.post_ffn_norm_1), E, c.rms_eps, y);
        rmsnorm_row(z, f32(L.post_ffn_norm_2), E, c.rms_eps, z);
        add_row(y, z, E);
      });
    }
    add_normed(s, f32(L.post_ffn_norm), n, threads);
    laps.lap(kDown);
    if (P > 0) {  // the per-layer branch: x += norm(proj(gelu(gate(x)) * input_l))
      in = prepare(s, s.x.data(), n, E, threads, {&L.ple_gate});
      matmul(L.ple_gate, in, s.ple_h.data(), P);
      per_token(n, threads, [&](int t) {
        float* g = s.ple_h.data() + t * P;
        geglu_row(g, s.ple.data() + t * LP + l * P, P, g);
      });
      in = prepare(s, s.ple_h.data(), n, P, threads, {&L.ple_proj});
      matmul(L.ple_proj, in, s.tmp.data(), E);
      add_normed(s, f32(L.ple_norm), n, threads);
      laps.lap(kDown);
    }
    if (!L.out_scale.empty()) {
      const float scale = f32(L.out_scale)[0];
      per_token(n, threads, [&](int t) {
        float* x = s.x.data() + t * E;
        for (int64_t e = 0; e < E; ++e) x[e] *= scale;
      });
    }
  }

  output_logits(s, batch, threads, logits);  // (soft-capped when the config says)
  laps.lap(kOutput);
  count_step(n);
}

}  // namespace ossa
