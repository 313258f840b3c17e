#include "model/mla.h"

#include <cstring>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace ossa {

using namespace fwd;

void mla_attention(ForwardState& s, const Batch& batch, int layer, const float* cos_sin,
                   int threads, Laps& laps) {
  const ModelConfig& c = s.model->config;
  const MlaConfig& a = c.mla;
  const LayerWeights& L = s.model->weights.layers[layer];
  const int n = batch.n_tokens();
  const int64_t H = c.n_head, N = a.qk_nope, R = a.qk_rope, V = a.v_head_dim, C = a.kv_lora_rank;
  const int64_t D = c.head_dim, QW = H * (N + R), QL = a.q_lora_rank;  // D = R + C
  // Projections of the normalised rows: q (or its low-rank half) and [c | k_r] into s.v.
  const TensorView& wq_first = QL > 0 ? L.wq_a : L.wq;
  const MatmulInput in = norm_for(s, reinterpret_cast<const float*>(L.attn_norm.data), n, threads,
                                  {&wq_first, &L.wkv_a});
  laps.lap(kNorm);
  float* qa = QL > 0 ? s.mla_qa.data() : s.mla_q.data();
  const MatmulTarget proj[2] = {{&wq_first, qa, QL > 0 ? QL : QW}, {&L.wkv_a, s.v.data(), C + R}};
  matmul_many(proj, 2, in);
  if (QL > 0) {
    const float* qn = reinterpret_cast<const float*>(L.q_a_norm.data);
    per_token(n, threads, [&](int t) { rmsnorm_row(qa + t * QL, qn, QL, c.rms_eps, qa + t * QL); });
    matmul(L.wq_b, prepare(s, qa, n, QL, threads, {&L.wq_b}), s.mla_q.data(), QW);
  }
  laps.lap(kQkv);
  // Each token's cached row [rope(k_r) | rmsnorm(c)], its K and its V, stored once in V's row
  // layout (ModelConfig::kv_shared); the rope part of each head's query.
  void* v_cache = s.v_cache(layer);
  const float* kv_norm = reinterpret_cast<const float*>(L.kv_a_norm.data);
  per_token(n, threads, [&](int t) {
    const float* kv = s.v.data() + t * (C + R);
    float* k = s.k.data() + t * D;
    const float* cs = cos_sin + t * D;
    rmsnorm_row(kv, kv_norm, C, c.rms_eps, k + R);
    std::memcpy(k, kv + C, static_cast<size_t>(R) * sizeof(float));
    rope_heads(k, 1, c, cs);  // (the first rope_dim = R values of the row)
    const int64_t slot = batch.slot_mapping[t];
    store_v(v_cache, s.kv_type, slot, D, k);
    float* q = s.q.data() + t * H * D;
    const float* qr = s.mla_q.data() + t * QW;
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(q + h * D, qr + h * (N + R) + N, static_cast<size_t>(R) * sizeof(float));
    rope_heads(q, static_cast<int>(H), c, cs);
  });
  laps.lap(kRope);
  // The absorbed queries: head h's latent part = wk_b[h] @ q_nope_h, written in place.
  float* gathered = s.mla_in.data();
  for (int64_t h = 0; h < H; ++h) {
    per_token(n, threads, [&](int t) {
      std::memcpy(gathered + t * N, s.mla_q.data() + t * QW + h * (N + R),
                  static_cast<size_t>(N) * sizeof(float));
    });
    matmul(L.wk_b[h], prepare(s, gathered, n, N, threads, {&L.wk_b[h]}), s.q.data() + h * D + R,
           H * D);
  }
  if (c.attn_temp_scale > 0.0f)  // (Mistral Large 3: the whole query row, as llama.cpp scales it)
    per_token(n, threads, [&](int t) {
      scale_by_temperature(c, batch.positions[t], s.q.data() + t * H * D, H * D);
    });
  laps.lap(kQkv);
  AttentionArgs args = attention_args(s, batch, layer, threads);
  args.scale = c.attn_scale;  // 1/sqrt(N + R), times YaRN's mscale squared
  args.k_rows = true;         // (K is the V row)
  paged_attention(args);
  laps.lap(kAttention);
  // Each head's output: wv_b[h] @ (the latent part of its attention output), then wo.
  for (int64_t h = 0; h < H; ++h) {
    per_token(n, threads, [&](int t) {
      std::memcpy(gathered + t * C, s.attn.data() + t * H * D + h * D + R,
                  static_cast<size_t>(C) * sizeof(float));
    });
    matmul(L.wv_b[h], prepare(s, gathered, n, C, threads, {&L.wv_b[h]}), s.mla_o.data() + h * V,
           H * V);
  }
  residual(s, L.wo, prepare(s, s.mla_o.data(), n, H * V, threads, {&L.wo}), n, threads);
  laps.lap(kWo);
}

}  // namespace ossa
