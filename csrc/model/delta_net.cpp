#include "model/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"

namespace ossa {

using namespace fwd;

namespace {

const float* f32(const TensorView& v) { return reinterpret_cast<const float*>(v.data); }

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

// One value head's gated delta rule over one token: S (k_dim x v_dim, row i = key dimension i)
// decays by `decay`, takes the correction k (beta (v - S^T k))^T, and o = S^T q. Two passes over
// S, each vectorised over the value dimension; the sums over the key dimension run in index order.
void delta_step(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                int kd, int vd, float* mem, float* o) {
  std::fill(mem, mem + vd, 0.0f);
  for (int i = 0; i < kd; ++i) {
    float* row = S + static_cast<int64_t>(i) * vd;
    const float ki = k[i];
    for (int j = 0; j < vd; ++j) {
      row[j] *= decay;
      mem[j] += row[j] * ki;
    }
  }
  for (int j = 0; j < vd; ++j) mem[j] = (v[j] - mem[j]) * beta;  // (the delta, in place)
  std::fill(o, o + vd, 0.0f);
  for (int i = 0; i < kd; ++i) {
    float* row = S + static_cast<int64_t>(i) * vd;
    const float ki = k[i], qi = q[i];
    for (int j = 0; j < vd; ++j) {
      row[j] += ki * mem[j];
      o[j] += row[j] * qi;
    }
  }
}

}  // namespace

int64_t delta_state_offset(const ModelConfig& c, int layer) {
  if (!c.delta.is_layer(layer)) return -1;
  int64_t off = 0;
  for (int l = 0; l < layer; ++l)
    if (c.delta.is_layer(l)) off += c.delta.layer_floats();
  return off;
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

  const int64_t slot_floats = c.state_floats();
  const int64_t off = delta_state_offset(c, layer);
  auto conv_state = [&](int sq) {
    return s.states + static_cast<int64_t>(s.state_slots[sq]) * slot_floats + off;
  };
  auto fresh = [&](int sq) { return batch.positions[batch.seq_start[sq]] == 0; };

  // The causal depthwise convolution and SiLU, per sequence and block of channels: token i of the
  // chunk reads the K - 1 inputs before it (the state's, then the chunk's own), tap by tap over a
  // block's channels at once (ssm_conv_t: the taps transposed, [K, C]); the state then keeps the
  // last K - 1 inputs.
  constexpr int64_t k_chans = 256;
  const int64_t n_blocks = (C + k_chans - 1) / k_chans;
  const float* wt = f32(L.ssm_conv_t);  // [K, C]
  parallel_for(
      static_cast<int64_t>(n_seqs) * n_blocks, 1, threads, [&](int64_t b0, int64_t b1, int) {
        for (int64_t item = b0; item < b1; ++item) {
          const int sq = static_cast<int>(item / n_blocks);
          const int64_t c0 = (item % n_blocks) * k_chans, w = std::min(C, c0 + k_chans) - c0;
          float* cs = conv_state(sq) + c0;  // rows of C: [K - 1, C]
          const int t0 = batch.seq_start[sq], m = batch.seq_start[sq + 1] - t0;
          if (fresh(sq))
            for (int j = 0; j < K - 1; ++j) std::fill(cs + j * C, cs + j * C + w, 0.0f);
          // input i of [state; chunk], i < K - 1 + m
          auto input = [&](int i) {
            return i < K - 1 ? cs + int64_t{i} * C : s.dn_qkv.data() + (t0 + i - (K - 1)) * C + c0;
          };
          for (int i = 0; i < m; ++i) {
            float* out = s.dn_conv.data() + (t0 + i) * C + c0;
            std::fill(out, out + w, 0.0f);
            for (int j = 0; j < K; ++j) {
              const float* x = input(i + j);
              const float* tap = wt + int64_t{j} * C + c0;
              for (int64_t ch = 0; ch < w; ++ch) out[ch] += tap[ch] * x[ch];
            }
            silu_row(out, w);
          }
          // (row j takes input m + j: a later row, or a chunk input, never one already
          // overwritten)
          for (int j = 0; j < K - 1; ++j)
            if (m + j < K - 1)
              std::copy(cs + int64_t{m + j} * C, cs + int64_t{m + j} * C + w, cs + int64_t{j} * C);
            else
              std::copy(input(m + j), input(m + j) + w, cs + int64_t{j} * C);
        }
      });

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
  parallel_for(static_cast<int64_t>(n_seqs) * H, 1, threads, [&](int64_t b0, int64_t b1, int) {
    for (int64_t item = b0; item < b1; ++item) {
      const int sq = static_cast<int>(item / H), h = static_cast<int>(item % H);
      float* S = conv_state(sq) + d.conv_floats() + h * s_floats;
      if (fresh(sq)) std::fill(S, S + s_floats, 0.0f);
      const int kh = d.key_head(h);
      for (int t = batch.seq_start[sq]; t < batch.seq_start[sq + 1]; ++t) {
        const float* row = s.dn_conv.data() + t * C;
        const float beta = sigmoid(s.dn_b[static_cast<size_t>(t * H + h)]);
        const float g = a_neg[h] * softplus(s.dn_a[static_cast<size_t>(t * H + h)] + dt[h]);
        float* o = s.dn_o.data() + t * V + int64_t{h} * vd;
        float* mem = s.dn_qkv.data() + t * C + int64_t{h} * vd;  // (the input row is spent)
        delta_step(S, row + int64_t{kh} * kd, row + int64_t{NK} * kd + int64_t{kh} * kd,
                   row + 2 * int64_t{NK} * kd + int64_t{h} * vd, std::exp(g), beta, kd, vd, mem, o);
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

}  // namespace ossa
