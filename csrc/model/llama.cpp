#include "model/llama.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/dequantize.h"
#include "util/error.h"

namespace ossa {

void ForwardState::plan(const Model& m, int n_blocks, int blk_size, int n_tokens_max, void* kv_pool, KvType kv_t) {
  const ModelConfig& c = m.config;
  model = &m;
  num_blocks = n_blocks;
  block_size = blk_size;
  max_tokens = n_tokens_max;
  max_threads = std::max(omp_get_max_threads(), omp_get_num_procs());
  kv = kv_pool;
  kv_type = kv_t;
  n_slots = static_cast<int64_t>(n_blocks) * blk_size;
  const int64_t t = n_tokens_max;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  x.resize(t * c.n_embd);
  h.resize(t * c.n_embd);
  q.resize(t * q_dim);
  k.resize(t * kv_dim);
  v.resize(t * kv_dim);
  attn.resize(t * q_dim);
  tmp.resize(t * c.n_embd);
  gate.resize(t * c.n_ff);
  if (!m.weights.layers.empty() && takes_bf16_tiles(m.weights.layers[0].wq)) {
    norm_tiles.resize(static_cast<size_t>(bf16_tiles_elems(t, c.n_embd)));
    ffn_tiles.resize(static_cast<size_t>(bf16_tiles_elems(t, c.n_ff)));
  }
  const int64_t widest = std::max<int64_t>({c.n_embd, q_dim, c.n_ff});
  xq.resize(t * ((widest + k_qblock - 1) / k_qblock));
  inv_freq.resize(c.head_dim / 2);
  rope_inv_freq(c, inv_freq.data());
  cos_sin.resize(t * c.head_dim);
  scores.resize(static_cast<size_t>(max_threads) * k_heads_per_item * n_slots);
  token_seq.resize(t);
  moe.plan(c, n_tokens_max);
}

void* ForwardState::k_cache(int layer) const {
  const int64_t kv_dim = static_cast<int64_t>(model->config.n_head_kv) * model->config.head_dim;
  const int64_t bytes = n_slots * kv_dim * static_cast<int64_t>(kv_type_bytes(kv_type));
  return static_cast<uint8_t*>(kv) + static_cast<int64_t>(layer) * 2 * bytes;
}

void* ForwardState::v_cache(int layer) const {
  const int64_t kv_dim = static_cast<int64_t>(model->config.n_head_kv) * model->config.head_dim;
  return static_cast<uint8_t*>(k_cache(layer)) + n_slots * kv_dim * static_cast<int64_t>(kv_type_bytes(kv_type));
}

namespace {

// OSSA_PROFILE=1 in the environment: wall time per op of the forward pass, summed over the process
// and printed to stderr at exit (a developer tool; off by default, then each lap is one branch).
enum Op { kEmbed, kNorm, kQkv, kRope, kAttention, kWo, kGateUp, kDown, kOutput, kNumOps };
constexpr const char* k_op_names[kNumOps] = {"embed", "norm",         "qkv",  "rope/kv", "attention",
                                             "wo",    "gate/up+swiglu", "down", "output"};
std::atomic<int64_t> g_op_ns[kNumOps];
std::atomic<int64_t> g_op_tokens{0}, g_op_steps{0};

void print_profile() {
  int64_t total = 0;
  for (auto& v : g_op_ns) total += v.load();
  std::fprintf(stderr, "ossa forward profile: %lld steps, %lld tokens, %.1f ms\n",
               static_cast<long long>(g_op_steps.load()), static_cast<long long>(g_op_tokens.load()),
               static_cast<double>(total) * 1e-6);
  for (int i = 0; i < kNumOps; ++i)
    std::fprintf(stderr, "  %-15s %10.2f ms  %5.1f%%\n", k_op_names[i], static_cast<double>(g_op_ns[i].load()) * 1e-6,
                 total ? 100.0 * static_cast<double>(g_op_ns[i].load()) / static_cast<double>(total) : 0.0);
}

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("OSSA_PROFILE");
    const bool enabled = v != nullptr && v[0] != '\0' && v[0] != '0';
    if (enabled) std::atexit(print_profile);
    return enabled;
  }();
  return on;
}

struct Laps {
  bool on = profiling();
  std::chrono::steady_clock::time_point last = on ? std::chrono::steady_clock::now()
                                                  : std::chrono::steady_clock::time_point{};
  void lap(Op op) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    g_op_ns[op].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count(),
                          std::memory_order_relaxed);
    last = now;
  }
};

// f(t) for each token t < n: inline for one token, else spread over the pool in runs of `grain`.
template <class F>
void per_token(int n, int threads, F&& f, int64_t grain = 4) {
  if (n == 1) return f(0);
  parallel_for(n, grain, threads, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) f(static_cast<int>(t));
  });
}

// Prepares activations x[n, cols] for a set of weights sharing them: quantizes to 8-bit blocks
// once if any of them is quantized (only with core.set_quantized_activations(True)).
MatmulInput prepare(ForwardState& s, const float* x, int64_t n, int64_t cols, int threads,
                    std::initializer_list<const TensorView*> weights) {
  MatmulInput in{x, nullptr, n, cols};
  bool quant = false;
  if (quantized_activations())
    for (const TensorView* w : weights) quant |= !w->empty() && dtype_quantized(w->type);
  if (quant) {
    if (cols % k_qblock != 0) throw ModelError("a quantized weight needs rows that are a multiple of 32");
    const int64_t nb = cols / k_qblock;
    BlockQ8* xq = s.xq.data();
    per_token(static_cast<int>(n), threads,
              [&](int r) { quantize_rows_q8(x + r * cols, 1, cols, xq + r * nb); });
    in.q8 = xq;
  }
  return in;
}

// x[t] normalised for the matmuls of `weights`: as f32 rows in s.h, or (dtype bfloat16 on AMX)
// straight into s.norm_tiles, skipping the f32 rows and the matmul's own rounding pass.
MatmulInput norm_for(ForwardState& s, const float* norm_w, int n, int threads,
                     std::initializer_list<const TensorView*> weights) {
  const ModelConfig& c = s.model->config;
  const int64_t E = c.n_embd;
  bool tiles = !s.norm_tiles.empty();  // taking tiles implies rows of whole 32-value steps
  for (const TensorView* w : weights) tiles = tiles && takes_bf16_tiles(*w);
  if (!tiles) {
    per_token(n, threads, [&](int t) { rmsnorm_row(s.x.data() + t * E, norm_w, E, c.rms_eps, s.h.data() + t * E); });
    return prepare(s, s.h.data(), n, E, threads, weights);
  }
  per_token(n, threads, [&](int t) {
    thread_local AlignedVector<float> row;
    if (static_cast<int64_t>(row.size()) < E) row.assign(static_cast<size_t>(E), 0.0f);
    rmsnorm_row(s.x.data() + t * E, norm_w, E, c.rms_eps, row.data());
    bf16_tiles_row(row.data(), E, t, s.norm_tiles.data());
  });
  return MatmulInput{nullptr, nullptr, n, E, s.norm_tiles.data()};
}

// x += in @ W^T (the residual connection): added in the matmul's epilogue where the kernel can
// (dtype bfloat16 on AMX), else through s.tmp and add_row; the same f32 additions either way.
void residual(ForwardState& s, const TensorView& w, const MatmulInput& in, int n, int threads) {
  const int64_t E = s.model->config.n_embd;
  if (takes_bf16_tiles(w)) {
    const MatmulTarget t{&w, s.x.data(), E, true};
    matmul_many(&t, 1, in);
    return;
  }
  matmul(w, in, s.tmp.data(), E);
  per_token(n, threads, [&](int t) { add_row(s.x.data() + t * E, s.tmp.data() + t * E, E); });
}

void add_bias(float* y, const TensorView& b, int64_t n) {
  if (!b.empty()) add_row(y, reinterpret_cast<const float*>(b.data), n);
}

}  // namespace

void llama_forward(ForwardState& s, const Batch& batch, float* logits) {
  const Model& m = *s.model;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd, F = c.n_ff, hd = c.head_dim;
  const int64_t Q = c.n_head * hd, KV = c.n_head_kv * hd;
  const int threads = std::min(s.max_threads, parallel_threads());
  Laps laps;

  for (int sq = 0; sq < batch.n_seqs(); ++sq)
    for (int t = batch.seq_start[sq]; t < batch.seq_start[sq + 1]; ++t) s.token_seq[t] = sq;

  per_token(n, threads, [&](int t) {
    dequantize_row(w.tok_embd, batch.token_ids[t], s.x.data() + t * E);
    rope_cos_sin(batch.positions[t], s.inv_freq.data(), c.head_dim, s.cos_sin.data() + t * hd);
  });
  laps.lap(kEmbed);

  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    const float* attn_norm = reinterpret_cast<const float*>(L.attn_norm.data);
    MatmulInput in = norm_for(s, attn_norm, n, threads, {&L.wq, &L.wk, &L.wv});
    laps.lap(kNorm);
    const MatmulTarget qkv[3] = {{&L.wq, s.q.data(), Q}, {&L.wk, s.k.data(), KV}, {&L.wv, s.v.data(), KV}};
    matmul_many(qkv, 3, in);
    laps.lap(kQkv);
    void* k_cache = s.k_cache(l);
    void* v_cache = s.v_cache(l);
    per_token(n, threads, [&](int t) {
      float* q = s.q.data() + t * Q;
      float* k = s.k.data() + t * KV;
      float* v = s.v.data() + t * KV;
      add_bias(q, L.bq, Q);
      add_bias(k, L.bk, KV);
      add_bias(v, L.bv, KV);
      if (c.qk_norm) {
        const float* qn = reinterpret_cast<const float*>(L.q_norm.data);
        const float* kn = reinterpret_cast<const float*>(L.k_norm.data);
        for (int h = 0; h < c.n_head; ++h) rmsnorm_row(q + h * hd, qn, hd, c.rms_eps, q + h * hd);
        for (int h = 0; h < c.n_head_kv; ++h) rmsnorm_row(k + h * hd, kn, hd, c.rms_eps, k + h * hd);
      }
      const float* cs = s.cos_sin.data() + t * hd;
      rope_apply(q, c.n_head, c.head_dim, c.rope_style, cs);
      rope_apply(k, c.n_head_kv, c.head_dim, c.rope_style, cs);
      const int64_t slot = batch.slot_mapping[t];
      store_k(k_cache, s.kv_type, slot, s.block_size, KV, k);
      store_v(v_cache, s.kv_type, slot, KV, v);
    }, s.block_size);  // K is transposed per block: one thread writes a block's lines
    laps.lap(kRope);
    AttentionArgs a;
    a.q = s.q.data();
    a.ldq = Q;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.kv_type = s.kv_type;
    a.n_tokens = n;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = c.head_dim;
    a.block_size = s.block_size;
    a.positions = batch.positions.data();
    a.token_seq = s.token_seq.data();
    a.block_tables = batch.block_tables.data();
    a.block_table_start = batch.block_table_start.data();
    a.scratch = s.scores.data();
    a.scratch_stride = k_heads_per_item * s.n_slots;
    a.max_threads = threads;
    a.out = s.attn.data();
    a.ldo = Q;
    paged_attention(a);
    laps.lap(kAttention);

    in = prepare(s, s.attn.data(), n, Q, threads, {&L.wo});
    residual(s, L.wo, in, n, threads);
    laps.lap(kWo);
    if (L.moe.active()) {
      moe_forward(s, L, n, threads);  // model/moe.cpp
      laps.lap(kGateUp);
      continue;
    }
    const float* ffn_norm = reinterpret_cast<const float*>(L.ffn_norm.data);
    in = norm_for(s, ffn_norm, n, threads, {&L.w_gate, &L.w_up});
    laps.lap(kNorm);
    // bfloat16 compute on AMX: swiglu's output goes straight into the down matmul's bf16 tiles.
    const bool tiles = !s.ffn_tiles.empty() && takes_bf16_tiles(L.w_gate) && takes_bf16_tiles(L.w_up) &&
                       takes_bf16_tiles(L.w_down);
    matmul_gate_up_swiglu(L.w_gate, L.w_up, in, s.gate.data(), F,  // SwiGLU fused: see kernels/matmul.h
                          tiles ? s.ffn_tiles.data() : nullptr);
    laps.lap(kGateUp);
    if (tiles) {
      in = MatmulInput{nullptr, nullptr, n, F, s.ffn_tiles.data()};
    } else {
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
    }
    residual(s, L.w_down, in, n, threads);
    laps.lap(kDown);
  }

  const int n_out = static_cast<int>(batch.logits_rows.size());
  if (n_out > 0) {
    const float* out_norm = reinterpret_cast<const float*>(w.output_norm.data);
    for (int i = 0; i < n_out; ++i)
      rmsnorm_row(s.x.data() + batch.logits_rows[i] * E, out_norm, E, c.rms_eps, s.h.data() + i * E);
    MatmulInput in = prepare(s, s.h.data(), n_out, E, threads, {&w.output});
    matmul(w.output, in, logits, c.n_vocab);
  }
  laps.lap(kOutput);
  if (laps.on) {
    g_op_steps.fetch_add(1, std::memory_order_relaxed);
    g_op_tokens.fetch_add(n, std::memory_order_relaxed);
  }
}

}  // namespace ossa
