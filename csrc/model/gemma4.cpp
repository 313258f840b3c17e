#include "model/gemma4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/dequantize.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/forward_util.h"

namespace ossa {

using namespace fwd;

namespace {

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
    // (Gemma 3n's table is shorter than its vocabulary: tokens past it read row 0, as transformers)
    const int32_t id = batch.token_ids[t] < w.ple_tok_embd.rows ? batch.token_ids[t] : 0;
    dequantize_row(w.ple_tok_embd, id, tok);
    for (int64_t e = 0; e < LP; ++e) p[e] *= proj_scale;
    for (int l = 0; l < c.n_layer; ++l)
      rmsnorm_row(p + l * P, f32(w.ple_proj_norm), P, c.rms_eps, p + l * P);
    for (int64_t e = 0; e < LP; ++e) p[e] = (p[e] + tok[e] * tok_scale) * half;
  });
}

// Layer l's per-layer branch of the rows x, before its norm, into s.tmp ([n, n_embd]):
// proj(gelu_tanh(gate(x)) * the layer's per-layer inputs).
void per_layer_branch(ForwardState& s, const LayerWeights& L, int l, const float* x, int n,
                      int threads) {
  const ModelConfig& c = s.model->config;
  const int64_t E = c.n_embd, P = c.ple_dim, LP = c.n_layer * P;
  MatmulInput in = prepare(s, x, n, E, threads, {&L.ple_gate});
  matmul(L.ple_gate, in, s.ple_h.data(), P);
  per_token(n, threads, [&](int t) {
    float* g = s.ple_h.data() + t * P;
    geglu_row(g, s.ple.data() + t * LP + l * P, P, g);
  });
  in = prepare(s, s.ple_h.data(), n, P, threads, {&L.ple_proj});
  matmul(L.ple_proj, in, s.tmp.data(), E);
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

// sqrt(mean(x^2)) of a row, the mean in double (AltUp's stream magnitudes).
float magnitude(const float* x, int64_t n) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(std::sqrt(ss / static_cast<double>(n)));
}

// y = x times target / max(magnitude(x), sqrt(1e-5)) (transformers' altup projections' rescaling:
// the mean square clamped at 1e-5).
void rescale(float* y, int64_t n, float target) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(y[i]) * y[i];
  const float mean_sq = std::max(static_cast<float>(ss / static_cast<double>(n)), 1e-5f);
  const float mag = std::sqrt(mean_sq);
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * target / mag;
}

// AltUp's router: tanh(router @ (norm(x) / n_embd)), A values.
void modalities(const ModelConfig& c, const LayerWeights& L, const float* x, float* h, float* out) {
  const int64_t E = c.n_embd;
  rmsnorm_row(x, f32(L.altup_router_norm), E, c.rms_eps, h);
  const float scale = 1.0f / static_cast<float>(E);
  for (int64_t e = 0; e < E; ++e) h[e] *= scale;
  const float* r = f32(L.altup_router);
  for (int k = 0; k < c.altup; ++k) {
    double acc = 0.0;
    for (int64_t e = 0; e < E; ++e) acc += static_cast<double>(r[k * E + e]) * h[e];
    out[k] = std::tanh(static_cast<float>(acc));
  }
}

}  // namespace

// Gemma 3n: Gemma 4's attention, MLP and per-layer inputs inside AltUp's streams, LAuReL beside the
// attention, the first layers' MLP gates made sparse (docs/models.md has the order of operations).
void gemma3n_forward(ForwardState& s, const Batch& batch, float* logits) {
  const Model& m = *s.model;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd, P = c.ple_dim, A = c.altup, R = c.laurel_rank;
  const int64_t NE = int64_t{n} * E;
  const int threads = std::min(s.max_threads, parallel_threads());
  const int hd = c.head_dim;
  const float root_half = std::sqrt(2.0f);
  Laps laps;

  fill_token_seq(s, batch);
  per_token(n, threads, [&](int t) {
    embed_row(s, batch.token_ids[t], s.x.data() + t * E);
    rope_cos_sin(batch.positions[t], s.inv_freq.data(), hd, s.cos_sin.data() + t * hd);
    rope_cos_sin(batch.positions[t], s.inv_freq_swa.data(), hd, s.cos_sin_swa.data() + t * hd);
  });
  if (P > 0) per_layer_inputs(s, batch, n, threads);
  // The streams: the embeddings, and their projections rescaled to the embeddings' magnitude.
  float* alt = s.alt.data();
  float* pred = s.alt_pred.data();
  std::memcpy(alt, s.x.data(), sizeof(float) * static_cast<size_t>(NE));
  for (int64_t i = 1; i < A; ++i) {
    const TensorView& proj = w.altup_proj[static_cast<size_t>(i - 1)];
    MatmulInput in = prepare(s, s.x.data(), n, E, threads, {&proj});
    matmul(proj, in, alt + i * NE, E);
    per_token(n, threads,
              [&](int t) { rescale(alt + i * NE + t * E, E, magnitude(s.x.data() + t * E, E)); });
  }
  laps.lap(kEmbed);

  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const int64_t Q = int64_t{c.n_head} * hd, F = c.n_ff_of(l);
    // Predict: pred_j = sum_i coef[j][i] alt_i + alt_j, the coefficients from the active stream.
    per_token(n, threads, [&](int t) {
      float* mod = s.altup_mod.data() + t * A;
      modalities(c, L, alt + t * E, s.tmp.data() + t * E, mod);
      const float* W = f32(L.altup_predict);  // [A * A, A]
      std::vector<float> coef(static_cast<size_t>(A * A));
      for (int64_t k = 0; k < A * A; ++k) {
        float acc = 0.0f;
        for (int64_t q = 0; q < A; ++q) acc += W[k * A + q] * mod[q];
        coef[static_cast<size_t>(k)] = acc;
      }
      for (int64_t j = 0; j < A; ++j) {
        float* out = pred + j * NE + t * E;
        const float* own = alt + j * NE + t * E;
        for (int64_t e = 0; e < E; ++e) {
          float acc = 0.0f;
          for (int64_t i = 0; i < A; ++i) acc += alt[i * NE + t * E + e] * coef[j * A + i];
          out[e] = acc + own[e];
        }
      }
      std::memcpy(s.x.data() + t * E, pred + t * E, sizeof(float) * static_cast<size_t>(E));
      std::memcpy(s.active.data() + t * E, pred + t * E, sizeof(float) * static_cast<size_t>(E));
    });
    laps.lap(kNorm);
    // LAuReL: norm(active) + norm(right(left(norm(active)))).
    per_token(n, threads, [&](int t) {
      rmsnorm_row(s.active.data() + t * E, f32(L.attn_norm), E, c.rms_eps, s.laurel.data() + t * E);
    });
    MatmulInput in = prepare(s, s.laurel.data(), n, E, threads, {&L.laurel_l});
    matmul(L.laurel_l, in, s.laurel_mid.data(), R);
    in = prepare(s, s.laurel_mid.data(), n, R, threads, {&L.laurel_r});
    matmul(L.laurel_r, in, s.tmp.data(), E);
    per_token(n, threads, [&](int t) {
      float* y = s.tmp.data() + t * E;
      rmsnorm_row(y, f32(L.laurel_norm), E, c.rms_eps, y);
      add_row(s.laurel.data() + t * E, y, E);
    });
    // The attention of the active stream; then (active + norm(attn) + laurel) / sqrt(2).
    attention(s, batch, l, threads, laps);
    in = prepare(s, s.attn.data(), n, Q, threads, {&L.wo});
    matmul(L.wo, in, s.tmp.data(), E);
    per_token(n, threads, [&](int t) {
      float* y = s.tmp.data() + t * E;
      float* x = s.x.data() + t * E;
      const float* lau = s.laurel.data() + t * E;
      rmsnorm_row(y, f32(L.post_attn_norm), E, c.rms_eps, y);
      for (int64_t e = 0; e < E; ++e) x[e] = (y[e] + x[e] + lau[e]) / root_half;
    });
    laps.lap(kWo);
    // The MLP (GeGLU; the gate made sparse in the first layers), its output normalised, added.
    in = norm_for(s, f32(L.ffn_norm), n, threads, {&L.w_gate, &L.w_up});
    laps.lap(kNorm);
    const float mult =
        c.layer_sparsity.empty() ? -INFINITY : c.layer_sparsity[static_cast<size_t>(l)];
    if (std::isfinite(mult)) {  // gate = relu(gate - (mean + std * mult)), the std over the row
      const MatmulTarget gate_up[2] = {{&L.w_gate, s.gate.data(), F},
                                       {&L.w_up, s.ffn_up.data(), F}};
      matmul_many(gate_up, 2, in);
      per_token(n, threads, [&](int t) {
        float* g = s.gate.data() + t * F;
        double sum = 0.0;
        for (int64_t i = 0; i < F; ++i) sum += g[i];
        const double mean = sum / static_cast<double>(F);
        double ss = 0.0;
        for (int64_t i = 0; i < F; ++i) ss += (g[i] - mean) * (g[i] - mean);
        const float cutoff = static_cast<float>(mean) +
                             static_cast<float>(std::sqrt(ss / static_cast<double>(F))) * mult;
        for (int64_t i = 0; i < F; ++i) g[i] = std::max(g[i] - cutoff, 0.0f);
        geglu_row(g, s.ffn_up.data() + t * F, F, g);
      });
    } else {
      matmul_gate_up_swiglu(L.w_gate, L.w_up, in, s.gate.data(), F, nullptr, Glu::GeluTanh);
    }
    laps.lap(kGateUp);
    in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
    matmul(L.w_down, in, s.tmp.data(), E);
    add_normed(s, f32(L.post_ffn_norm), n, threads);
    laps.lap(kDown);
    // Correct: alt_i = pred_i + (out - pred_0) * (coef_i + 1), from the router over the output.
    per_token(n, threads, [&](int t) {
      float* mod = s.altup_mod.data() + t * A;
      const float* out = s.x.data() + t * E;
      modalities(c, L, out, s.tmp.data() + t * E, mod);
      const float* W = f32(L.altup_correct);  // [A, A]
      for (int64_t i = 0; i < A; ++i) {
        float acc = 0.0f;
        for (int64_t q = 0; q < A; ++q) acc += W[i * A + q] * mod[q];
        const float coef = acc + 1.0f;
        float* a = alt + i * NE + t * E;
        const float* p = pred + i * NE + t * E;
        for (int64_t e = 0; e < E; ++e) a[e] = (out[e] - pred[t * E + e]) * coef + p[e];
      }
      float* first = s.active.data() + t * E;  // (the corrected active stream, scaled)
      std::memcpy(first, alt + t * E, sizeof(float) * static_cast<size_t>(E));
      if (c.altup_correct_scale) {
        const float* scale = f32(L.altup_correct_scale);
        for (int64_t e = 0; e < E; ++e) first[e] *= scale[e];
      }
    });
    laps.lap(kNorm);
    if (P > 0) {  // the per-layer branch, added to the other streams
      per_layer_branch(s, L, l, s.active.data(), n, threads);
      per_token(n, threads, [&](int t) {
        float* y = s.tmp.data() + t * E;
        rmsnorm_row(y, f32(L.ple_norm), E, c.rms_eps, y);
        for (int64_t i = 1; i < A; ++i) add_row(alt + i * NE + t * E, y, E);
      });
      laps.lap(kDown);
    }
  }
  // The streams back to one: the others unembedded and rescaled to the active one's magnitude, the
  // mean of all.
  for (int64_t i = 1; i < A; ++i) {
    const TensorView& proj = w.altup_unembd[static_cast<size_t>(i - 1)];
    MatmulInput in = prepare(s, alt + i * NE, n, E, threads, {&proj});
    matmul(proj, in, pred + i * NE, E);
  }
  per_token(n, threads, [&](int t) {
    const float target = magnitude(alt + t * E, E);
    float* x = s.x.data() + t * E;
    std::memcpy(x, alt + t * E, sizeof(float) * static_cast<size_t>(E));
    for (int64_t i = 1; i < A; ++i) {
      float* u = pred + i * NE + t * E;
      rescale(u, E, target);
      add_row(x, u, E);
    }
    const float inv = 1.0f / static_cast<float>(A);
    for (int64_t e = 0; e < E; ++e) x[e] *= inv;
  });
  laps.lap(kNorm);

  output_logits(s, batch, threads, logits);  // (soft-capped)
  laps.lap(kOutput);
  count_step(n);
}

void gemma4_forward(ForwardState& s, const Batch& batch, float* logits) {
  if (s.model->config.altup > 0) return gemma3n_forward(s, batch, logits);
  const Model& m = *s.model;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd, P = c.ple_dim;
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
      per_layer_branch(s, L, l, s.x.data(), n, threads);
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
