#include "model/llama.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/delta_net.h"
#include "model/forward_util.h"
#include "model/mla.h"
#include "util/error.h"

namespace ossa {

namespace {

// RoPE frequencies: inv_freq[i] for i < rotated/2 (rotated = config.rope_dim or head_dim), after
// linear, Llama-3, LongRoPE or YaRN scaling (`long_factors`: LongRoPE's long divisors, else its
// short ones).
void rope_inv_freq(const ModelConfig& c, float* inv_freq, bool long_factors = false) {
  const int dim = c.rope_dim > 0 ? c.rope_dim : c.head_dim, half = dim / 2;
  const RopeScaling& s = c.rope_scaling;
  // YaRN (Hugging Face's _compute_yarn_parameters): the dimension at which a frequency turns `rot`
  // times over original_max_position; the ramp runs from beta_fast's dimension to beta_slow's.
  double ramp_lo = 0.0, ramp_hi = 0.0;
  if (s.type == "yarn") {
    const double log_base = std::log(static_cast<double>(c.rope_theta));
    auto dim_of = [&](double rot) {
      return dim * std::log(s.original_max_position / (rot * 2.0 * std::numbers::pi)) /
             (2.0 * log_base);
    };
    ramp_lo = dim_of(s.beta_fast);
    ramp_hi = dim_of(s.beta_slow);
    if (s.truncate) {
      ramp_lo = std::floor(ramp_lo);
      ramp_hi = std::ceil(ramp_hi);
    }
    ramp_lo = std::max(ramp_lo, 0.0);
    ramp_hi = std::min(ramp_hi, dim - 1.0);
    if (ramp_lo == ramp_hi) ramp_hi += 0.001;
  }
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / dim);
    if (!c.rope_freqs.empty()) f /= static_cast<double>(c.rope_freqs[static_cast<size_t>(i)]);
    if (s.type == "longrope") {
      // Phi-3's LongRoPE: each frequency divided by its own factor (the loader checked the
      // lengths).
      f /= static_cast<double>(long_factors ? s.long_factor[i] : s.short_factor[i]);
    } else if (s.type == "linear") {
      f /= s.factor;
    } else if (s.type == "llama3") {
      // Hugging Face's _compute_llama3_parameters: long wavelengths are slowed by `factor`,
      // short ones kept, the band between interpolated.
      const double low_wavelen = s.original_max_position / s.low_freq_factor;
      const double high_wavelen = s.original_max_position / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    } else if (s.type == "yarn") {
      // extrapolate = 1 keeps the frequency, 0 divides it by the factor.
      const double extrapolate = 1.0 - std::clamp((i - ramp_lo) / (ramp_hi - ramp_lo), 0.0, 1.0);
      f = f / s.factor * (1.0 - extrapolate) + f * extrapolate;
    }
    inv_freq[i] = static_cast<float>(f);
  }
}

}  // namespace

void ForwardState::plan(const Model& m, int n_blocks, int blk_size, int n_tokens_max, void* kv_pool,
                        KvType kv_t) {
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
  // (Gemma 4: the widest layer's heads and feed-forward)
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.max_head_dim();
  const int64_t kv_dim = c.max_kv_dim();
  const int64_t n_ff = c.max_n_ff();
  x.resize(t * c.n_embd);
  h.resize(t * c.n_embd);
  q.resize(t * q_dim);
  k.resize(t * kv_dim);
  v.resize(t * kv_dim);
  attn.resize(t * q_dim);
  tmp.resize(t * c.n_embd);
  gate.resize(t * n_ff);
  if (!m.weights.layers.empty() && takes_bf16_tiles(m.weights.layers[0].wq)) {
    norm_tiles.resize(static_cast<size_t>(bf16_tiles_elems(t, c.n_embd)));
    ffn_tiles.resize(static_cast<size_t>(bf16_tiles_elems(t, n_ff)));
  }
  int64_t widest = std::max<int64_t>({c.n_embd, q_dim, n_ff});
  if (c.ple_dim > 0) {  // (Gemma 4's per-layer inputs and branch)
    ple.resize(t * c.n_layer * c.ple_dim);
    ple_tok.resize(t * c.n_layer * c.ple_dim);
    ple_h.resize(t * c.ple_dim);
    widest = std::max<int64_t>(widest, c.ple_dim);
  }
  if (c.altup > 0) {  // (Gemma 3n)
    alt.resize(t * c.altup * c.n_embd);
    alt_pred.resize(t * c.altup * c.n_embd);
    active.resize(t * c.n_embd);
    laurel.resize(t * c.n_embd);
    laurel_mid.resize(t * std::max(c.laurel_rank, 1));
    ffn_up.resize(t * n_ff);
    altup_mod.resize(static_cast<size_t>(t * c.altup));
    widest = std::max<int64_t>(widest, c.laurel_rank);
  }
  if (c.mla.active()) {
    const MlaConfig& a = c.mla;
    const int64_t H = c.n_head;
    mla_q.resize(t * H * (a.qk_nope + a.qk_rope));
    mla_qa.resize(t * std::max(a.q_lora_rank, 1));
    mla_in.resize(t * std::max(a.qk_nope, a.kv_lora_rank));
    mla_o.resize(t * H * a.v_head_dim);
    v.resize(t * (a.kv_lora_rank + a.qk_rope));  // (the same size as a K row: head_dim)
    widest = std::max<int64_t>({widest, a.q_lora_rank, H * a.v_head_dim});
  }
  if (c.delta.active()) {
    const DeltaNetConfig& d = c.delta;
    const int64_t V = int64_t{d.n_v_heads} * d.v_dim;
    dn_qkv.resize(t * d.conv_dim());
    dn_conv.resize(t * d.conv_dim());
    dn_z.resize(t * V);
    dn_o.resize(t * V);
    dn_b.resize(t * d.n_v_heads);
    dn_a.resize(t * d.n_v_heads);
    widest = std::max<int64_t>(widest, V);
  }
  if (c.parallel_ssm || c.parallel_block) par_out.resize(t * c.n_embd);
  if (c.mup.active) mup_up.resize(t * c.n_ff);
  if (c.ssm.active()) {
    ssm_proj.resize(t * c.ssm.proj_dim());
    ssm_xbc.resize(t * c.ssm.conv_dim());
    ssm_y.resize(t * c.ssm.d_inner);
    widest = std::max<int64_t>(widest, c.ssm.d_inner);
  }
  if (c.mamba1.active()) {  // (ssm_proj: [x | z]; ssm_xbc: the convolved x, then [dt_low | B | C],
                            // then dt; ssm_y: y)
    const Mamba1Config& m1 = c.mamba1;
    ssm_proj.resize(t * 2 * m1.d_inner);
    ssm_xbc.resize(t * (2 * int64_t{m1.d_inner} + m1.x_proj_dim()));
    ssm_y.resize(t * m1.d_inner);
    widest = std::max<int64_t>(widest, m1.d_inner);
  }
  if (c.attn_gate) qg.resize(t * 2 * q_dim);
  slot_floats = c.state_floats();
  layer_state_start.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) layer_state_start[static_cast<size_t>(l)] = c.state_offset(l);
  if (c.conv.active()) {
    sc_bcx.resize(t * 3 * c.n_embd);
    sc_y.resize(t * c.n_embd);
  }
  xq.resize(t * ((widest + k_qblock - 1) / k_qblock));
  if (c.gemma4()) {  // (the global layers' proportional table, the sliding layers' own)
    int hd_full = c.head_dim;
    for (int l = 0; l < c.n_layer; ++l)
      if (!c.sliding(l)) hd_full = c.head_dim_of(l);
    inv_freq.assign(static_cast<size_t>(hd_full / 2), 0.0f);
    for (int i = 0; i < c.rope_pairs && i < hd_full / 2; ++i)
      inv_freq[static_cast<size_t>(i)] =
          static_cast<float>(1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / hd_full));
    cos_sin.resize(t * hd_full);
    ModelConfig local = c;
    local.rope_theta = c.rope_theta_swa;
    inv_freq_swa.resize(c.head_dim / 2);
    rope_inv_freq(local, inv_freq_swa.data());
    cos_sin_swa.resize(t * c.head_dim);
    ones.assign(static_cast<size_t>(std::max(c.max_head_dim(), c.n_embd)), 1.0f);
    if (c.moe.n_expert > 0) {
      router_in.resize(t * c.n_embd);
      moe_out.resize(t * c.n_embd);
    }
    scores.resize(static_cast<size_t>(max_threads) * k_heads_per_item * n_slots);
    token_seq.resize(t);
    moe.plan(c, n_tokens_max);
    return;
  }
  inv_freq.resize(c.head_dim / 2);  // (rope_inv_freq fills the rotated dimensions' half)
  rope_inv_freq(c, inv_freq.data());
  if (c.rope_scaling.type == "longrope") {
    inv_freq_long.resize(c.head_dim / 2);
    rope_inv_freq(c, inv_freq_long.data(), true);
  }
  cos_sin.resize(t * c.head_dim);
  if (c.rope_theta_swa > 0.0f) {  // the sliding layers' own table (Gemma 3): their base, no scaling
    ModelConfig local = c;
    local.rope_theta = c.rope_theta_swa;
    local.rope_scaling = RopeScaling{};
    inv_freq_swa.resize(c.head_dim / 2);
    rope_inv_freq(local, inv_freq_swa.data());
    cos_sin_swa.resize(t * c.head_dim);
  }
  scores.resize(static_cast<size_t>(max_threads) * k_heads_per_item * n_slots);
  token_seq.resize(t);
  moe.plan(c, n_tokens_max);
}

void* ForwardState::k_cache(int layer) const {
  OSSA_ASSERT(model->config.has_kv(layer));  // (the pool holds the attention layers only)
  return static_cast<uint8_t*>(kv) +
         n_slots * model->config.kv_offset(layer) * static_cast<int64_t>(kv_type_bytes(kv_type));
}

void* ForwardState::v_cache(int layer) const {
  if (model->config.kv_shared()) return k_cache(layer);
  const int64_t kv_dim = model->config.kv_dim(layer);
  return static_cast<uint8_t*>(k_cache(layer)) +
         n_slots * kv_dim * static_cast<int64_t>(kv_type_bytes(kv_type));
}

using namespace fwd;

void llama_forward(ForwardState& s, const Batch& batch, float* logits) {
  const Model& m = *s.model;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const int n = batch.n_tokens();
  const int64_t E = c.n_embd, hd = c.head_dim;
  const int64_t Q = c.n_head * hd;
  const int threads = std::min(s.max_threads, parallel_threads());
  Laps laps;

  fill_token_seq(s, batch);
  check_positions(c, w, batch);

  per_token(n, threads, [&](int t) {
    // (Granite scales it; GPT-2 adds its position's row, BLOOM normalises it)
    embed_row(s, batch.token_ids[t], s.x.data() + t * E, batch.positions[t]);
    token_cos_sin(s, batch.positions[t], s.cos_sin.data() + t * hd);
    if (!s.cos_sin_swa.empty())  // (OLMo 3: the sliding layers' own unscaled table)
      rope_cos_sin(batch.positions[t], s.inv_freq_swa.data(), c.head_dim,
                   s.cos_sin_swa.data() + t * hd);
  });
  laps.lap(kEmbed);

  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    const int64_t F = c.n_ff_of(l);  // (deci: each layer's own feed-forward size)
    MatmulInput in;
    // The attention sublayer, residual included.
    auto attention = [&] {
      const bool local_rope = c.sliding(l) && !s.cos_sin_swa.empty();
      attention_qkv(s, batch, l, (local_rope ? s.cos_sin_swa : s.cos_sin).data(), threads, laps);
      AttentionArgs a = attention_args(s, batch, l, threads);
      a.window = c.sliding(l) ? c.sliding_window : 0;    // Phi-3 (Gemma 3 has its own file)
      if (c.attn_chunked) std::swap(a.window, a.chunk);  // (Llama 4: chunks of that size)
      a.scale = c.attn_scale;  // Granite's attention_multiplier (0: 1/sqrt(d))
      a.alibi = c.alibi.empty() ? nullptr : c.alibi.data();  // (BLOOM, MPT)
      paged_attention(a);
      if (c.attn_gate)  // (Qwen3.5: times sigmoid of each head's gate)
        per_token(n, threads, [&](int t) {
          // (AFMoE's own projection: [gate] per head; Qwen3.5's: wq's [query | gate] per head)
          const bool own = !L.wg.empty();
          const float* g = s.qg.data() + t * (own ? Q : 2 * Q) + (own ? 0 : hd);
          float* o = s.attn.data() + t * Q;
          for (int64_t h = 0; h < c.n_head; ++h)
            for (int64_t e = 0; e < hd; ++e)
              o[h * hd + e] *= 1.0f / (1.0f + std::exp(-g[h * (own ? hd : 2 * hd) + e]));
        });
      if (!L.attn_sub_norm.empty())  // (BitNet: the output's RMSNorm before wo)
        per_token(n, threads, [&](int t) {
          float* o = s.attn.data() + t * Q;
          rmsnorm_row(o, reinterpret_cast<const float*>(L.attn_sub_norm.data), Q, c.rms_eps, o);
        });
      if (c.mup.active)  // (Falcon-H1's attention_out_multiplier, before the linear wo)
        per_token(n, threads, [&](int t) {
          float* o = s.attn.data() + t * Q;
          for (int64_t e = 0; e < Q; ++e) o[e] *= c.mup.attn_out;
        });
      laps.lap(kAttention);

      in = prepare(s, s.attn.data(), n, Q, threads, {&L.wo});
      residual(s, L.wo, in, n, threads, L.bo, L.post_attn_norm);  // (gpt-oss's bias, OLMo 2's)
      laps.lap(kWo);
    };
    if (c.no_mixer(l)) {            // (Nemotron-H: a feed-forward block; deci's no-op attention)
    } else if (c.linear_attn(l)) {  // (deci: the attention replaced by wo(norm x), no K/V)
      in = norm_for(s, reinterpret_cast<const float*>(L.attn_norm.data), n, threads, {&L.wo});
      laps.lap(kNorm);
      residual(s, L.wo, in, n, threads);
      laps.lap(kWo);
    } else if (c.parallel_ssm && c.ssm.is_layer(l)) {
      // Falcon-H1: the mixer's output aside, the attention's into the residual, then the mixer's
      // (both read the same normalised input: the mixer leaves the residual as it is)
      mamba2_layer(s, batch, l, threads, laps, s.par_out.data());
      attention();
      per_token(n, threads, [&](int t) {
        float* x = s.x.data() + t * E;
        const float* o = s.par_out.data() + t * E;
        for (int64_t e = 0; e < E; ++e) x[e] += o[e];
      });
    } else if (c.delta.is_layer(l)) {
      delta_net_layer(s, batch, l, threads, laps);  // Qwen3.5 (model/delta_net.cpp)
    } else if (c.conv.is_layer(l)) {
      short_conv_layer(s, batch, l, threads, laps);  // LFM2 (model/delta_net.cpp)
    } else if (c.ssm.is_layer(l)) {
      mamba2_layer(s, batch, l, threads, laps);  // Granite 4.0-H (model/delta_net.cpp)
    } else if (c.mamba1.is_layer(l)) {
      mamba1_layer(s, batch, l, threads, laps);  // Mamba, Falcon-Mamba (model/delta_net.cpp)
    } else if (c.mla.active()) {
      mla_attention(s, batch, l, s.cos_sin.data(), threads, laps);  // DeepSeek (model/mla.cpp)
    } else if (c.parallel_block) {  // Cohere: x + attn(norm x) + mlp(norm x), in that order
      std::memcpy(s.par_out.data(), s.x.data(), sizeof(float) * static_cast<size_t>(n * E));
      attention();
    } else {
      attention();
    }
    if (c.no_ffn(l)) continue;  // (Nemotron-H: a mixer block)
    if (L.moe.active()) {
      moe_forward(s, L, n, threads);  // model/moe.cpp
      laps.lap(kGateUp);
      continue;
    }
    const float* ffn_norm = reinterpret_cast<const float*>(L.ffn_norm.data);
    if (c.parallel_block) {  // (the attention's norm of the layer's input; GPT-NeoX: the MLP's own)
      const TensorView& pn = c.parallel_norms ? L.ffn_norm : L.attn_norm;
      const TensorView& pn_b = c.parallel_norms ? L.ffn_norm_b : L.attn_norm_b;
      const float* attn_norm = reinterpret_cast<const float*>(pn.data);
      const float* attn_norm_b = reinterpret_cast<const float*>(pn_b.data);
      in = c.ffn_gelu  // (Phi-2's MLP: up and down alone; StableLM's norm bias)
               ? norm_for(s, attn_norm, n, threads, {&L.w_up}, s.par_out.data(), attn_norm_b)
               : norm_for(s, attn_norm, n, threads, {&L.w_gate, &L.w_up}, s.par_out.data(),
                          attn_norm_b);
      laps.lap(kNorm);
      if (c.ffn_gelu) {  // (Phi-2: down(gelu(up h + b_up)) + b_down)
        matmul(L.w_up, in, s.gate.data(), F);
        per_token(n, threads, [&](int t) {
          float* g = s.gate.data() + t * F;
          add_bias(g, L.b_up, F);
          c.ffn_relu ? relu_row(g, F) : c.gelu_erf ? gelu_erf_row(g, F) : gelu_tanh_row(g, F);
        });
      } else {
        matmul_gate_up_swiglu(L.w_gate, L.w_up, in, s.gate.data(), F);
      }
      laps.lap(kGateUp);
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
      residual(s, L.w_down, in, n, threads, L.b_down);
      laps.lap(kDown);
      continue;
    }
    if (c.ffn_gelu) {  // StarCoder2: down(gelu(up x + b_up)) + b_down (OPT: relu)
      in = norm_for(s, ffn_norm, n, threads, {&L.w_up}, nullptr,
                    reinterpret_cast<const float*>(L.ffn_norm_b.data));
      laps.lap(kNorm);
      matmul(L.w_up, in, s.gate.data(), F);
      per_token(n, threads, [&](int t) {
        float* g = s.gate.data() + t * F;
        add_bias(g, L.b_up, F);
        c.ffn_relu ? relu_row(g, F) : c.gelu_erf ? gelu_erf_row(g, F) : gelu_tanh_row(g, F);
      });
      laps.lap(kGateUp);
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
      residual(s, L.w_down, in, n, threads, L.b_down);
      laps.lap(kDown);
      continue;
    }
    if (c.ffn_xielu) {  // Apertus: down(xielu(up x)), the layer's own parameters
      in = norm_for(s, ffn_norm, n, threads, {&L.w_up});
      laps.lap(kNorm);
      matmul(L.w_up, in, s.gate.data(), F);
      const float* p = c.xielu.data() + static_cast<size_t>(l) * 4;
      per_token(n, threads,
                [&](int t) { xielu_row(s.gate.data() + t * F, F, p[0], p[1], p[2], p[3]); });
      laps.lap(kGateUp);
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
      residual(s, L.w_down, in, n, threads);
      laps.lap(kDown);
      continue;
    }
    if (c.ffn_relu2) {  // Nemotron-H: down(relu(up x)^2) (Nemotron's norm has a bias; Jais 2's MLP)
      in = norm_for(s, ffn_norm, n, threads, {&L.w_up}, nullptr,
                    reinterpret_cast<const float*>(L.ffn_norm_b.data));
      laps.lap(kNorm);
      matmul(L.w_up, in, s.gate.data(), F);
      per_token(n, threads, [&](int t) {
        add_bias(s.gate.data() + t * F, L.b_up, F);
        relu2_row(s.gate.data() + t * F, F);
      });
      laps.lap(kGateUp);
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
      residual(s, L.w_down, in, n, threads, L.b_down);
      laps.lap(kDown);
      continue;
    }
    in = norm_for(s, ffn_norm, n, threads, {&L.w_gate, &L.w_up}, nullptr,
                  reinterpret_cast<const float*>(L.ffn_norm_b.data));  // (StableLM's bias)
    laps.lap(kNorm);
    if (c.mup.active) {  // Falcon-H1: the gate's multiplier before SiLU, the output's before down
      matmul(L.w_gate, in, s.gate.data(), F);
      matmul(L.w_up, in, s.mup_up.data(), F);
      per_token(n, threads, [&](int t) {
        float* g = s.gate.data() + t * F;
        for (int64_t e = 0; e < F; ++e) g[e] *= c.mup.mlp_gate;
        swiglu_row(g, s.mup_up.data() + t * F, F, g);
        for (int64_t e = 0; e < F; ++e) g[e] *= c.mup.mlp_down;
      });
      laps.lap(kGateUp);
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
      residual(s, L.w_down, in, n, threads);
      laps.lap(kDown);
      continue;
    }
    // bfloat16 compute on AMX: swiglu's output goes straight into the down matmul's bf16 tiles.
    const bool tiles = !s.ffn_tiles.empty() && takes_bf16_tiles(L.w_gate) &&
                       takes_bf16_tiles(L.w_up) && takes_bf16_tiles(L.w_down) && !c.sub_norms;
    matmul_gate_up_swiglu(L.w_gate, L.w_up, in, s.gate.data(),
                          F,  // SwiGLU fused: see kernels/matmul.h
                          tiles ? s.ffn_tiles.data() : nullptr,
                          c.glu_relu2 ? Glu::Relu2 : Glu::Silu);
    if (c.sub_norms)  // (BitNet: the product's RMSNorm before w_down)
      per_token(n, threads, [&](int t) {
        float* g = s.gate.data() + t * F;
        rmsnorm_row(g, reinterpret_cast<const float*>(L.ffn_sub_norm.data), F, c.rms_eps, g);
      });
    laps.lap(kGateUp);
    if (tiles) {
      in = MatmulInput{nullptr, nullptr, n, F, s.ffn_tiles.data()};
    } else {
      in = prepare(s, s.gate.data(), n, F, threads, {&L.w_down});
    }
    residual(s, L.w_down, in, n, threads, {}, L.post_ffn_norm);  // (OLMo 2's norm)
    laps.lap(kDown);
  }

  output_logits(s, batch, threads, logits);  // (Granite divides them by logit_scale)
  laps.lap(kOutput);
  count_step(n);
}

}  // namespace ossa
