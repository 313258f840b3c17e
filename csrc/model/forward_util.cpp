#include "model/forward_util.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "formats/dequantize.h"
#include "kernels/ops.h"
#include "util/aligned.h"
#include "util/error.h"

namespace ossa::fwd {

namespace {

constexpr const char* k_op_names[kNumOps] = {
    "embed", "norm", "qkv", "rope/kv", "attention", "wo", "gate/up+swiglu", "down", "output"};
std::atomic<int64_t> g_op_ns[kNumOps];
std::atomic<int64_t> g_op_tokens{0}, g_op_steps{0};

void print_profile() {
  int64_t total = 0;
  for (auto& v : g_op_ns) total += v.load();
  std::fprintf(stderr, "ossa forward profile: %lld steps, %lld tokens, %.1f ms\n",
               static_cast<long long>(g_op_steps.load()),
               static_cast<long long>(g_op_tokens.load()), static_cast<double>(total) * 1e-6);
  for (int i = 0; i < kNumOps; ++i)
    std::fprintf(
        stderr, "  %-15s %10.2f ms  %5.1f%%\n", k_op_names[i],
        static_cast<double>(g_op_ns[i].load()) * 1e-6,
        total ? 100.0 * static_cast<double>(g_op_ns[i].load()) / static_cast<double>(total) : 0.0);
}

}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("OSSA_PROFILE");
    const bool enabled = v != nullptr && v[0] != '\0' && v[0] != '0';
    if (enabled) std::atexit(print_profile);
    return enabled;
  }();
  return on;
}

void add_op_time(Op op, int64_t ns) { g_op_ns[op].fetch_add(ns, std::memory_order_relaxed); }

void count_step(int n_tokens) {
  if (!profiling()) return;
  g_op_steps.fetch_add(1, std::memory_order_relaxed);
  g_op_tokens.fetch_add(n_tokens, std::memory_order_relaxed);
}

MatmulInput matmul_input(bool quantized_activations, const float* x, int64_t n, int64_t cols,
                         BlockQ8* q8, int threads,
                         std::initializer_list<const TensorView*> weights) {
  MatmulInput in{x, nullptr, n, cols};
  bool quant = false, blocks = false;
  if (quantized_activations)
    for (const TensorView* w : weights) {
      quant |= takes_q8(*w);
      blocks |= needs_q8_blocks(*w);
    }
  in.quantized = quant;
  if (blocks) {
    if (cols % k_qblock != 0)
      throw ModelError("a quantized weight needs rows that are a multiple of 32");
    const int64_t nb = cols / k_qblock;
    per_token(static_cast<int>(n), threads,
              [&](int r) { quantize_rows_q8(x + r * cols, 1, cols, q8 + r * nb); });
    in.q8 = q8;
  }
  return in;
}

MatmulInput prepare(ForwardState& s, const float* x, int64_t n, int64_t cols, int threads,
                    std::initializer_list<const TensorView*> weights) {
  return matmul_input(s.model->quantized_activations, x, n, cols, s.xq.data(), threads, weights);
}

MatmulInput norm_for(ForwardState& s, const float* norm_w, int n, int threads,
                     std::initializer_list<const TensorView*> weights, const float* src,
                     const float* norm_b) {
  const ModelConfig& c = s.model->config;
  const int64_t E = c.n_embd;
  const float* x = src != nullptr ? src : s.x.data();
  bool tiles = !s.norm_tiles.empty();  // taking tiles implies rows of whole 32-value steps
  for (const TensorView* w : weights) tiles = tiles && takes_bf16_tiles(*w);
  if (norm_w == nullptr) {  // (OLMo 2: no norm before a sublayer: its input is x itself)
    if (!tiles) return prepare(s, x, n, E, threads, weights);
    per_token(n, threads, [&](int t) { bf16_tiles_row(x + t * E, E, t, s.norm_tiles.data()); });
    return MatmulInput{nullptr, nullptr, n, E, s.norm_tiles.data()};
  }
  if (!tiles) {
    per_token(n, threads,
              [&](int t) { norm_row(c, x + t * E, norm_w, E, s.h.data() + t * E, norm_b); });
    return prepare(s, s.h.data(), n, E, threads, weights);
  }
  per_token(n, threads, [&](int t) {
    thread_local AlignedVector<float> row;
    if (static_cast<int64_t>(row.size()) < E) row.assign(static_cast<size_t>(E), 0.0f);
    norm_row(c, x + t * E, norm_w, E, row.data(), norm_b);
    bf16_tiles_row(row.data(), E, t, s.norm_tiles.data());
  });
  return MatmulInput{nullptr, nullptr, n, E, s.norm_tiles.data()};
}

void residual(ForwardState& s, const TensorView& w, const MatmulInput& in, int n, int threads,
              const TensorView& bias, const TensorView& post_norm) {
  const int64_t E = s.model->config.n_embd;
  const float r = s.model->config.residual_scale;
  if (takes_bf16_tiles(w) && bias.empty() && r <= 0.0f && post_norm.empty()) {
    const MatmulTarget t{&w, s.x.data(), E, true};
    matmul_many(&t, 1, in);
    return;
  }
  matmul(w, in, s.tmp.data(), E);
  per_token(n, threads, [&](int t) {
    float* x = s.x.data() + t * E;
    float* y = s.tmp.data() + t * E;
    add_bias(y, bias, E);    // (gpt-oss's output bias: x + (in @ W^T + bias))
    if (!post_norm.empty())  // OLMo 2: x + norm(in @ W^T)
      rmsnorm_row(y, reinterpret_cast<const float*>(post_norm.data), E, s.model->config.rms_eps, y);
    add_residual(x, y, E, r);
  });
}

void token_cos_sin(const ForwardState& s, int32_t position, float* cs) {
  const ModelConfig& c = s.model->config;
  const int rot = c.rope_dim > 0 ? c.rope_dim : c.head_dim;
  const bool long_factors =
      !s.inv_freq_long.empty() && position >= c.rope_scaling.original_max_position;
  rope_cos_sin(position, long_factors ? s.inv_freq_long.data() : s.inv_freq.data(), rot, cs);
  if (c.rope_scaling.attn_factor != 1.0f)
    for (int i = 0; i < rot; ++i) cs[i] *= c.rope_scaling.attn_factor;
}

void rope_heads(float* x, int n_heads, const ModelConfig& c, const float* cs) {
  if (c.rope_dim <= 0 || c.rope_dim == c.head_dim)
    return rope_apply(x, n_heads, c.head_dim, c.rope_style, cs);
  for (int h = 0; h < n_heads; ++h)
    rope_apply(x + static_cast<int64_t>(h) * c.head_dim, 1, c.rope_dim, c.rope_style, cs);
}

void add_residual(float* x, const float* y, int64_t n, float scale) {
  if (scale > 0.0f) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i] * scale;
  } else {
    add_row(x, y, n);
  }
}

void add_bias(float* y, const TensorView& b, int64_t n) {
  if (!b.empty()) add_row(y, reinterpret_cast<const float*>(b.data), n);
}

void add_normed(ForwardState& s, const float* post_norm, int n, int threads) {
  const ModelConfig& c = s.model->config;
  const int64_t E = c.n_embd;
  per_token(n, threads, [&](int t) {
    float* y = s.tmp.data() + t * E;
    if (post_norm != nullptr) rmsnorm_row(y, post_norm, E, c.rms_eps, y);
    add_row(s.x.data() + t * E, y, E);
  });
}

void attention_qkv(ForwardState& s, const Batch& batch, int layer, const float* cos_sin,
                   int threads, Laps& laps) {
  const ModelConfig& c = s.model->config;
  const LayerWeights& L = s.model->weights.layers[layer];
  const int n = batch.n_tokens();
  const int64_t hd = c.head_dim, Q = c.n_head * hd, KV = c.n_head_kv * hd;
  const float* attn_norm = reinterpret_cast<const float*>(L.attn_norm.data);
  const float* attn_norm_b = reinterpret_cast<const float*>(L.attn_norm_b.data);  // (StarCoder2)
  const bool gate_proj = !L.wg.empty();  // (AFMoE: the gate's own projection, into s.qg)
  const MatmulInput in =
      gate_proj
          ? norm_for(s, attn_norm, n, threads, {&L.wq, &L.wk, &L.wv, &L.wg}, nullptr, attn_norm_b)
          : norm_for(s, attn_norm, n, threads, {&L.wq, &L.wk, &L.wv}, nullptr, attn_norm_b);
  laps.lap(kNorm);
  // (Qwen3.5's gated attention: wq's rows are [query | gate] per head, into s.qg)
  const bool fused_gate = c.attn_gate && !gate_proj;
  const MatmulTarget qkv[4] = {
      {&L.wq, fused_gate ? s.qg.data() : s.q.data(), fused_gate ? 2 * Q : Q},
      {&L.wk, s.k.data(), KV},
      {&L.wv, s.v.data(), KV},
      {&L.wg, s.qg.data(), Q}};
  matmul_many(qkv, gate_proj ? 4 : 3, in);
  laps.lap(kQkv);
  void* k_cache = s.k_cache(layer);
  void* v_cache = s.v_cache(layer);
  per_token(
      n, threads,
      [&](int t) {
        float* q = s.q.data() + t * Q;
        float* k = s.k.data() + t * KV;
        float* v = s.v.data() + t * KV;
        if (fused_gate)
          for (int h = 0; h < c.n_head; ++h)
            std::memcpy(q + h * hd, s.qg.data() + t * 2 * Q + h * 2 * hd, sizeof(float) * hd);
        add_bias(q, L.bq, Q);
        add_bias(k, L.bk, KV);
        add_bias(v, L.bv, KV);
        if (c.mup.active) {  // (Falcon-H1: the attention's input multiplier, the keys' too)
          for (int64_t e = 0; e < Q; ++e) q[e] *= c.mup.attn_in;
          for (int64_t e = 0; e < KV; ++e) k[e] *= c.mup.attn_in * c.mup.key;
          for (int64_t e = 0; e < KV; ++e) v[e] *= c.mup.attn_in;
        }
        if (c.qk_norm && !c.qk_norm_after_rope) {
          const float* qn = reinterpret_cast<const float*>(L.q_norm.data);
          const float* kn = reinterpret_cast<const float*>(L.k_norm.data);
          if (c.qk_norm_full()) {  // OLMo 2: over all heads at once
            rmsnorm_row(q, qn, Q, c.rms_eps, q);
            rmsnorm_row(k, kn, KV, c.rms_eps, k);
          } else {  // (Cohere: LayerNorm, one weight row per head)
            const int64_t step = c.qk_norm_heads ? hd : 0;
            for (int h = 0; h < c.n_head; ++h)
              norm_row(c, q + h * hd, qn + h * step, hd, q + h * hd);
            for (int h = 0; h < c.n_head_kv; ++h)
              norm_row(c, k + h * hd, kn + h * step, hd, k + h * hd);
          }
        }
        if (c.clamp_qkv > 0.0f) {  // OLMoE's clip_qkv (after the norms, as transformers)
          const float lim = c.clamp_qkv;
          for (int64_t e = 0; e < Q; ++e) q[e] = std::clamp(q[e], -lim, lim);
          for (int64_t e = 0; e < KV; ++e) k[e] = std::clamp(k[e], -lim, lim);
          for (int64_t e = 0; e < KV; ++e) v[e] = std::clamp(v[e], -lim, lim);
        }
        if (!c.nope(layer)) {  // (SmolLM3's NoPE layers attend without positions)
          const float* cs = cos_sin + t * hd;
          rope_heads(q, c.n_head, c, cs);
          rope_heads(k, c.n_head_kv, c, cs);
          if (c.qk_l2_norm) {  // (Llama 4: weightless, after RoPE)
            for (int h = 0; h < c.n_head; ++h)
              rmsnorm_row(q + h * hd, nullptr, hd, c.rms_eps, q + h * hd);
            for (int h = 0; h < c.n_head_kv; ++h)
              rmsnorm_row(k + h * hd, nullptr, hd, c.rms_eps, k + h * hd);
          }
        }
        if (c.qk_norm && c.qk_norm_after_rope) {  // (Hunyuan: weighted, per head, after RoPE)
          const float* qn = reinterpret_cast<const float*>(L.q_norm.data);
          const float* kn = reinterpret_cast<const float*>(L.k_norm.data);
          for (int h = 0; h < c.n_head; ++h) rmsnorm_row(q + h * hd, qn, hd, c.rms_eps, q + h * hd);
          for (int h = 0; h < c.n_head_kv; ++h)
            rmsnorm_row(k + h * hd, kn, hd, c.rms_eps, k + h * hd);
        }
        // (Ministral 3's long-context queries; Llama 4's in its NoPE layers)
        if (!c.attn_temp_nope || c.nope(layer)) scale_by_temperature(c, batch.positions[t], q, Q);
        const int64_t slot = batch.slot_mapping[t];
        store_k(k_cache, s.kv_type, slot, s.block_size, KV, k);
        store_v(v_cache, s.kv_type, slot, KV, v);
      },
      s.block_size);  // K is transposed per block: one thread writes a block's lines
  laps.lap(kRope);
}

void fill_token_seq(ForwardState& s, const Batch& batch) {
  for (int sq = 0; sq < batch.n_seqs(); ++sq)
    for (int t = batch.seq_start[sq]; t < batch.seq_start[sq + 1]; ++t) s.token_seq[t] = sq;
}

AttentionArgs attention_args(const ForwardState& s, const Batch& batch, int layer, int threads) {
  const ModelConfig& c = s.model->config;
  const int64_t Q = static_cast<int64_t>(c.n_head) * c.head_dim;
  AttentionArgs a;
  a.q = s.q.data();
  a.ldq = Q;
  a.k_cache = s.k_cache(layer);
  a.v_cache = s.v_cache(layer);
  a.kv_type = s.kv_type;
  a.n_tokens = batch.n_tokens();
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.block_size = s.block_size;
  a.positions = batch.positions.data();
  a.token_seq = s.token_seq.data();
  a.block_tables = batch.block_tables.data();
  a.block_table_start = batch.block_table_start.data();
  a.scratch = const_cast<float*>(s.scores.data());
  a.scratch_stride = k_heads_per_item * s.n_slots;
  a.max_threads = threads;
  a.out = const_cast<float*>(s.attn.data());
  a.ldo = Q;
  const TensorView& sinks = s.model->weights.layers[layer].sinks;
  a.sinks = sinks.empty() ? nullptr : reinterpret_cast<const float*>(sinks.data);
  return a;
}

void output_logits(ForwardState& s, const Batch& batch, int threads, float* logits) {
  const ModelConfig& c = s.model->config;
  const ModelWeights& w = s.model->weights;
  const int64_t E = c.n_embd;
  const int n_out = static_cast<int>(batch.logits_rows.size());
  if (n_out == 0) return;
  const float* out_norm = reinterpret_cast<const float*>(w.output_norm.data);
  const float* out_norm_b = reinterpret_cast<const float*>(w.output_norm_b.data);
  for (int i = 0; i < n_out; ++i)
    norm_row(c, s.x.data() + batch.logits_rows[i] * E, out_norm, E, s.h.data() + i * E, out_norm_b);
  MatmulInput in = prepare(s, s.h.data(), n_out, E, threads, {&w.output});
  matmul(w.output, in, logits, c.n_vocab);
  if (!w.output_b.empty())  // (Phi-2's lm_head bias)
    for (int i = 0; i < n_out; ++i)
      add_bias(logits + static_cast<int64_t>(i) * c.n_vocab, w.output_b, c.n_vocab);
  const int64_t total = static_cast<int64_t>(n_out) * c.n_vocab;
  if (c.final_softcap > 0.0f)
    for (int64_t i = 0; i < total; ++i)
      logits[i] = c.final_softcap * std::tanh(logits[i] / c.final_softcap);
  if (c.logit_scale > 0.0f)  // a division, as transformers does
    for (int64_t i = 0; i < total; ++i) logits[i] /= c.logit_scale;
}

void embed_row(const ForwardState& s, int32_t token, float* x, int32_t position) {
  const ModelConfig& c = s.model->config;
  const ModelWeights& w = s.model->weights;
  dequantize_row(w.tok_embd, token, x);
  if (c.embd_scale > 0.0f)
    for (int64_t e = 0; e < c.n_embd; ++e) x[e] *= c.embd_scale;
  if (c.pos_embd) {  // (GPT-2, StarCoder: wte + wpe)
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(c.n_embd));
    dequantize_row(w.pos_embd, position, row.data());
    for (int64_t e = 0; e < c.n_embd; ++e) x[e] += row[static_cast<size_t>(e)];
  }
  if (c.embd_norm)  // (BLOOM's word_embeddings_layernorm)
    norm_row(c, x, reinterpret_cast<const float*>(w.tok_embd_norm.data), c.n_embd, x,
             reinterpret_cast<const float*>(w.tok_embd_norm_b.data));
}

void check_positions(const ModelConfig& c, const ModelWeights& w, const Batch& batch) {
  if (!c.pos_embd) return;
  for (const int32_t p : batch.positions)
    if (p < 0 || p >= w.pos_embd.rows)
      throw InputError("position " + std::to_string(p) + " is beyond the model's " +
                       std::to_string(w.pos_embd.rows) + " learned positions");
}

}  // namespace ossa::fwd
