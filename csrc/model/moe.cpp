// The mixture-of-experts feed-forward (see moe.h for the math and the batch-invariance argument).
//
// One pass over up to pass_tokens tokens:
//
//   router logits ──> top-k per token ──> count rows per expert ──> group_start (prefix sums)
//   gather:   in[group_start[e] + i] = h[token]      (the i-th row routed to e, tokens ascending)
//   experts:  mid = swiglu(in @ gate_e^T, in @ up_e^T), out = mid @ down_e^T   (per expert)
//   combine:  x[t] += sum_j weight[t, j] * out[row_of[t, j]]  (+ the gated shared expert)
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "model/forward_util.h"
#include "model/llama.h"
#include "util/error.h"

namespace ossa {

namespace {

constexpr int k_pass_tokens = 512;             // tokens routed per pass: bounds the grouped buffers
constexpr int64_t k_expert_parallel_rows = 8;  // see moe_forward: up to this many rows per expert

// The chosen experts of one token from its router logits: the k largest logits (equal ones: the
// lower index first), softmax weights over all experts, renormalised over the chosen ones when
// asked (softmax_topk, gpt-oss: a softmax over the chosen logits alone), then sorted by expert
// index, the order in which the token sums them.
void route(const float* logits, int n_expert, int k, bool norm, bool softmax_topk, int32_t* chosen,
           float* weight, const float* selection_bias = nullptr, float norm_min = 0.0f) {
  if (selection_bias != nullptr) {  // ERNIE 4.5 MoE: choose by p + bias, weigh by p (f32, as HF)
    thread_local std::vector<float> p, score;
    p.resize(static_cast<size_t>(n_expert));
    score.resize(static_cast<size_t>(n_expert));
    const float top = *std::max_element(logits, logits + n_expert);
    double sum = 0.0;
    for (int e = 0; e < n_expert; ++e) sum += std::exp(static_cast<double>(logits[e] - top));
    for (int e = 0; e < n_expert; ++e) {
      p[e] = static_cast<float>(std::exp(static_cast<double>(logits[e] - top)) / sum);
      score[e] = p[e] + selection_bias[e];
    }
    route(score.data(), n_expert, k, false, true, chosen, weight);  // (the selection alone)
    float chosen_sum = 0.0f;
    for (int j = 0; j < k; ++j) chosen_sum += p[chosen[j]];
    const float d = std::max(chosen_sum, norm_min);
    for (int j = 0; j < k; ++j) weight[j] = p[chosen[j]] / d;
    return;
  }
  // Selection by partial insertion: chosen[0..k) holds the best so far, best first.
  int n_chosen = 0;
  for (int e = 0; e < n_expert; ++e) {
    if (n_chosen == k && !(logits[e] > logits[chosen[k - 1]]))
      continue;  // ties keep the earlier expert
    int at = n_chosen < k ? n_chosen++ : k - 1;
    while (at > 0 && logits[e] > logits[chosen[at - 1]]) {
      chosen[at] = chosen[at - 1];
      --at;
    }
    chosen[at] = e;
  }
  const float max = softmax_topk ? logits[chosen[0]]  // (the largest: chosen is best first)
                                 : *std::max_element(logits, logits + n_expert);
  std::sort(chosen, chosen + k);
  double sum = 0.0;
  if (softmax_topk)
    for (int j = 0; j < k; ++j) sum += std::exp(static_cast<double>(logits[chosen[j]] - max));
  else
    for (int e = 0; e < n_expert; ++e) sum += std::exp(static_cast<double>(logits[e] - max));
  double chosen_sum = 0.0;
  for (int j = 0; j < k; ++j) {
    weight[j] = static_cast<float>(std::exp(static_cast<double>(logits[chosen[j]] - max)) / sum);
    chosen_sum += weight[j];
  }
  if (norm && !softmax_topk)  // (over the chosen alone, the weights already sum to 1)
    for (int j = 0; j < k; ++j) weight[j] = static_cast<float>(weight[j] / chosen_sum);
}

// Phi-3.5-MoE's sparsemixer at inference (MoeConfig::sparsemixer; two experts): the best logit's
// expert (equal ones: the lower index), weighted by the softmax over the logits s with
// (top - s) / max(|s|, top) <= 2 eps (f32, as transformers) evaluated at it; then the best of the
// others likewise, over the others. Sorted by expert index.
void route_sparsemixer(const float* logits, int n_expert, float eps, int32_t* chosen,
                       float* weight) {
  const float cut = 2.0f * eps;
  int32_t first = -1;
  for (int pick = 0; pick < 2; ++pick) {
    int32_t best = -1;
    for (int e = 0; e < n_expert; ++e)
      if (e != first && (best < 0 || logits[e] > logits[best])) best = e;
    const float top = logits[best];
    double sum = 0.0;
    for (int e = 0; e < n_expert; ++e) {
      if (e == first) continue;
      const float factor = std::max(std::fabs(logits[e]), top);
      if ((top - logits[e]) / factor > cut) continue;  // (NaN, 0 / 0: kept, as torch)
      sum += std::exp(static_cast<double>(logits[e] - top));
    }
    chosen[pick] = best;
    weight[pick] = static_cast<float>(1.0 / sum);
    first = best;
  }
  if (chosen[1] < chosen[0]) {
    std::swap(chosen[0], chosen[1]);
    std::swap(weight[0], weight[1]);
  }
}

float sigmoid(float v) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
}

// DeepSeek V2 / V3 (MoeConfig::deepseek): scores p = the softmax (its sum in double) or the
// sigmoids of the logits; the choice scores p + bias where the layer has one (V3); with groups,
// only the experts of the topk_group best groups are eligible (a group's score: its best choice
// score for V2, the sum of its two best for V3; equal scores: the lower group first); the k best
// eligible choices (equal ones: the lower expert), each weighted by p (over the chosen ones' sum
// plus norm_eps with norm_topk_prob), times routed_scale; sorted by expert index.
void route_deepseek(const MoeConfig& mc, const float* logits, int32_t* chosen, float* weight,
                    const float* bias) {
  const int n = mc.n_expert, k = mc.n_expert_used;
  thread_local std::vector<float> p, choice, group_score;
  thread_local std::vector<int> groups;
  p.resize(static_cast<size_t>(n));
  choice.resize(static_cast<size_t>(n));
  if (mc.sigmoid_gating) {
    for (int e = 0; e < n; ++e) p[e] = sigmoid(logits[e]);
  } else {
    const float top = *std::max_element(logits, logits + n);
    double sum = 0.0;
    for (int e = 0; e < n; ++e) sum += std::exp(static_cast<double>(logits[e] - top));
    for (int e = 0; e < n; ++e)
      p[e] = static_cast<float>(std::exp(static_cast<double>(logits[e] - top)) / sum);
  }
  for (int e = 0; e < n; ++e) choice[e] = bias != nullptr ? p[e] + bias[e] : p[e];
  if (mc.n_group > 1) {
    const int G = mc.n_group, size = n / G;
    group_score.resize(static_cast<size_t>(G));
    groups.resize(static_cast<size_t>(G));
    for (int g = 0; g < G; ++g) {
      const float* c = choice.data() + static_cast<int64_t>(g) * size;
      float best = -INFINITY, second = -INFINITY;
      for (int i = 0; i < size; ++i) {
        if (c[i] > best) {
          second = best;
          best = c[i];
        } else if (c[i] > second) {
          second = c[i];
        }
      }
      group_score[g] = mc.group_top2 ? best + second : best;
      groups[g] = g;
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int a, int b) { return group_score[a] > group_score[b]; });
    for (int r = mc.topk_group; r < G; ++r)  // the groups left out: nothing eligible there
      std::fill_n(choice.data() + static_cast<int64_t>(groups[r]) * size, size, -INFINITY);
  }
  route(choice.data(), n, k, false, true, chosen, weight);  // (the selection alone)
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += weight[j] = p[chosen[j]];
  for (int j = 0; j < k; ++j) {
    if (mc.norm_topk_prob) weight[j] = weight[j] / (sum + mc.norm_eps);
    weight[j] *= mc.routed_scale;
  }
}

// gpt-oss's expert activation over rows x F values: mid = (u + 1) * g * sigmoid(alpha * g) with
// g = min(gate + b_gate, limit), u = clamp(up + b_up, -limit, limit) (transformers' order).
void clamped_swiglu(const MoeConfig& mc, const ExpertWeights& x, float* mid, const float* up,
                    int64_t rows, int64_t F) {
  const float alpha = mc.swiglu_alpha, limit = mc.swiglu_limit;
  const float* bg = reinterpret_cast<const float*>(x.b_gate.data);
  const float* bu = reinterpret_cast<const float*>(x.b_up.data);
  for (int64_t r = 0; r < rows; ++r) {
    float* g = mid + r * F;
    const float* u = up + r * F;
    for (int64_t i = 0; i < F; ++i) {
      const float gv = std::min(bg != nullptr ? g[i] + bg[i] : g[i], limit);
      const float uv = std::clamp(bu != nullptr ? u[i] + bu[i] : u[i], -limit, limit);
      const float glu = gv / (1.0f + std::exp(-alpha * gv));
      g[i] = (uv + 1.0f) * glu;
    }
  }
}

}  // namespace

void MoeBuffers::plan(const ModelConfig& c, int max_tokens) {
  const MoeConfig& m = c.moe;
  if (m.n_expert == 0) return;
  pass_tokens = std::min(max_tokens, k_pass_tokens);
  const size_t t = static_cast<size_t>(pass_tokens), k = static_cast<size_t>(m.n_expert_used);
  const size_t E = static_cast<size_t>(c.n_embd), F = static_cast<size_t>(m.n_ff_expert);
  const size_t S = static_cast<size_t>(m.n_ff_shared);
  logits.resize(t * static_cast<size_t>(m.n_expert));
  chosen.resize(t * k);
  weight.resize(t * k);
  row_of.resize(t * k);
  group_start.resize(static_cast<size_t>(m.n_expert) + 1);
  fill.resize(static_cast<size_t>(m.n_expert) + 1);
  active.resize(static_cast<size_t>(m.n_expert));
  in.resize(t * k * E);
  mid.resize(t * k * F);
  if (m.swiglu_alpha > 0.0f) up.resize(t * k * F);
  out.resize(t * k * E);
  in_q8.resize(t * k * ((E + k_qblock - 1) / k_qblock));
  mid_q8.resize(t * k * ((std::max(F, S) + k_qblock - 1) / k_qblock));
  if (S > 0) {
    shared_mid.resize(t * S);
    shared_out.resize(t * E);
    shared_gate.resize(t);
  }
}

void moe_forward(ForwardState& s, const LayerWeights& L, int n, int threads, const MoeCall& call) {
  const ModelConfig& c = s.model->config;
  const bool qa = s.model->quantized_activations;
  const MoeConfig& mc = c.moe;
  const MoeWeights& W = L.moe;
  MoeBuffers& b = s.moe;
  const int64_t E = c.n_embd, F = mc.n_ff_expert, S = mc.n_ff_shared;
  const int k = mc.n_expert_used, n_expert = mc.n_expert;
  const float* norm_w =
      call.norm != nullptr ? call.norm : reinterpret_cast<const float*>(L.ffn_norm.data);
  const float* expert_scale = reinterpret_cast<const float*>(W.expert_scale.data);
  // (the model's norm: Phi-3.5-MoE's LayerNorm with its bias; RMSNorm elsewhere)
  const float* norm_b =
      call.norm != nullptr ? nullptr : reinterpret_cast<const float*>(L.ffn_norm_b.data);
  fwd::per_token(n, threads, [&](int t) {
    if (norm_w == nullptr && !c.pre_norms())  // (FlexOlmo: no norm before the experts)
      std::copy_n(s.x.data() + t * E, E, s.h.data() + t * E);
    else
      fwd::norm_row(c, s.x.data() + t * E, norm_w, E, s.h.data() + t * E, norm_b);
  });

  for (int base = 0; base < n; base += b.pass_tokens) {
    const int m = std::min(b.pass_tokens, n - base);
    const float* h = s.h.data() + static_cast<int64_t>(base) * E;
    // Routing: exact f32 products (the router is never repacked, its input never rounded).
    const float* router_in =
        call.router_in != nullptr ? call.router_in + static_cast<int64_t>(base) * E : h;
    matmul(W.router, MatmulInput{router_in, nullptr, m, E}, b.logits.data(), n_expert);
    fwd::per_token(m, threads, [&](int t) {
      float* logits = b.logits.data() + static_cast<int64_t>(t) * n_expert;
      fwd::add_bias(logits, W.router_bias, n_expert);
      const float* bias =
          mc.selection_bias ? reinterpret_cast<const float*>(W.selection_bias.data) : nullptr;
      if (mc.sparsemixer) {  // Phi-3.5-MoE
        route_sparsemixer(logits, n_expert, mc.sparsemixer_eps, b.chosen.data() + t * k,
                          b.weight.data() + t * k);
      } else if (mc.deepseek) {
        route_deepseek(mc, logits, b.chosen.data() + t * k, b.weight.data() + t * k, bias);
      } else if (mc.input_weighted) {  // Llama 4: the k largest logits, sigmoid of each
        route(logits, n_expert, k, false, true, b.chosen.data() + t * k, b.weight.data() + t * k);
        for (int j = 0; j < k; ++j) b.weight[t * k + j] = sigmoid(logits[b.chosen[t * k + j]]);
      } else
        route(logits, n_expert, k, mc.norm_topk_prob, mc.softmax_topk, b.chosen.data() + t * k,
              b.weight.data() + t * k, bias, mc.norm_min);
      if (expert_scale != nullptr)  // (Gemma 4's per-expert scale, after the renormalisation)
        for (int j = 0; j < k; ++j) b.weight[t * k + j] *= expert_scale[b.chosen[t * k + j]];
    });
    // Group the (token, j) pairs by expert, tokens ascending within each expert.
    std::fill(b.group_start.begin(), b.group_start.end(), 0);
    for (int i = 0; i < m * k; ++i) ++b.group_start[b.chosen[i] + 1];
    for (int e = 0; e < n_expert; ++e) b.group_start[e + 1] += b.group_start[e];
    std::copy(b.group_start.begin(), b.group_start.end(), b.fill.begin());
    for (int i = 0; i < m * k; ++i) b.row_of[i] = b.fill[b.chosen[i]]++;
    fwd::per_token(m, threads, [&](int t) {
      for (int j = 0; j < k; ++j) {
        float* row = b.in.data() + static_cast<int64_t>(b.row_of[t * k + j]) * E;
        const float* src = h + static_cast<int64_t>(t) * E;
        if (mc.input_weighted) {  // (Llama 4: the weight on the expert's input)
          const float w = b.weight[t * k + j];
          for (int64_t i = 0; i < E; ++i) row[i] = src[i] * w;
        } else {
          std::memcpy(row, src, static_cast<size_t>(E) * sizeof(float));
        }
      }
    });
    // Each expert's gate/up and down over its rows. Few rows per expert (decode, small batches) and
    // enough experts for the threads: one parallel job over the experts, each expert's matmuls
    // running inline on one thread; otherwise expert after expert, each matmul spread over the
    // threads. Either way every row gets the matmul's one result for it (kernels/matmul.h).
    int n_active = 0;
    int64_t max_rows = 0;
    for (int e = 0; e < n_expert; ++e) {
      const int64_t rows = b.group_start[e + 1] - b.group_start[e];
      if (rows > 0) b.active[n_active++] = e;
      max_rows = std::max(max_rows, rows);
    }
    auto run_expert = [&](int e) {
      const int64_t r0 = b.group_start[e], rows = b.group_start[e + 1] - r0;
      const ExpertWeights& x = W.experts[e];
      const MatmulInput in =
          fwd::matmul_input(qa, b.in.data() + r0 * E, rows, E, b.in_q8.data() + r0 * (E / k_qblock),
                            threads, {&x.w_gate, &x.w_up});
      float* mid = b.mid.data() + r0 * F;
      if (c.ffn_relu2) {  // Nemotron-H: relu(up x)^2, no gate
        matmul(x.w_up, in, mid, F);
        for (int64_t r = 0; r < rows; ++r) relu2_row(mid + r * F, F);
      } else if (mc.swiglu_alpha > 0.0f) {  // gpt-oss: biases and the clamped SwiGLU, unfused
        float* up = b.up.data() + r0 * F;
        const MatmulTarget gate_up[2] = {{&x.w_gate, mid, F}, {&x.w_up, up, F}};
        matmul_many(gate_up, 2, in);
        clamped_swiglu(mc, x, mid, up, rows, F);
      } else {
        matmul_gate_up_swiglu(x.w_gate, x.w_up, in, mid, F, nullptr, call.glu);
      }
      const MatmulInput in_mid = fwd::matmul_input(
          qa, mid, rows, F, b.mid_q8.data() + r0 * (F / k_qblock), threads, {&x.w_down});
      float* out = b.out.data() + r0 * E;
      matmul(x.w_down, in_mid, out, E);
      for (int64_t r = 0; r < rows; ++r) fwd::add_bias(out + r * E, x.b_down, E);
    };
    if (threads > 1 && n_active >= 2 * threads && max_rows <= k_expert_parallel_rows) {
      parallel_for(n_active, 1, threads, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) run_expert(b.active[i]);
      });
    } else {
      for (int i = 0; i < n_active; ++i) run_expert(b.active[i]);
    }
    if (S > 0) {
      const ExpertWeights& x = W.shared;
      const MatmulInput in =
          fwd::matmul_input(qa, h, m, E, b.in_q8.data(), threads, {&x.w_gate, &x.w_up});
      if (c.ffn_relu2) {
        matmul(x.w_up, in, b.shared_mid.data(), S);
        fwd::per_token(m, threads,
                       [&](int t) { relu2_row(b.shared_mid.data() + int64_t{t} * S, S); });
      } else {
        matmul_gate_up_swiglu(x.w_gate, x.w_up, in, b.shared_mid.data(), S);
      }
      const MatmulInput in_mid =
          fwd::matmul_input(qa, b.shared_mid.data(), m, S, b.mid_q8.data(), threads, {&x.w_down});
      matmul(x.w_down, in_mid, b.shared_out.data(), E);
      if (!W.shared_gate_inp.empty())  // (ERNIE 4.5 MoE's shared experts have no gate)
        matmul(W.shared_gate_inp, MatmulInput{h, nullptr, m, E}, b.shared_gate.data(), 1);
    }
    fwd::per_token(m, threads, [&](int t) {
      thread_local AlignedVector<float> acc;
      if (static_cast<int64_t>(acc.size()) < E) acc.assign(static_cast<size_t>(E), 0.0f);
      std::fill(acc.begin(), acc.begin() + E, 0.0f);
      for (int j = 0; j < k; ++j) {
        const float w = mc.input_weighted ? 1.0f : b.weight[t * k + j];
        const float* o = b.out.data() + static_cast<int64_t>(b.row_of[t * k + j]) * E;
        for (int64_t i = 0; i < E; ++i) acc[i] += w * o[i];
      }
      if (S > 0) {
        const float g = W.shared_gate_inp.empty() ? 1.0f : sigmoid(b.shared_gate[t]);
        const float* o = b.shared_out.data() + static_cast<int64_t>(t) * E;
        for (int64_t i = 0; i < E; ++i) acc[i] += g * o[i];
      }
      if (call.out != nullptr) {  // (Gemma 4: normalised and added to the dense MLP's output)
        std::memcpy(call.out + static_cast<int64_t>(base + t) * E, acc.data(),
                    static_cast<size_t>(E) * sizeof(float));
        return;
      }
      if (!L.post_ffn_norm.empty())  // (AFMoE: the experts' and shared MLP's sum normalised)
        rmsnorm_row(acc.data(), reinterpret_cast<const float*>(L.post_ffn_norm.data), E, c.rms_eps,
                    acc.data());
      // (Granite MoE: the experts' sum times residual_multiplier, as a dense layer's output)
      fwd::add_residual(s.x.data() + static_cast<int64_t>(base + t) * E, acc.data(), E,
                        c.residual_scale);
    });
  }
}

}  // namespace ossa
