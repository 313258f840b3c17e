#include "model/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "kernels/vec_math.h"

namespace ossa {

using namespace fwd;

namespace {

// softplus as torch computes it (threshold 20: x itself above).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x[0 .. n) times 1 / sqrt(sum(x^2) + 1e-6), then times `scale` (transformers' l2norm; the sum in
// double, in index order).
void l2_normalize(float* x, int64_t n, float scale) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum + 1e-6));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * scale;
}

// One value head's gated delta rule, token by token: S (k_dim x v_dim, row i = key dimension i)
// decays by exp(g), takes the correction k (beta (v - S^T k))^T, and o = S^T q:
//   A(t):  S *= decay_t;  mem = S^T k_t                  (then delta = (v_t - mem) beta_t)
//   B(t):  S += k_t delta^T;  o_t = S^T q_t
// Within a chunk B(t) and A(t + 1) run as one pass: each row B(t) finishes is at once decayed and
// summed for t + 1. Every element of S sees the same operations (fused multiply-adds) in the same
// order whether the passes run apart or together, so the result does not depend on where chunks
// end. A pass takes 16 value columns at a time, down all key rows, with o and mem in registers;
// the sums over the key dimension run in index order.
struct HeadToken {
  const float *q, *k, *v;
  float decay, beta;
  float *mem, *o;  // mem: v_dim scratch for this token (then its delta)
};

// B(t) if kB (cur), then A(next) if kA, on the w <= 16 * kBlocks columns from j0 (S: their block,
// kd rows of w, below): kBlocks
// independent 16-column strips at once, so that the o and mem sums (each a chain of fused
// multiply-adds down the key rows) overlap instead of waiting on one another.
#if defined(__AVX512F__)
template <bool kB, bool kA, int kBlocks>
void delta_strips(float* S, int kd, int w, int j0, const HeadToken* cur, const HeadToken* next) {
  __mmask16 m[kBlocks];
  __m512 delta[kBlocks], acc_o[kBlocks], acc_m[kBlocks];
  for (int b = 0; b < kBlocks; ++b) {
    const int j = 16 * b;
    m[b] = j + 16 <= w ? __mmask16(0xFFFF) : j < w ? __mmask16((1u << (w - j)) - 1) : 0;
    delta[b] = kB ? _mm512_maskz_loadu_ps(m[b], cur->mem + j0 + j) : _mm512_setzero_ps();
    acc_o[b] = acc_m[b] = _mm512_setzero_ps();
  }
  const __m512 dec = _mm512_set1_ps(kA ? next->decay : 1.0f);
  float* r = S;
  for (int i = 0; i < kd; ++i, r += w) {
    const __m512 ki = _mm512_set1_ps(kB ? cur->k[i] : 0.0f),
                 qi = _mm512_set1_ps(kB ? cur->q[i] : 0.0f);
    const __m512 kn = _mm512_set1_ps(kA ? next->k[i] : 0.0f);
    for (int b = 0; b < kBlocks; ++b) {
      __m512 x = _mm512_maskz_loadu_ps(m[b], r + 16 * b);
      if (kB) {
        x = _mm512_fmadd_ps(ki, delta[b], x);
        acc_o[b] = _mm512_fmadd_ps(x, qi, acc_o[b]);
      }
      if (kA) {
        x = _mm512_mul_ps(x, dec);
        acc_m[b] = _mm512_fmadd_ps(x, kn, acc_m[b]);
      }
      _mm512_mask_storeu_ps(r + 16 * b, m[b], x);
    }
  }
  for (int b = 0; b < kBlocks; ++b) {
    if (kB) _mm512_mask_storeu_ps(cur->o + j0 + 16 * b, m[b], acc_o[b]);
    if (kA) _mm512_mask_storeu_ps(next->mem + j0 + 16 * b, m[b], acc_m[b]);
  }
}

#endif

// The value columns are independent all through the recurrence (a column's mem, delta and o read
// only that column), so a head's state is kept in groups of 64 columns, each group a contiguous
// block of kd rows (32 KiB at k_dim 128: it stays in the L1 cache while the group runs all the
// chunk's tokens). Group g (columns [64g, 64g + w)) starts at S + kd * 64g.
constexpr int k_group_cols = 64;
void delta_pass(float* S, int kd, int w, int j0, const HeadToken* cur, const HeadToken* next) {
#if defined(__AVX512F__)
  if (cur && next)
    delta_strips<true, true, 4>(S, kd, w, j0, cur, next);
  else if (cur)
    delta_strips<true, false, 4>(S, kd, w, j0, cur, next);
  else
    delta_strips<false, true, 4>(S, kd, w, j0, cur, next);
#else
  for (int j = 0; j < w; ++j) {
    if (cur) cur->o[j0 + j] = 0.0f;
    if (next) next->mem[j0 + j] = 0.0f;
  }
  for (int i = 0; i < kd; ++i) {
    float* row = S + static_cast<int64_t>(i) * w;
    for (int j = 0; j < w; ++j) {
      float x = row[j];
      if (cur) {
        x = std::fma(cur->k[i], cur->mem[j0 + j], x);
        cur->o[j0 + j] = std::fma(x, cur->q[i], cur->o[j0 + j]);
      }
      if (next) {
        x *= next->decay;
        next->mem[j0 + j] = std::fma(x, next->k[i], next->mem[j0 + j]);
      }
      row[j] = x;
    }
  }
#endif
}

// One Mamba-2 head, one token: its hd x N state S (row p: the state of value p) decays by dA and
// takes dt x[p] B, and y[p] = S[p] . C + Dh x[p]. dtB (N floats, scratch) = dt B. Every state
// element sees the same operations whatever the chunking; the sums over the state run in a fixed
// order (16 lanes, then the lanes' reduction).
void mamba2_token(float* S, int hd, int N, const float* x, const float* B, const float* Cv,
                  float dt, float dA, float Dh, float* dtB, float* y) {
  for (int n = 0; n < N; ++n) dtB[n] = dt * B[n];
#if defined(__AVX512F__)
  const __m512 da = _mm512_set1_ps(dA);
  for (int p = 0; p < hd; ++p) {
    float* row = S + static_cast<int64_t>(p) * N;
    const __m512 xp = _mm512_set1_ps(x[p]);
    __m512 acc = _mm512_setzero_ps();
    for (int n = 0; n < N; n += 16) {
      const __mmask16 m = n + 16 <= N ? __mmask16(0xFFFF) : __mmask16((1u << (N - n)) - 1);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + n), da);
      v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dtB + n), xp, v);
      _mm512_mask_storeu_ps(row + n, m, v);
      acc = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, Cv + n), acc);
    }
    // (the lanes summed in a fixed tree: halves, quarters, pairs, then the last two)
    alignas(64) float l[16];
    _mm512_store_ps(l, acc);
    for (int i = 0; i < 8; ++i) l[i] += l[i + 8];
    for (int i = 0; i < 4; ++i) l[i] += l[i + 4];
    y[p] = ((l[0] + l[2]) + (l[1] + l[3])) + Dh * x[p];
  }
#else
  for (int p = 0; p < hd; ++p) {
    float* row = S + static_cast<int64_t>(p) * N;
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) {
      row[n] = std::fma(dtB[n], x[p], row[n] * dA);
      acc = std::fma(row[n], Cv[n], acc);
    }
    y[p] = acc + Dh * x[p];
  }
#endif
}

}  // namespace

void causal_conv(const ForwardState& s, const Batch& batch, int layer, const float* in, int64_t ld,
                 int64_t C, const float* wt, int K, bool silu, float* outs, int threads,
                 const float* bias) {
  const int n_seqs = batch.n_seqs();
  constexpr int64_t k_chans = 256;
  const int64_t n_blocks = (C + k_chans - 1) / k_chans;
  parallel_for(
      static_cast<int64_t>(n_seqs) * n_blocks, 1, threads, [&](int64_t b0, int64_t b1, int) {
        for (int64_t item = b0; item < b1; ++item) {
          const int sq = static_cast<int>(item / n_blocks);
          const int64_t c0 = (item % n_blocks) * k_chans, w = std::min(C, c0 + k_chans) - c0;
          float* cs = layer_state(s, sq, layer) + c0;  // rows of C: [K - 1, C]
          const int t0 = batch.seq_start[sq], m = batch.seq_start[sq + 1] - t0;
          if (batch.positions[t0] == 0)
            for (int j = 0; j < K - 1; ++j) std::fill(cs + j * C, cs + j * C + w, 0.0f);
          // input i of [state; chunk], i < K - 1 + m
          auto input = [&](int i) {
            return i < K - 1 ? cs + int64_t{i} * C : in + (t0 + i - (K - 1)) * ld + c0;
          };
          for (int i = 0; i < m; ++i) {
            float* out = outs + (t0 + i) * C + c0;
            std::fill(out, out + w, 0.0f);
            for (int j = 0; j < K; ++j) {
              const float* x = input(i + j);
              const float* tap = wt + int64_t{j} * C + c0;
              for (int64_t ch = 0; ch < w; ++ch) out[ch] += tap[ch] * x[ch];
            }
            if (bias != nullptr)
              for (int64_t ch = 0; ch < w; ++ch) out[ch] += bias[c0 + ch];
            if (silu) silu_row(out, w);
          }
          // (row j takes input m + j: a later row, or a chunk input, never one already overwritten)
          for (int j = 0; j < K - 1; ++j)
            if (m + j < K - 1)
              std::copy(cs + int64_t{m + j} * C, cs + int64_t{m + j} * C + w, cs + int64_t{j} * C);
            else
              std::copy(input(m + j), input(m + j) + w, cs + int64_t{j} * C);
        }
      });
}

void delta_net_layer(ForwardState& s, const Batch& batch, int layer, int threads, Laps& laps) {
  const ModelConfig& c = s.model->config;
  const DeltaNetConfig& d = c.delta;
  const LayerWeights& L = s.model->weights.layers[layer];
  const int n = batch.n_tokens(), n_seqs = batch.n_seqs();
  const int kd = d.k_dim, vd = d.v_dim, K = d.conv_kernel, H = d.n_v_heads, NK = d.n_k_heads;
  const int64_t C = d.conv_dim(), V = int64_t{H} * vd;

  // Projections: the convolution's input, the output gate z, beta's and the decay's logits.
  const MatmulInput in =
      norm_for(s, f32(L.attn_norm), n, threads, {&L.ssm_qkv, &L.ssm_z, &L.ssm_beta, &L.ssm_alpha});
  laps.lap(kNorm);
  const MatmulTarget proj[4] = {{&L.ssm_qkv, s.dn_qkv.data(), C},
                                {&L.ssm_z, s.dn_z.data(), V},
                                {&L.ssm_beta, s.dn_b.data(), H},
                                {&L.ssm_alpha, s.dn_a.data(), H}};
  matmul_many(proj, 4, in);
  laps.lap(kQkv);

  auto fresh = [&](int sq) { return batch.positions[batch.seq_start[sq]] == 0; };

  causal_conv(s, batch, layer, s.dn_qkv.data(), C, C, f32(L.ssm_conv_t), K, true, s.dn_conv.data(),
              threads);

  // q and k of each key head L2-normalised (q also scaled by 1/sqrt(k_dim)), per token.
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(kd));
  per_token(n, threads, [&](int t) {
    float* row = s.dn_conv.data() + t * C;
    for (int h = 0; h < NK; ++h) {
      l2_normalize(row + int64_t{h} * kd, kd, q_scale);
      l2_normalize(row + int64_t{NK} * kd + int64_t{h} * kd, kd, 1.0f);
    }
  });
  laps.lap(kRope);

  // The recurrence: each (sequence, value head) runs its tokens in order.
  const float* a_neg = f32(L.ssm_a);
  const float* dt = f32(L.ssm_dt);
  const int64_t s_floats = int64_t{kd} * vd;
  // Items: (sequence, value head, group of 64 columns), each running its tokens in order with its
  // columns of S in the L1 cache.
  const int n_groups = (vd + k_group_cols - 1) / k_group_cols;
  const int64_t n_items = static_cast<int64_t>(n_seqs) * H * n_groups;
  parallel_for(n_items, 1, threads, [&](int64_t b0, int64_t b1, int) {
    for (int64_t item = b0; item < b1; ++item) {
      const int sq = static_cast<int>(item / (H * n_groups));
      const int h = static_cast<int>(item / n_groups % H);
      const int j0 = static_cast<int>(item % n_groups) * k_group_cols;
      const int j1 = std::min(vd, j0 + k_group_cols);
      const int w = j1 - j0;
      float* S = layer_state(s, sq, layer) + d.conv_floats() + h * s_floats +
                 int64_t{kd} * j0;  // (its group)
      if (fresh(sq)) std::fill(S, S + int64_t{kd} * w, 0.0f);
      const int kh = d.key_head(h);
      auto token = [&](int t) {
        const float* row = s.dn_conv.data() + t * C;
        const float g = a_neg[h] * softplus(s.dn_a[static_cast<size_t>(t * H + h)] + dt[h]);
        return HeadToken{row + int64_t{kh} * kd,
                         row + int64_t{NK} * kd + int64_t{kh} * kd,
                         row + 2 * int64_t{NK} * kd + int64_t{h} * vd,
                         std::exp(g),
                         sigmoid(s.dn_b[static_cast<size_t>(t * H + h)]),
                         s.dn_qkv.data() + t * C + int64_t{h} * vd,  // (the input row is spent)
                         s.dn_o.data() + t * V + int64_t{h} * vd};
      };
      const int t0 = batch.seq_start[sq], t1 = batch.seq_start[sq + 1];
      HeadToken cur = token(t0);
      delta_pass(S, kd, w, j0, nullptr, &cur);
      for (int t = t0; t < t1; ++t) {
        for (int j = j0; j < j1; ++j) cur.mem[j] = (cur.v[j] - cur.mem[j]) * cur.beta;  // delta
        if (t + 1 < t1) {
          const HeadToken next = token(t + 1);
          delta_pass(S, kd, w, j0, &cur, &next);
          cur = next;
        } else {
          delta_pass(S, kd, w, j0, &cur, nullptr);
        }
      }
    }
  });
  laps.lap(kAttention);

  // The gated norm: each head's output RMS-normalised (ssm_norm) times SiLU(z).
  per_token(n, threads, [&](int t) {
    float* o = s.dn_o.data() + t * V;
    const float* z = s.dn_z.data() + t * V;
    for (int h = 0; h < H; ++h) {
      float* oh = o + int64_t{h} * vd;
      rmsnorm_row(oh, f32(L.ssm_norm), vd, c.rms_eps, oh);
      swiglu_row(z + int64_t{h} * vd, oh, vd, oh);
    }
  });
  const MatmulInput out_in = prepare(s, s.dn_o.data(), n, V, threads, {&L.ssm_out});
  residual(s, L.ssm_out, out_in, n, threads);
  laps.lap(kWo);
}

void short_conv_layer(ForwardState& s, const Batch& batch, int layer, int threads, Laps& laps) {
  const ModelConfig& c = s.model->config;
  const LayerWeights& L = s.model->weights.layers[layer];
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd;
  const MatmulInput in = norm_for(s, f32(L.attn_norm), n, threads, {&L.sc_in});
  laps.lap(kNorm);
  matmul(L.sc_in, in, s.sc_bcx.data(), 3 * E);
  laps.lap(kQkv);
  per_token(n, threads, [&](int t) {  // x' = B * x' in place
    float* row = s.sc_bcx.data() + t * 3 * E;
    for (int64_t e = 0; e < E; ++e) row[2 * E + e] = row[e] * row[2 * E + e];
  });
  causal_conv(s, batch, layer, s.sc_bcx.data() + 2 * E, 3 * E, E, f32(L.sc_conv_t), c.conv.kernel,
              false, s.sc_y.data(), threads);
  per_token(n, threads, [&](int t) {  // y = C * conv
    const float* cr = s.sc_bcx.data() + t * 3 * E + E;
    float* y = s.sc_y.data() + t * E;
    for (int64_t e = 0; e < E; ++e) y[e] = cr[e] * y[e];
  });
  laps.lap(kAttention);
  const MatmulInput out_in = prepare(s, s.sc_y.data(), n, E, threads, {&L.sc_out});
  residual(s, L.sc_out, out_in, n, threads);
  laps.lap(kWo);
}

void mamba2_layer(ForwardState& s, const Batch& batch, int layer, int threads, Laps& laps,
                  float* out) {
  const ModelConfig& c = s.model->config;
  const Mamba2Config& m = c.ssm;
  const LayerWeights& L = s.model->weights.layers[layer];
  const int n = batch.n_tokens(), n_seqs = batch.n_seqs();
  const int H = m.n_heads, hd = m.head_dim(), N = m.d_state, G = m.n_groups;
  const int64_t D = m.d_inner, C = m.conv_dim(), P = m.proj_dim();

  const MatmulInput in = norm_for(s, f32(L.attn_norm), n, threads, {&L.ssm_in});
  laps.lap(kNorm);
  matmul(L.ssm_in, in, s.ssm_proj.data(), P);  // rows [z | x | B | C | dt]
  if (c.mup.active) {  // (Falcon-H1: the input's multiplier and the five segments')
    const int64_t GN = int64_t{G} * N, ends[5] = {D, 2 * D, 2 * D + GN, 2 * D + 2 * GN, P};
    per_token(n, threads, [&](int t) {
      float* row = s.ssm_proj.data() + t * P;
      for (int64_t seg = 0, j = 0; seg < 5; ++seg) {
        const float f = c.mup.ssm_in * c.mup.zxbcdt[seg];
        for (; j < ends[seg]; ++j) row[j] *= f;
      }
    });
  }
  laps.lap(kQkv);
  causal_conv(s, batch, layer, s.ssm_proj.data() + D, P, C, f32(L.ssm_conv_t), m.conv_kernel, true,
              s.ssm_xbc.data(), threads, L.ssm_conv_b.empty() ? nullptr : f32(L.ssm_conv_b));
  laps.lap(kRope);

  // The scan: each (sequence, head) runs its tokens in order, its state in the L1 cache.
  const float *a_neg = f32(L.ssm_a), *dt_bias = f32(L.ssm_dt), *skip = f32(L.ssm_d);
  parallel_for(static_cast<int64_t>(n_seqs) * H, 1, threads, [&](int64_t b0, int64_t b1, int) {
    std::vector<float> dtB(static_cast<size_t>(N));
    for (int64_t item = b0; item < b1; ++item) {
      const int sq = static_cast<int>(item / H), h = static_cast<int>(item % H), g = m.group(h);
      float* S = layer_state(s, sq, layer) + m.conv_floats() + int64_t{h} * hd * N;
      const int t0 = batch.seq_start[sq], t1 = batch.seq_start[sq + 1];
      if (batch.positions[t0] == 0) std::fill(S, S + int64_t{hd} * N, 0.0f);
      for (int t = t0; t < t1; ++t) {
        const float* row = s.ssm_xbc.data() + t * C;
        const float dt = softplus(s.ssm_proj[static_cast<size_t>(t * P + D + C + h)] + dt_bias[h]);
        mamba2_token(S, hd, N, row + int64_t{h} * hd, row + D + int64_t{g} * N,
                     row + D + int64_t{G + g} * N, dt, std::exp(dt * a_neg[h]), skip[h], dtB.data(),
                     s.ssm_y.data() + t * D + int64_t{h} * hd);
      }
    }
  });
  laps.lap(kAttention);

  // y * SiLU(z), RMS-normalised in n_groups groups.
  const int64_t gs = D / G;
  per_token(n, threads, [&](int t) {
    float* y = s.ssm_y.data() + t * D;
    swiglu_row(s.ssm_proj.data() + t * P, y, D, y);
    if (m.gated_norm)
      for (int g = 0; g < G; ++g)
        rmsnorm_row(y + g * gs, f32(L.ssm_norm) + g * gs, gs, c.rms_eps, y + g * gs);
    if (c.mup.active)
      for (int64_t j = 0; j < D; ++j) y[j] *= c.mup.ssm_out;
  });
  const MatmulInput out_in = prepare(s, s.ssm_y.data(), n, D, threads, {&L.ssm_out});
  if (out != nullptr)
    matmul(L.ssm_out, out_in, out, c.n_embd);
  else
    residual(s, L.ssm_out, out_in, n, threads);
  laps.lap(kWo);
}

namespace {

// x / sqrt(mean(x^2) + eps), times w where given (the norms of dt_low, B and C: Falcon-Mamba's
// without weights, Jamba's with).
void rms_in_place(float* x, int64_t n, float eps, const float* w) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss = std::fma(x[i], x[i], ss);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = w != nullptr ? w[i] * (x[i] * r) : x[i] * r;
}

// One Mamba-1 channel, one token: its N states h decay by exp(d a) and take dx B; returns h . C.
// (AVX-512: 16 states a step with exp16, the lanes summed in mamba2_token's fixed tree.)
float mamba1_channel(float* h, const float* a, const float* B, const float* Cv, int64_t N, float d,
                     float dx) {
#if defined(__AVX512F__)
  const __m512 dv = _mm512_set1_ps(d), dxv = _mm512_set1_ps(dx);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t n = 0; n < N; n += 16) {
    const __mmask16 m = n + 16 <= N ? __mmask16(0xFFFF) : __mmask16((1u << (N - n)) - 1);
    const __m512 decay = exp16(_mm512_mul_ps(dv, _mm512_maskz_loadu_ps(m, a + n)));
    const __m512 v = _mm512_fmadd_ps(dxv, _mm512_maskz_loadu_ps(m, B + n),
                                     _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m, h + n)));
    _mm512_mask_storeu_ps(h + n, m, v);
    acc = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, Cv + n), acc);
  }
  alignas(64) float l[16];
  _mm512_store_ps(l, acc);
  for (int i = 0; i < 8; ++i) l[i] += l[i + 8];
  for (int i = 0; i < 4; ++i) l[i] += l[i + 4];
  return (l[0] + l[2]) + (l[1] + l[3]);
#else
  float acc = 0.0f;
  for (int64_t k = 0; k < N; ++k) {
    h[k] = std::fma(dx, B[k], std::exp(d * a[k]) * h[k]);
    acc = std::fma(h[k], Cv[k], acc);
  }
  return acc;
#endif
}

}  // namespace

void mamba1_layer(ForwardState& s, const Batch& batch, int layer, int threads, Laps& laps) {
  const ModelConfig& c = s.model->config;
  const Mamba1Config& m = c.mamba1;
  const LayerWeights& L = s.model->weights.layers[layer];
  const int n = batch.n_tokens(), n_seqs = batch.n_seqs();
  const int64_t D = m.d_inner, N = m.d_state, R = m.dt_rank, X = m.x_proj_dim();
  float* xc = s.ssm_xbc.data();  // [n, D]: the convolved x
  float* dbc = xc + n * D;       // [n, X]: [dt_low | B | C]
  float* dt = dbc + n * X;       // [n, D]: dt_proj dt_low (before its bias and softplus)

  const MatmulInput in = norm_for(s, f32(L.attn_norm), n, threads, {&L.ssm_in});
  laps.lap(kNorm);
  matmul(L.ssm_in, in, s.ssm_proj.data(), 2 * D);  // rows [x | z]
  laps.lap(kQkv);
  causal_conv(s, batch, layer, s.ssm_proj.data(), 2 * D, D, f32(L.ssm_conv_t), m.conv_kernel, true,
              xc, threads, L.ssm_conv_b.empty() ? nullptr : f32(L.ssm_conv_b));
  laps.lap(kRope);
  MatmulInput x_in = prepare(s, xc, n, D, threads, {&L.ssm_x});
  matmul(L.ssm_x, x_in, dbc, X);
  per_token(n, threads, [&](int t) {  // dt_low gathered contiguous (ssm_y as scratch)
    float* row = dbc + t * X;
    if (m.dt_b_c_rms) {
      const bool wt = m.dt_b_c_weights;
      rms_in_place(row, R, m.bc_eps, wt ? f32(L.ssm_dt_norm) : nullptr);
      rms_in_place(row + R, N, m.bc_eps, wt ? f32(L.ssm_b_norm) : nullptr);
      rms_in_place(row + R + N, N, m.bc_eps, wt ? f32(L.ssm_c_norm) : nullptr);
    }
    std::copy(row, row + R, s.ssm_y.data() + t * R);
  });
  MatmulInput dt_in = prepare(s, s.ssm_y.data(), n, R, threads, {&L.ssm_dt_w});
  matmul(L.ssm_dt_w, dt_in, dt, D);
  laps.lap(kQkv);

  // The scan: each (sequence, block of channels) runs its tokens in order, its states in L1. Every
  // state element sees the same operations whatever the chunking; y's sum over the state runs in
  // order.
  const float *a_neg = f32(L.ssm_a), *dt_bias = f32(L.ssm_dt), *skip = f32(L.ssm_d);
  constexpr int64_t k_chans = 64;
  const int64_t n_blocks = (D + k_chans - 1) / k_chans;
  parallel_for(
      static_cast<int64_t>(n_seqs) * n_blocks, 1, threads, [&](int64_t b0, int64_t b1, int) {
        for (int64_t item = b0; item < b1; ++item) {
          const int sq = static_cast<int>(item / n_blocks);
          const int64_t c0 = (item % n_blocks) * k_chans, c1 = std::min(D, c0 + k_chans);
          float* S = layer_state(s, sq, layer) + m.conv_floats();
          const int t0 = batch.seq_start[sq], t1 = batch.seq_start[sq + 1];
          if (batch.positions[t0] == 0) std::fill(S + c0 * N, S + c1 * N, 0.0f);
          for (int t = t0; t < t1; ++t) {
            const float *B = dbc + t * X + R, *Cv = B + N, *x = xc + t * D;
            float* y = s.ssm_y.data() + t * D;
            for (int64_t ch = c0; ch < c1; ++ch) {
              const float d = softplus(dt[t * D + ch] + dt_bias[ch]), dx = d * x[ch];
              y[ch] = std::fma(skip[ch], x[ch],
                               mamba1_channel(S + ch * N, a_neg + ch * N, B, Cv, N, d, dx));
            }
          }
        }
      });
  laps.lap(kAttention);

  per_token(n, threads, [&](int t) {  // y * SiLU(z)
    float* y = s.ssm_y.data() + t * D;
    swiglu_row(s.ssm_proj.data() + t * 2 * D + D, y, D, y);
  });
  const MatmulInput out_in = prepare(s, s.ssm_y.data(), n, D, threads, {&L.ssm_out});
  residual(s, L.ssm_out, out_in, n, threads);
  laps.lap(kWo);
}

}  // namespace ossa
