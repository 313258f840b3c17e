// Loading mixture-of-experts layers: config keys and expert weights from GGUF files and HF folders.
//
// GGUF (llama.cpp's converter): per layer blk.N.ffn_gate_inp.weight (router, n_expert x n_embd) and
// the experts stacked in 3-D tensors, sliced here into one view per expert:
//
//   ffn_gate_exps / ffn_up_exps  ne = [n_embd, n_ff, n_expert]   expert e: rows [e*n_ff,
//   (e+1)*n_ff) ffn_down_exps                ne = [n_ff, n_embd, n_expert]   expert e: rows
//   [e*n_embd, (e+1)*n_embd) ffn_gate_up_exps (fused)     ne = [n_embd, 2*n_ff, n_expert] gate then
//   up within each expert
//
// (older Mixtral files: one 2-D tensor per expert, blk.N.ffn_gate.E.weight), plus Qwen2-MoE's
// shared expert blk.N.ffn_{gate,up,down}_shexp.weight and its gate blk.N.ffn_gate_inp_shexp.weight.
// HF folders: model.layers.N.mlp.gate.weight and mlp.experts.E.{gate,up,down}_proj.weight (Qwen),
// block_sparse_moe.gate.weight and block_sparse_moe.experts.E.w{1,3,2}.weight (Mixtral).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>

#include "formats/gguf.h"
#include "model/arch_config.h"
#include "model/moe.h"
#include "util/error.h"
#include "util/json.h"

namespace ossa {

bool MoeConfig::is_moe_layer(int layer) const {
  return std::binary_search(layers.begin(), layers.end(), layer);
}

namespace {

constexpr int64_t k_max_experts = 4096;

void validate_moe(ModelConfig& c, const std::string& path) {
  MoeConfig& m = c.moe;
  if (m.n_expert == 0 ||
      m.layers.empty()) {  // no sparse layer (mlp_only_layers may name them all): dense
    m = MoeConfig{};
    return;
  }
  auto fail = [&](const std::string& what) { throw ModelError(what + " in '" + path + "'"); };
  if (m.n_expert < 0 || m.n_expert > k_max_experts)
    fail("invalid expert count " + std::to_string(m.n_expert));
  if (m.n_expert_used < 1 || m.n_expert_used > m.n_expert)
    fail("experts used per token " + std::to_string(m.n_expert_used) + " is not within 1.." +
         std::to_string(m.n_expert));
  if (m.n_ff_expert <= 0 || m.n_ff_expert > (1 << 30))
    fail("invalid expert feed-forward size " + std::to_string(m.n_ff_expert));
  if (m.n_ff_shared < 0 || m.n_ff_shared > (1 << 30))
    fail("invalid shared expert size " + std::to_string(m.n_ff_shared));
  if (m.n_group < 1 || m.n_group > m.n_expert || m.n_expert % m.n_group != 0)
    fail("expert group count " + std::to_string(m.n_group) + " does not divide the " +
         std::to_string(m.n_expert) + " experts");
  if (m.topk_group < 1 || m.topk_group > m.n_group ||
      int64_t{m.topk_group} * (m.n_expert / m.n_group) < m.n_expert_used)
    fail("expert groups used " + std::to_string(m.topk_group) + " of " + std::to_string(m.n_group) +
         " leave fewer than " + std::to_string(m.n_expert_used) + " experts to choose from");
  if (m.group_top2 && m.n_group > 1 && m.n_expert / m.n_group < 2)
    fail("expert groups of one expert (a group is scored by its two best)");
  if (!(m.routed_scale > 0.0f) || !std::isfinite(m.routed_scale))
    fail("invalid routed expert scale " + std::to_string(m.routed_scale));
  if (m.sparsemixer && (m.n_expert_used != 2 || m.n_expert < 2))
    fail("sparsemixer routing picks 2 experts (experts used per token: " +
         std::to_string(m.n_expert_used) + ")");
  if (m.sparsemixer && !(m.sparsemixer_eps >= 0.0f && std::isfinite(m.sparsemixer_eps)))
    fail("invalid router_jitter_noise");
}

// Shared experts added as they are, with no gate of their own: ERNIE's (routed with a selection
// bias), DeepSeek's, GLM's and Granite 4.0-H's shared MLP; Qwen2-MoE's has a sigmoid gate.
bool shared_experts_ungated(const ModelConfig& c) {
  return c.moe.selection_bias || c.moe.deepseek || c.moe.input_weighted ||
         c.arch == "granitehybrid" || c.arch == "granitemoe" || c.arch == "hunyuan-moe";
}

// A 3-D stack of experts taken whole (shape checked), then one view per expert of `rows` rows
// starting at row `first` within each expert's block of `stride` rows.
TensorView expert_slice(const TensorView& all, int64_t e, int64_t stride, int64_t first,
                        int64_t rows) {
  TensorView v = all;
  v.rows = rows;
  v.data = all.data + static_cast<size_t>(e * stride + first) * all.row_bytes;
  return v;
}

// HF's MXFP4 expert stacks (the Hub's gpt-oss folders): blocks [n, rows, cols / 32, 16], byte i
// holding element 2i in its low nibble and 2i + 1 in its high one, and E8M0 scales [n, rows, cols /
// 32], element = E2M1 code * 2^(scale - 127). Rewritten as GGUF MXFP4 blocks (the same codes and
// exponent byte; qs[j] = element j | element j + 16 << 4), row r of expert e at row dst_row(r) of
// that expert: the same weights, bit for bit, in the layout the kernels read.
void mxfp4_from_hf(const uint8_t* blocks, const uint8_t* scales, int64_t n, int64_t rows,
                   int64_t cols, uint8_t* out, const std::function<int64_t(int64_t)>& dst_row) {
  const int64_t nb = cols / 32;
  for (int64_t e = 0; e < n; ++e)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src = e * rows + r;
      uint8_t* o = out + static_cast<size_t>((e * rows + dst_row(r)) * nb) * 17;
      for (int64_t b = 0; b < nb; ++b, o += 17) {
        const uint8_t* h = blocks + static_cast<size_t>(src * nb + b) * 16;
        o[0] = scales[src * nb + b];
        for (int j = 0; j < 16; ++j) {
          const int shift = 4 * (j % 2);
          const uint8_t lo = (h[j / 2] >> shift) & 15, hi = (h[8 + j / 2] >> shift) & 15;
          o[1 + j] = static_cast<uint8_t>(lo | hi << 4);
        }
      }
    }
}

// gpt-oss from a folder: the router (mlp.router.weight, .bias) and the experts as transformers
// keeps them, 3-D and transposed: mlp.experts.gate_up_proj [n_expert, n_embd, 2 n_ff] with gate and
// up interleaved along the last axis (column 2f: gate row f, 2f + 1: up row f), gate_up_proj_bias
// [n_expert, 2 n_ff] alike, down_proj [n_expert, n_ff, n_embd], down_proj_bias [n_expert, n_embd].
// Rearranged here into the rows the matmuls read (one copy, in the stored float type). The Hub's
// folders keep the experts in MXFP4 instead (gate_up_proj_blocks / _scales, rows not transposed:
// [n_expert, 2 n_ff, ...] with gate and up rows interleaved): rewritten as GGUF MXFP4 rows
// (mxfp4_from_hf), exact.
// The experts' matrices in the rows the matmuls read: expert e's gate rows at gate_up + 2F e rows,
// its up rows after them, its down rows at down + E e rows.
struct ExpertRows {
  DType gu_type, dn_type;
  const uint8_t* gate_up;
  const uint8_t* down;
  size_t gu_row, dn_row;  // bytes of a gate / up row (E values) and of a down row (F values)
};

// The Hub's MXFP4 stacks, rewritten (mxfp4_from_hf).
ExpertRows gpt_oss_mxfp4_rows(const std::string& p, int64_t E, int64_t F, int64_t n,
                              const TensorSource& src) {
  if (E % 32 != 0 || F % 32 != 0)
    throw ModelError(
        "gpt-oss MXFP4 experts need hidden and expert sizes that are multiples of 32, got " +
        std::to_string(E) + " and " + std::to_string(F));
  const uint8_t* gu_blocks = src.take_u8(p + "experts.gate_up_proj_blocks", {n, 2 * F, E / 32, 16});
  const uint8_t* gu_scales = src.take_u8(p + "experts.gate_up_proj_scales", {n, 2 * F, E / 32});
  const uint8_t* dn_blocks = src.take_u8(p + "experts.down_proj_blocks", {n, E, F / 32, 16});
  const uint8_t* dn_scales = src.take_u8(p + "experts.down_proj_scales", {n, E, F / 32});
  const size_t gu_row = static_cast<size_t>(E / 32) * 17, dn_row = static_cast<size_t>(F / 32) * 17;
  uint8_t* gate_up = src.alloc(static_cast<size_t>(n * 2 * F) * gu_row);
  uint8_t* down = src.alloc(static_cast<size_t>(n * E) * dn_row);
  mxfp4_from_hf(gu_blocks, gu_scales, n, 2 * F, E, gate_up,
                [F](int64_t r) { return r % 2 == 0 ? r / 2 : F + r / 2; });
  mxfp4_from_hf(dn_blocks, dn_scales, n, E, F, down, [](int64_t r) { return r; });
  return {DType::MXFP4, DType::MXFP4, gate_up, down, gu_row, dn_row};
}

// transformers' float stacks, transposed (and de-interleaved: gpt-oss) in their stored type. Llama
// 4's gate_up_proj holds the gate's F columns, then the up's (interleaved false).
ExpertRows float_stack_rows(const std::string& p, const std::string& canon, int64_t E, int64_t F,
                            int64_t n, const TensorSource& src, bool interleaved = true) {
  const TensorView gu = src.take(p + "experts.gate_up_proj", canon + "gate_up_proj", n * E, 2 * F);
  const TensorView dn = src.take(p + "experts.down_proj", canon + "down_proj", n * F, E);
  for (const TensorView* v : {&gu, &dn})
    if (v->type != DType::F32 && v->type != DType::F16 && v->type != DType::BF16)
      throw ModelError("expert tensors of type " + std::string(dtype_name(v->type)) +
                       " are not supported");
  const size_t es = gu.type == DType::F32 ? 4 : 2, ds = dn.type == DType::F32 ? 4 : 2;
  uint8_t* gate_up = src.alloc(static_cast<size_t>(n * 2 * F * E) * es);
  uint8_t* down = src.alloc(static_cast<size_t>(n * E * F) * ds);
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t h = 0; h < E; ++h) {
      const uint8_t* row = gu.data + static_cast<size_t>(e * E + h) * gu.row_bytes;
      for (int64_t f = 0; f < F; ++f) {
        const int64_t g = interleaved ? 2 * f : f, u = interleaved ? 2 * f + 1 : F + f;
        std::memcpy(gate_up + ((e * 2 * F + f) * E + h) * es, row + g * es, es);
        std::memcpy(gate_up + ((e * 2 * F + F + f) * E + h) * es, row + u * es, es);
      }
    }
    for (int64_t f = 0; f < F; ++f) {
      const uint8_t* row = dn.data + static_cast<size_t>(e * F + f) * dn.row_bytes;
      for (int64_t o = 0; o < E; ++o)
        std::memcpy(down + ((e * E + o) * F + f) * ds, row + o * ds, ds);
    }
  }
  return {
      gu.type, dn.type, gate_up, down, static_cast<size_t>(E) * es, static_cast<size_t>(F) * ds};
}

void gpt_oss_experts_hf(const ModelConfig& c, int layer, const TensorSource& src, MoeWeights& out) {
  const int64_t E = c.n_embd, F = c.moe.n_ff_expert, n = c.moe.n_expert;
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  const std::string canon = "layers." + std::to_string(layer) + ".";
  out.router = src.take(p + "router.weight", canon + "router", n, E);
  out.router_bias = src.take(p + "router.bias", canon + "router_bias", 1, n);
  const TensorView gub =
      src.to_f32(src.take(p + "experts.gate_up_proj_bias", canon + "gate_up_bias", n, 2 * F));
  const TensorView db =
      src.to_f32(src.take(p + "experts.down_proj_bias", canon + "down_bias", n, E));
  const ExpertRows w = src.has(p + "experts.gate_up_proj_blocks")
                           ? gpt_oss_mxfp4_rows(p, E, F, n, src)
                           : float_stack_rows(p, canon, E, F, n, src);
  float* bias = reinterpret_cast<float*>(src.alloc(static_cast<size_t>(n * 2 * F) * 4));
  auto view = [](DType t, const uint8_t* data, int64_t rows, int64_t cols, size_t row_bytes) {
    TensorView v;
    v.type = t;
    v.rows = rows;
    v.cols = cols;
    v.row_bytes = row_bytes;
    v.data = data;
    return v;
  };
  out.experts.assign(static_cast<size_t>(n), ExpertWeights{});
  for (int64_t e = 0; e < n; ++e) {
    const float* b =
        reinterpret_cast<const float*>(gub.data + static_cast<size_t>(e) * gub.row_bytes);
    float* be = bias + e * 2 * F;  // gate's biases, then up's (de-interleaved)
    for (int64_t f = 0; f < F; ++f) {
      be[f] = b[2 * f];
      be[F + f] = b[2 * f + 1];
    }
    ExpertWeights& x = out.experts[static_cast<size_t>(e)];
    x.w_gate =
        view(w.gu_type, w.gate_up + static_cast<size_t>(e * 2 * F) * w.gu_row, F, E, w.gu_row);
    x.w_up =
        view(w.gu_type, w.gate_up + static_cast<size_t>(e * 2 * F + F) * w.gu_row, F, E, w.gu_row);
    x.w_down = view(w.dn_type, w.down + static_cast<size_t>(e * E) * w.dn_row, E, F, w.dn_row);
    const uint8_t* bb = reinterpret_cast<const uint8_t*>(be);
    x.b_gate = view(DType::F32, bb, 1, F, static_cast<size_t>(F) * 4);
    x.b_up = view(DType::F32, bb + F * 4, 1, F, static_cast<size_t>(F) * 4);
    x.b_down = view(DType::F32, db.data + static_cast<size_t>(e) * db.row_bytes, 1, E,
                    static_cast<size_t>(E) * 4);
  }
}

// Llama 4 from a folder: feed_forward.router, the experts as transformers keeps them (3-D and
// transposed: experts.gate_up_proj [n_expert, n_embd, 2 n_ff], gate columns then up columns;
// down_proj [n_expert, n_ff, n_embd]; rearranged once into the rows the matmuls read, in their
// stored type), and the ungated shared_expert's three matrices.
// The experts' views of rearranged rows (ExpertRows).
void view_expert_rows(const ExpertRows& w, int64_t n, int64_t E, int64_t F, MoeWeights& out) {
  out.experts.assign(static_cast<size_t>(n), ExpertWeights{});
  for (int64_t e = 0; e < n; ++e) {
    ExpertWeights& x = out.experts[static_cast<size_t>(e)];
    for (auto [v, data, rows, cols, row] :
         {std::tuple{&x.w_gate, w.gate_up + static_cast<size_t>(e * 2 * F) * w.gu_row, F, E,
                     w.gu_row},
          std::tuple{&x.w_up, w.gate_up + static_cast<size_t>(e * 2 * F + F) * w.gu_row, F, E,
                     w.gu_row},
          std::tuple{&x.w_down, w.down + static_cast<size_t>(e * E) * w.dn_row, E, F, w.dn_row}}) {
      v->type = v == &x.w_down ? w.dn_type : w.gu_type;
      v->rows = rows;
      v->cols = cols;
      v->row_bytes = row;
      v->data = data;
    }
  }
}

void llama4_experts_hf(const ModelConfig& c, int layer, const TensorSource& src, MoeWeights& out) {
  const int64_t E = c.n_embd, F = c.moe.n_ff_expert, n = c.moe.n_expert, S = c.moe.n_ff_shared;
  const std::string p = "model.layers." + std::to_string(layer) + ".feed_forward.";
  const std::string canon = "layers." + std::to_string(layer) + ".";
  out.router = src.take(p + "router.weight", canon + "router", n, E);
  view_expert_rows(float_stack_rows(p, canon, E, F, n, src, false), n, E, F, out);
  out.shared.w_gate = src.take(p + "shared_expert.gate_proj.weight", canon + "shared.w_gate", S, E);
  out.shared.w_up = src.take(p + "shared_expert.up_proj.weight", canon + "shared.w_up", S, E);
  out.shared.w_down = src.take(p + "shared_expert.down_proj.weight", canon + "shared.w_down", E, S);
}

}  // namespace

void read_moe_config_gguf(ModelConfig& c, const GGUFFile& g,
                          const std::function<bool(const std::string&)>& has,
                          const std::string& path) {
  const std::string k = c.arch + ".";
  MoeConfig& m = c.moe;
  m.n_expert = static_cast<int>(
      std::clamp<int64_t>(g.get_int(k + "expert_count", 0), -1, k_max_experts + 1));
  if ((c.arch == "qwen3moe" || c.arch == "qwen3vlmoe" || c.arch == "qwen2moe" ||
       c.arch == "gpt-oss" || c.arch == "granitemoe" || c.arch == "ernie4_5-moe" ||
       c.arch == "glm4moe" || c.arch == "olmoe" || c.arch == "qwen35moe" || c.arch == "qwen3next" ||
       c.arch == "dots1" || c.arch == "phimoe" || c.arch == "exaone-moe" || c.arch == "lfm2moe" ||
       c.arch == "nemotron_h_moe" || c.arch == "hunyuan-moe" || c.arch == "afmoe" ||
       c.arch == "dbrx" || c.arch == "deepseek" || c.arch == "bailingmoe2") &&
      m.n_expert == 0)
    throw ModelError("'" + path + "' (architecture " + c.arch + ") has no " + k + "expert_count");
  if (m.n_expert == 0) return;
  m.n_expert_used = static_cast<int>(
      std::clamp<int64_t>(g.get_int(k + "expert_used_count", 0), -1, k_max_experts + 1));
  m.n_ff_expert = static_cast<int>(
      std::clamp<int64_t>(g.get_int(k + "expert_feed_forward_length", c.n_ff), -1, 1 << 30));
  if (c.arch == "qwen2moe" || c.arch == "qwen35moe" || c.arch == "qwen3next" ||
      c.arch == "hunyuan-moe")  // (Hunyuan's shared MLP: ungated)
    m.n_ff_shared = static_cast<int>(std::clamp<int64_t>(
        g.get_int(k + "expert_shared_feed_forward_length", c.n_ff), -1, 1 << 30));
  // llama.cpp renormalises the chosen weights for Qwen3-MoE and Mixtral, not for Qwen2-MoE or
  // OLMoE.
  // (and not for Jamba's)
  m.norm_topk_prob = g.get_bool(k + "expert_weights_norm",
                                c.arch != "qwen2moe" && c.arch != "olmoe" && c.arch != "jamba");
  if (c.arch == "phimoe") {  // (transformers' sparsemixer; llama.cpp routes by a plain top-2)
    m.sparsemixer = true;
    m.sparsemixer_eps = 0.01f;  // (PhimoeConfig's router_jitter_noise: no key holds it)
    m.norm_topk_prob = false;
  }
  if (c.arch == "gpt-oss") {  // llama.cpp hard-codes these for gpt-oss (no key holds them)
    m.bias = true;
    m.softmax_topk = true;
    m.norm_topk_prob = false;
    m.swiglu_alpha = 1.702f;
    m.swiglu_limit = 7.0f;
  }
  // Granite MoE: transformers' softmax over the chosen logits (llama.cpp: over all, renormalised;
  // the same weights up to rounding).
  // (Granite 4.0-H likewise, with its shared MLP beside the experts)
  if (c.arch == "granitemoe" || c.arch == "granitehybrid") m.softmax_topk = true;
  if (c.arch == "granitehybrid" || c.arch == "granitemoe")  // (GraniteMoeShared's shared MLP)
    m.n_ff_shared = static_cast<int>(
        std::clamp<int64_t>(g.get_int(k + "expert_shared_feed_forward_length", 0), -1, 1 << 30));
  if (c.arch ==
      "llama4") {  // (llama.cpp hard-codes the routing; the shared expert: the experts' size)
    m.input_weighted = true;
    m.norm_topk_prob = false;
    m.n_ff_shared = m.n_ff_expert;
  }
  if (c.arch == "ernie4_5-moe") {  // shared experts: expert_shared_count of the experts' width
    m.n_ff_shared = static_cast<int>(
        std::clamp<int64_t>(g.get_int(k + "expert_shared_count", 0) * m.n_ff_expert, 0, 1 << 30));
    m.selection_bias = true;
    m.norm_min = 1e-12f;
  }
  // (GLM-4.5's routing is DeepSeek V3's: sigmoid scores unless the file says otherwise)
  // (LFM2-MoE routes as DeepSeek V3 does, in one group: sigmoid scores plus an expert bias)
  // (Nemotron-H's MoE likewise: llama.cpp routes it by sigmoid whatever the file says)
  // (MiniMax-M2 routes as DeepSeek V3 does in one group: sigmoid scores plus an expert bias,
  // renormalised; llama.cpp hard-codes the sigmoid)
  const bool glm = c.arch == "glm4moe" || c.arch == "bailingmoe2", lfm2 = c.arch == "lfm2moe",
             nemotron = c.arch == "nemotron_h_moe", minimax = c.arch == "minimax-m2",
             dots1 = c.arch == "dots1" ||       // (dots.llm1, K-EXAONE, AFMoE: V3's routing;
                     c.arch == "exaone-moe" ||  // files without the gating key route by sigmoid)
                     c.arch == "afmoe",
             deepseek = c.arch == "deepseek2" || c.arch == "deepseek" || glm || lfm2 || nemotron ||
                        minimax || dots1;
  // (llama.cpp: a deepseek2 file without the key routes by softmax, but GLM-4.7-Flash's (47 or 48
  // layers, 154880 tokens) by sigmoid)
  const bool glm_lite =
      c.arch == "deepseek2" && (c.n_layer == 47 || c.n_layer == 48) && c.n_vocab == 154880;
  // (a deepseek2 file with V3's selection bias and no gating key routes by sigmoid, as every such
  // release does: converting a config saved by transformers 5, which keeps no scoring_func, loses
  // it)
  for (int i = 0; i < c.n_layer; ++i)
    if (has("blk." + std::to_string(i) + ".ffn_gate_inp.weight")) m.layers.push_back(i);
  const bool v3_bias = c.arch == "deepseek2" && !m.layers.empty() &&
                       has("blk." + std::to_string(m.layers.front()) + ".exp_probs_b.bias");
  const int64_t gating =
      nemotron || minimax
          ? 2
          : g.get_int(k + "expert_gating_func", glm || glm_lite || dots1 || v3_bias ? 2 : 1);
  if (c.arch != "gpt-oss" && c.arch != "llama4" && gating != 0 && gating != 1 &&
      !(deepseek && gating == 2))
    throw ModelError("expert gating function " + std::to_string(gating) + " in '" + path +
                     "' is not supported (softmax, and sigmoid for deepseek2 and glm4moe)");
  if (deepseek) {  // what llama.cpp's converter writes (V2 files: no gating key, softmax)
    m.deepseek = true;
    m.n_ff_shared = static_cast<int>(
        std::clamp<int64_t>(g.get_int(k + "expert_shared_count", 0) * m.n_ff_expert, 0, 1 << 30));
    if (nemotron)  // (one shared relu2 MLP of its own size)
      m.n_ff_shared = g.get_int(k + "expert_shared_count", 1) > 0
                          ? static_cast<int>(std::clamp<int64_t>(
                                g.get_int(k + "expert_shared_feed_forward_length", 0), -1, 1 << 30))
                          : 0;
    m.norm_topk_prob = g.get_bool(k + "expert_weights_norm", glm || lfm2 || minimax);
    if (lfm2) m.norm_eps = 1e-6f;
    if (c.arch == "bailingmoe2")  // (llama.cpp's: the shared width (else the experts') per expert)
      m.n_ff_shared = static_cast<int>(
          std::clamp<int64_t>(g.get_int(k + "expert_shared_feed_forward_length", m.n_ff_expert) *
                                  g.get_int(k + "expert_shared_count", 0),
                              0, 1 << 30));
    m.routed_scale = static_cast<float>(g.get_float(k + "expert_weights_scale", 1.0));
    m.sigmoid_gating = gating == 2;
    m.group_top2 = m.sigmoid_gating;
    m.n_group = static_cast<int>(
        std::clamp<int64_t>(g.get_int(k + "expert_group_count", 1), -1, k_max_experts + 1));
    m.topk_group = static_cast<int>(std::clamp<int64_t>(
        g.get_int(k + "expert_group_used_count", m.n_group), -1, k_max_experts + 1));
    if (m.n_group == 0) m.n_group = m.topk_group = 1;  // (0: no groups)
    m.selection_bias =
        !m.layers.empty() && has("blk." + std::to_string(m.layers.front()) + ".exp_probs_b.bias");
  }
  validate_moe(c, path);
}

void read_moe_config_hf(ModelConfig& c, const JsonValue& cfg, const std::string& path) {
  if (c.arch != "qwen3moe" && c.arch != "qwen3vlmoe" && c.arch != "qwen2moe" &&
      c.arch != "mixtral" && c.arch != "gpt-oss" && c.arch != "granitemoe" &&
      c.arch != "ernie4_5-moe" && c.arch != "deepseek2" && c.arch != "glm4moe" &&
      c.arch != "olmoe" && c.arch != "qwen35moe" && c.arch != "qwen3next" && c.arch != "lfm2moe" &&
      c.arch != "granitehybrid" && c.arch != "nemotron_h" && c.arch != "jamba" &&
      c.arch != "llama4" && c.arch != "minimax-m2" && c.arch != "hunyuan-moe" &&
      c.arch != "dots1" && c.arch != "phimoe" && c.arch != "exaone-moe" && c.arch != "afmoe" &&
      c.arch != "dbrx" && c.arch != "deepseek")
    return;
  auto integer = [&](const char* key, int64_t dflt) -> int64_t {
    const JsonValue* v = cfg.get(key);
    if (v == nullptr || v->is_null()) return dflt;
    if (!v->is_number() || !v->is_integer)
      throw ModelError(std::string("config '") + key + "' in '" + path + "' must be an integer");
    return std::clamp<int64_t>(v->integer, -1, int64_t{1} << 30);
  };
  auto boolean = [&](const char* key, bool dflt) {
    const JsonValue* v = cfg.get(key);
    if (v == nullptr || v->is_null()) return dflt;
    if (v->kind != JsonValue::Kind::Bool)
      throw ModelError(std::string("config '") + key + "' in '" + path + "' must be true or false");
    return v->boolean;
  };
  MoeConfig& m = c.moe;
  auto number = [&](const char* key, double dflt) {
    const JsonValue* v = cfg.get(key);
    if (v == nullptr || v->is_null()) return dflt;
    if (!v->is_number() || !(v->number > 0.0) || !std::isfinite(v->number))
      throw ModelError(std::string("config '") + key + "' in '" + path +
                       "' must be a positive number");
    return v->number;
  };
  // Defaults: transformers' own for each config class.
  if (c.arch == "gpt-oss") {
    m.n_expert = static_cast<int>(integer("num_local_experts", 128));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 4));
    m.n_ff_expert = c.n_ff;
    m.bias = true;
    m.softmax_topk = true;
    m.swiglu_alpha = static_cast<float>(number("swiglu_alpha", 1.702));
    m.swiglu_limit = static_cast<float>(number("swiglu_limit", 7.0));
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "minimax-m2") {  // MiniMaxM2Config's defaults: V3's routing in one group
    m.n_expert = static_cast<int>(integer("num_local_experts", integer("num_experts", 256)));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 8));
    m.n_ff_expert = c.n_ff;
    m.deepseek = m.sigmoid_gating = m.selection_bias = m.norm_topk_prob = true;
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "llama4") {  // Llama4TextConfig's defaults; dense layers: c.n_ff
    m.n_expert = static_cast<int>(integer("num_local_experts", 16));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 1));
    m.n_ff_expert = m.n_ff_shared = static_cast<int>(integer("intermediate_size", 8192));
    m.input_weighted = true;
    const JsonValue* list = cfg.get("moe_layers");
    if (list != nullptr && !list->is_null()) {
      if (!list->is_array())
        throw ModelError("config 'moe_layers' in '" + path + "' must be a list");
      for (const JsonValue& e : list->array) {
        if (!e.is_number() || !e.is_integer || e.integer < 0 || e.integer >= c.n_layer)
          throw ModelError("config 'moe_layers' in '" + path + "' must hold layer indices");
        if (std::find(m.layers.begin(), m.layers.end(), e.integer) == m.layers.end())
          m.layers.push_back(static_cast<int>(e.integer));
      }
      std::sort(m.layers.begin(), m.layers.end());
    } else {  // transformers: every interleave_moe_layer_step-th layer, from step - 1
      const int64_t step = integer("interleave_moe_layer_step", 1);
      if (step < 1)
        throw ModelError("config 'interleave_moe_layer_step' in '" + path + "' must be >= 1");
      for (int64_t i = step - 1; i < c.n_layer; i += step) m.layers.push_back(static_cast<int>(i));
    }
  } else if (c.arch == "hunyuan-moe") {
    // HunYuanMoEV1Config: softmax over all experts, top-k renormalised, a shared MLP of
    // intermediate_size beside them (ungated). The Hub's files give moe_topk, moe_intermediate_size
    // and num_shared_expert per layer (all alike: one value is read; differing ones refused).
    auto uniform = [&](const char* key, int64_t dflt) -> int64_t {
      const JsonValue* v = cfg.get(key);
      if (v == nullptr || !v->is_array()) return integer(key, dflt);
      if (v->array.empty()) return dflt;
      for (const JsonValue& e : v->array)
        if (!e.is_number() || !e.is_integer || e.integer != v->array[0].integer)
          throw ModelError(std::string("config '") + key + "' in '" + path +
                           "' must hold one integer for every layer (per-layer values differ)");
      return std::clamp<int64_t>(v->array[0].integer, -1, int64_t{1} << 30);
    };
    m.n_expert = static_cast<int>(uniform("num_experts", 1));
    m.n_expert_used = static_cast<int>(uniform("moe_topk", 1));
    m.n_ff_expert = static_cast<int>(uniform("moe_intermediate_size", c.n_ff));
    const int64_t shared = uniform("num_shared_expert", 1);
    if (shared != 1)
      throw ModelError("num_shared_expert " + std::to_string(shared) + " in '" + path +
                       "' is not supported (one shared MLP is)");
    m.n_ff_shared = c.n_ff;
    m.norm_topk_prob = true;
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "granitemoe") {  // GraniteMoeConfig's defaults; top-k softmax
    m.n_expert = static_cast<int>(integer("num_local_experts", 8));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 2));
    m.n_ff_expert = c.n_ff;
    // (GraniteMoeShared: an ungated shared MLP beside the experts, 0: none)
    m.n_ff_shared = static_cast<int>(integer("shared_intermediate_size", 0));
    m.softmax_topk = true;
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "nemotron_h") {  // NemotronHConfig: DeepSeek V3's routing, relu2 experts
    const std::string kinds = nemotronh_layer_kinds(Json{cfg, path}, c.n_layer);
    m.n_expert = static_cast<int>(integer("n_routed_experts", 8));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 2));
    m.n_ff_expert = static_cast<int>(integer("moe_intermediate_size", 7688));
    m.n_ff_shared = integer("n_shared_experts", 1) > 0
                        ? static_cast<int>(integer("moe_shared_expert_intermediate_size", 7688))
                        : 0;
    m.deepseek = m.sigmoid_gating = m.group_top2 = m.selection_bias = true;
    m.norm_topk_prob = boolean("norm_topk_prob", true);
    m.routed_scale = static_cast<float>(number("routed_scaling_factor", 1.0));
    m.n_group = static_cast<int>(integer("n_group", 1));
    m.topk_group = static_cast<int>(integer("topk_group", 1));
    for (int i = 0; i < c.n_layer; ++i)
      if (kinds[static_cast<size_t>(i)] == 'E') m.layers.push_back(i);
  } else if (c.arch == "granitehybrid") {  // GraniteMoeHybridConfig's defaults (0 experts: dense)
    m.n_expert = c.hf_bamba ? 0 : static_cast<int>(integer("num_local_experts", 8));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 2));
    m.n_ff_expert = c.n_ff;
    m.n_ff_shared = static_cast<int>(integer("shared_intermediate_size", 1024));
    m.softmax_topk = true;
    for (int i = 0; i < c.n_layer && m.n_expert > 0; ++i) m.layers.push_back(i);
  } else if (c.arch == "jamba") {  // JambaConfig's: softmax over all, top-k, not renormalised
    m.n_expert = static_cast<int>(integer("num_experts", 16));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 2));
    m.n_ff_expert = c.n_ff;
    const int64_t period = integer("expert_layer_period", 2),
                  offset = integer("expert_layer_offset", 1);
    if (period < 1 || offset < 0)
      throw ModelError("config 'expert_layer_period' / 'expert_layer_offset' in '" + path +
                       "' must be >= 1 / >= 0");
    for (int i = 0; i < c.n_layer && m.n_expert > 1; ++i)
      if (i % period == offset) m.layers.push_back(i);
  } else if (c.arch == "ernie4_5-moe") {  // Ernie4_5_MoeConfig's keys (the Hub's moe_* names)
    m.n_expert = static_cast<int>(integer("moe_num_experts", integer("num_experts", 64)));
    m.n_expert_used = static_cast<int>(integer("moe_k", integer("num_experts_per_tok", 8)));
    m.n_ff_expert = static_cast<int>(integer("moe_intermediate_size", 1536));
    m.n_ff_shared = static_cast<int>(
        std::clamp<int64_t>(integer("moe_num_shared_experts", 0) * m.n_ff_expert, 0, 1 << 30));
    m.selection_bias = true;
    m.norm_min = static_cast<float>(number("moe_norm_min", 1e-12));
    const int64_t start = integer("moe_layer_start_index", 1),
                  end = integer("moe_layer_end_index", c.n_layer - 1),
                  step = integer("moe_layer_interval", 1);
    if (step < 1) throw ModelError("config 'moe_layer_interval' in '" + path + "' must be >= 1");
    // transformers: sparse when (i + 1) % interval == 0 and start <= i <= end (end -1: the last)
    const int64_t last = end < 0 ? c.n_layer - 1 : end;
    for (int i = 0; i < c.n_layer; ++i)
      if ((i + 1) % step == 0 && i >= start && i <= last) m.layers.push_back(i);
  } else if (c.arch == "deepseek2" || c.arch == "glm4moe" || c.arch == "dots1" ||
             c.arch == "exaone-moe" || c.arch == "deepseek") {
    // (DeepSeek-MoE, deepseek: V2's keys, routed by softmax, greedy, not renormalised)
    // DeepseekV2Config / DeepseekV3Config (the Hub's keys); Glm4MoeConfig routes as V3 does.
    // (transformers' DeepseekV3 always routes by sigmoid, bias and groups, and writes no
    // topk_method; the Hub's V3 files say noaux_tc)
    // (GLM-4.7-Flash, glm4_moe_lite: DeepSeek V3's layers, its sparse ones listed in
    // mlp_layer_types)
    const JsonValue* type_v = cfg.get("model_type");
    const std::string type = type_v != nullptr && type_v->is_string() ? type_v->string : "";
    const bool glm = c.arch == "glm4moe";
    // (dots.llm1, dots1: V3's routing whatever topk_method / scoring_func say, as transformers'
    // Dots1 (its Hub configs write scoring_func "noaux_tc"); norm_topk_prob off unless set)
    // (EXAONE MoE, ExaoneMoeConfig: V3's router whatever the keys say, num_experts /
    // num_shared_experts, one dense layer, scaled by 2.5 unless set)
    const bool exaone = c.arch == "exaone-moe";
    const bool dots1 = c.arch == "dots1" || exaone;
    const bool v3_type = glm || dots1 || type == "glm4_moe_lite" || type == "deepseek_v3";
    // (Mistral 4: V3's layers routed by softmax scores without a bias; groups by their two best)
    const bool mistral4 = type == "mistral4";
    const JsonValue* method_v = cfg.get("topk_method");
    const std::string method = dots1                                          ? "noaux_tc"
                               : method_v != nullptr && method_v->is_string() ? method_v->string
                               : v3_type                                      ? "noaux_tc"
                               : mistral4 && integer("n_group", 1) > 1 ? "group_limited_greedy"
                                                                       : "greedy";
    const JsonValue* scoring_v = cfg.get("scoring_func");
    const bool v3 = method == "noaux_tc";
    const std::string scoring = dots1 ? "sigmoid"
                                : scoring_v != nullptr && scoring_v->is_string()
                                    ? scoring_v->string
                                    : (v3 ? "sigmoid" : "softmax");
    if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc")
      throw ModelError("topk_method '" + method + "' in '" + path + "' is not supported");
    if (scoring != "softmax" && scoring != "sigmoid")
      throw ModelError("scoring_func '" + scoring + "' in '" + path + "' is not supported");
    m.deepseek = true;
    m.sigmoid_gating = scoring == "sigmoid";
    m.group_top2 = m.sigmoid_gating || mistral4;
    m.n_expert =
        static_cast<int>(exaone ? integer("num_experts", 64)
                                : integer("n_routed_experts", integer("num_local_experts", 0)));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 0));
    m.n_ff_expert = static_cast<int>(integer("moe_intermediate_size", 0));
    m.n_ff_shared = static_cast<int>(std::clamp<int64_t>(
        integer(exaone ? "num_shared_experts" : "n_shared_experts", exaone ? 1 : 0) * m.n_ff_expert,
        0, 1 << 30));
    m.norm_topk_prob = boolean("norm_topk_prob", (v3 || mistral4) && (!dots1 || exaone));
    m.routed_scale = static_cast<float>(number("routed_scaling_factor", exaone ? 2.5 : 1.0));
    m.selection_bias = v3;
    if (method != "greedy") {
      m.n_group = static_cast<int>(integer("n_group", 1));
      m.topk_group = static_cast<int>(integer("topk_group", m.n_group));
    }
    const int64_t first = integer("first_k_dense_replace", glm || exaone ? 1 : 0),
                  freq = integer("moe_layer_freq", 1);
    if (freq < 1) throw ModelError("config 'moe_layer_freq' in '" + path + "' must be >= 1");
    const JsonValue* types = cfg.get("mlp_layer_types");
    if (types != nullptr && !types->is_null()) {  // ("dense" / "sparse" per layer)
      if (!types->is_array() || types->array.size() != static_cast<size_t>(c.n_layer))
        throw ModelError("config 'mlp_layer_types' in '" + path + "' must list " +
                         std::to_string(c.n_layer) + " layer types");
      for (int i = 0; i < c.n_layer; ++i) {
        const JsonValue& t = types->array[static_cast<size_t>(i)];
        if (!t.is_string() || (t.string != "dense" && t.string != "sparse"))
          throw ModelError("config 'mlp_layer_types' in '" + path +
                           "' must hold \"dense\" or \"sparse\"");
        if (t.string == "sparse" && m.n_expert > 0) m.layers.push_back(i);
      }
    } else if (m.n_expert > 0) {
      for (int i = 0; i < c.n_layer; ++i)
        if (i >= first && i % freq == 0) m.layers.push_back(i);
    }
  } else if (c.arch == "dbrx") {  // DbrxFFNConfig's (in ffn_config): softmax, top-k, p-norm 1
    const JsonValue* ffn = cfg.get("ffn_config");
    const JsonValue empty = parse_json("{}");
    const JsonValue& f = ffn != nullptr && ffn->is_object() ? *ffn : empty;
    const Json j{f, path};
    m.n_expert =
        static_cast<int>(std::clamp<int64_t>(j.integer("moe_num_experts", 4), -1, 1 << 30));
    m.n_expert_used = static_cast<int>(std::clamp<int64_t>(j.integer("moe_top_k", 1), -1, 1 << 30));
    m.n_ff_expert = c.n_ff;
    // (the chosen weights divided by their p-norm; p 1 (the default) renormalises, null leaves
    // them)
    const JsonValue* p_norm = f.get("moe_normalize_expert_weights");
    const bool none = p_norm != nullptr && p_norm->is_null();
    if (!none && j.number("moe_normalize_expert_weights", 1.0) != 1.0)
      throw ModelError("ffn_config.moe_normalize_expert_weights other than 1 or null in '" + path +
                       "' is not supported");
    m.norm_topk_prob = !none;
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "afmoe") {  // AfmoeConfig's defaults: V3's routing in one group
    // (sigmoid scores, the expert bias choosing, the chosen renormalised and times route_scale;
    // shared experts of num_shared_experts x moe_intermediate_size; dense lead layers)
    m.n_expert = static_cast<int>(integer("num_experts", 64));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 6));
    m.n_ff_expert = static_cast<int>(integer("moe_intermediate_size", 1408));
    m.n_ff_shared = static_cast<int>(
        std::clamp<int64_t>(integer("num_shared_experts", 2) * m.n_ff_expert, 0, 1 << 30));
    m.deepseek = m.sigmoid_gating = m.selection_bias = m.norm_topk_prob = true;
    m.routed_scale = static_cast<float>(number("route_scale", 1.0));
    const int64_t first = integer("num_dense_layers", 1);
    if (m.n_expert > 0)
      for (int i = 0; i < c.n_layer; ++i)
        if (i >= first) m.layers.push_back(i);
  } else if (c.arch == "lfm2moe") {  // Lfm2MoeConfig's defaults: V3's routing in one group
    m.n_expert = static_cast<int>(integer("num_experts", 32));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 4));
    m.n_ff_expert = static_cast<int>(integer("moe_intermediate_size", 1792));
    m.deepseek = m.sigmoid_gating = true;
    m.selection_bias = boolean("use_expert_bias", true);
    m.norm_topk_prob = boolean("norm_topk_prob", true);
    m.norm_eps = 1e-6f;
    m.routed_scale = static_cast<float>(number("routed_scaling_factor", 1.0));
    const int64_t dense = integer("num_dense_layers", 2);
    for (int i = 0; i < c.n_layer; ++i)
      if (i >= dense && m.n_expert > 0) m.layers.push_back(i);
  } else if (c.arch == "olmoe") {  // OlmoeConfig's defaults; experts of intermediate_size
    m.n_expert = static_cast<int>(integer("num_experts", 64));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 8));
    m.n_ff_expert = c.n_ff;
    m.norm_topk_prob = boolean("norm_topk_prob", false);
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "phimoe") {  // PhimoeConfig's defaults: sparsemixer over 16 experts
    m.n_expert = static_cast<int>(integer("num_local_experts", 16));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 2));
    m.n_ff_expert = c.n_ff;
    m.sparsemixer = true;
    const JsonValue* eps = cfg.get("router_jitter_noise");
    if (eps != nullptr && !eps->is_null() && !eps->is_number())
      throw ModelError("config 'router_jitter_noise' in '" + path + "' must be a number");
    m.sparsemixer_eps =
        eps == nullptr || eps->is_null() ? 0.01f : static_cast<float>(eps->number);  // (checked)
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else if (c.arch == "mixtral") {
    m.n_expert = static_cast<int>(integer("num_local_experts", 8));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", 2));
    m.n_ff_expert = c.n_ff;
    m.norm_topk_prob = true;
    for (int i = 0; i < c.n_layer; ++i) m.layers.push_back(i);
  } else {
    const bool q3 = c.arch == "qwen3moe", q35 = c.arch == "qwen35moe", qn = c.arch == "qwen3next";
    const bool vl =
        c.arch == "qwen3vlmoe";  // (Qwen3VLMoeTextConfig's: 60 experts, 4 used, 1408 rows)
    // transformers 5 writes num_local_experts for Qwen-MoE too; the Hub's files say num_experts.
    // (Qwen3_5MoeTextConfig's defaults: 256 experts, 8 used, 512 rows, a shared one of 512)
    // (Qwen3NextConfig's: 512 experts, 10 used, 512 rows, a shared one of 512, renormalised)
    m.n_expert = static_cast<int>(integer("num_experts", integer("num_local_experts", qn    ? 512
                                                                                      : q35 ? 256
                                                                                      : q3  ? 128
                                                                                            : 60)));
    m.n_expert_used = static_cast<int>(integer("num_experts_per_tok", qn ? 10 : q3 || q35 ? 8 : 4));
    m.n_ff_expert = static_cast<int>(integer("moe_intermediate_size", q35 || qn ? 512
                                                                      : q3      ? 768
                                                                                : 1408));
    if (!q3 && !vl)
      m.n_ff_shared =
          static_cast<int>(integer("shared_expert_intermediate_size", q35 || qn ? 512 : 5632));
    // (Qwen3.5's and Qwen3-VL-MoE's routers always renormalise the chosen weights)
    m.norm_topk_prob = q35 || vl || boolean("norm_topk_prob", qn);
    const int64_t step = integer("decoder_sparse_step", 1);
    if (step < 1) throw ModelError("config 'decoder_sparse_step' in '" + path + "' must be >= 1");
    std::vector<int64_t> dense;
    if (const JsonValue* v = cfg.get("mlp_only_layers"); v != nullptr && !v->is_null()) {
      if (!v->is_array())
        throw ModelError("config 'mlp_only_layers' in '" + path + "' must be a list");
      for (const JsonValue& e : v->array) {
        if (!e.is_number() || !e.is_integer)
          throw ModelError("config 'mlp_only_layers' in '" + path + "' must hold layer indices");
        dense.push_back(e.integer);
      }
    }
    // transformers: a layer is sparse when not in mlp_only_layers and (i + 1) % step == 0.
    if (m.n_expert > 0)
      for (int i = 0; i < c.n_layer; ++i)
        if (std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0)
          m.layers.push_back(i);
  }
  validate_moe(c, path);
}

// Experts read in place from two 3-D stacks: gate_up [n * 2F, E] (each expert's gate rows, then
// its up rows) and down [n * E, F] (GGUF's ffn_gate_up_exps / ffn_down_exps, Granite MoE's
// input_linear / output_linear, transformers 5's fused experts.gate_up_proj / down_proj).
void view_expert_stacks(const TensorView& gu, const TensorView& d, int64_t n, int64_t F, int64_t E,
                        MoeWeights& out) {
  for (int64_t e = 0; e < n; ++e) {
    out.experts[e].w_gate = expert_slice(gu, e, 2 * F, 0, F);
    out.experts[e].w_up = expert_slice(gu, e, 2 * F, F, F);
    out.experts[e].w_down = expert_slice(d, e, E, 0, E);
  }
}

void build_moe_layer(const ModelConfig& c, int layer, bool gguf, const TensorSource& src,
                     MoeWeights& out) {
  const MoeConfig& m = c.moe;
  const int64_t E = c.n_embd, F = m.n_ff_expert, n = m.n_expert;
  const std::string l = std::to_string(layer);
  const std::string canon = "layers." + l + ".";
  out.experts.assign(static_cast<size_t>(n), ExpertWeights{});
  if (gguf) {
    const std::string p = "blk." + l + ".";
    out.router = src.take(p + "ffn_gate_inp.weight", canon + "router", n, E);
    if (src.has(p + "ffn_gate_up_exps.weight")) {
      const TensorView gu =
          src.take(p + "ffn_gate_up_exps.weight", canon + "gate_up_exps", n * 2 * F, E);
      for (int64_t e = 0; e < n; ++e) {
        out.experts[e].w_gate = expert_slice(gu, e, 2 * F, 0, F);
        out.experts[e].w_up = expert_slice(gu, e, 2 * F, F, F);
      }
    } else if (c.ffn_relu2) {  // (Nemotron-H: up and down alone)
      const TensorView u = src.take(p + "ffn_up_exps.weight", canon + "up_exps", n * F, E);
      for (int64_t e = 0; e < n; ++e) out.experts[e].w_up = expert_slice(u, e, F, 0, F);
    } else if (src.has(p + "ffn_gate_exps.weight") || !src.has(p + "ffn_gate.0.weight")) {
      const TensorView g = src.take(p + "ffn_gate_exps.weight", canon + "gate_exps", n * F, E);
      const TensorView u = src.take(p + "ffn_up_exps.weight", canon + "up_exps", n * F, E);
      for (int64_t e = 0; e < n; ++e) {
        out.experts[e].w_gate = expert_slice(g, e, F, 0, F);
        out.experts[e].w_up = expert_slice(u, e, F, 0, F);
      }
    }
    if (src.has(p + "ffn_down_exps.weight") || !src.has(p + "ffn_down.0.weight")) {
      const TensorView d = src.take(p + "ffn_down_exps.weight", canon + "down_exps", n * E, F);
      for (int64_t e = 0; e < n; ++e) out.experts[e].w_down = expert_slice(d, e, E, 0, E);
    }
    if (m.bias) {  // gpt-oss: the router's bias, and one bias row per expert in [n_expert, rows]
      out.router_bias = src.take(p + "ffn_gate_inp.bias", canon + "router_bias", 1, n);
      const TensorView bg = src.to_f32(src.take(p + "ffn_gate_exps.bias", canon + "b_gate", n, F));
      const TensorView bu = src.to_f32(src.take(p + "ffn_up_exps.bias", canon + "b_up", n, F));
      const TensorView bd = src.to_f32(src.take(p + "ffn_down_exps.bias", canon + "b_down", n, E));
      for (int64_t e = 0; e < n; ++e) {
        out.experts[e].b_gate = expert_slice(bg, e, 1, 0, 1);
        out.experts[e].b_up = expert_slice(bu, e, 1, 0, 1);
        out.experts[e].b_down = expert_slice(bd, e, 1, 0, 1);
      }
    }
    // Older Mixtral conversions: one 2-D tensor per expert.
    for (int64_t e = 0; e < n; ++e) {
      ExpertWeights& x = out.experts[e];
      const std::string idx = std::to_string(e);
      const std::string s = std::string(".").append(idx).append(".weight"),
                        ce = canon + "experts." + idx + ".";
      if (x.w_gate.empty() && !c.ffn_relu2)
        x.w_gate = src.take(p + "ffn_gate" + s, ce + "w_gate", F, E);
      if (x.w_up.empty()) x.w_up = src.take(p + "ffn_up" + s, ce + "w_up", F, E);
      if (x.w_down.empty()) x.w_down = src.take(p + "ffn_down" + s, ce + "w_down", E, F);
    }
    if (m.n_ff_shared > 0) {
      const int64_t S = m.n_ff_shared;
      if (!c.ffn_relu2)
        out.shared.w_gate = src.take(p + "ffn_gate_shexp.weight", canon + "shared.w_gate", S, E);
      out.shared.w_up = src.take(p + "ffn_up_shexp.weight", canon + "shared.w_up", S, E);
      out.shared.w_down = src.take(p + "ffn_down_shexp.weight", canon + "shared.w_down", E, S);
      if (!shared_experts_ungated(c))
        out.shared_gate_inp =
            src.take(p + "ffn_gate_inp_shexp.weight", canon + "shared_gate_inp", 1, E);
    }
    if (m.selection_bias)
      out.selection_bias = src.take(p + "exp_probs_b.bias", canon + "selection_bias", 1, n);
    return;
  }
  if (c.arch == "gpt-oss") return gpt_oss_experts_hf(c, layer, src, out);
  if (c.arch == "llama4") return llama4_experts_hf(c, layer, src, out);
  if (c.arch == "nemotron_h") {  // relu2 experts: up_proj / down_proj each; the shared MLP alike
    const std::string p = "backbone.layers." + l + ".mixer.";
    out.router = src.take(p + "gate.weight", canon + "router", n, E);
    for (int64_t e = 0; e < n; ++e) {
      const std::string pe = p + "experts." + std::to_string(e) + ".",
                        ce = canon + "experts." + std::to_string(e) + ".";
      out.experts[e].w_up = src.take(pe + "up_proj.weight", ce + "w_up", F, E);
      out.experts[e].w_down = src.take(pe + "down_proj.weight", ce + "w_down", E, F);
    }
    if (m.n_ff_shared > 0) {
      const int64_t S = m.n_ff_shared;
      out.shared.w_up = src.take(p + "shared_experts.up_proj.weight", canon + "shared.w_up", S, E);
      out.shared.w_down =
          src.take(p + "shared_experts.down_proj.weight", canon + "shared.w_down", E, S);
    }
    out.selection_bias =
        src.take(p + "gate.e_score_correction_bias", canon + "selection_bias", 1, n);
    return;
  }
  if (c.arch == "granitemoe" || c.arch == "granitehybrid") {
    // 3-D stacks, read in place: input_linear rows = gate then up. GraniteMoeSWA's folders (no
    // conversion mapping in transformers) name them as transformers' modules do: router.weight,
    // experts.gate_up_proj, experts.down_proj, the same layouts.
    const std::string p = "model.layers." + l + ".block_sparse_moe.";
    const bool module_names = !src.has(p + "router.layer.weight") && src.has(p + "router.weight");
    out.router = src.take(p + (module_names ? "router.weight" : "router.layer.weight"),
                          canon + "router", n, E);
    view_expert_stacks(src.take(p + (module_names ? "experts.gate_up_proj" : "input_linear.weight"),
                                canon + "gate_up_exps", n * 2 * F, E),
                       src.take(p + (module_names ? "experts.down_proj" : "output_linear.weight"),
                                canon + "down_exps", n * E, F),
                       n, F, E, out);
    if (m.n_ff_shared > 0) {  // (Granite 4.0-H's shared MLP: input_linear [gate | up], ungated)
      const int64_t S = m.n_ff_shared;
      const std::string sp = "model.layers." + l + ".shared_mlp.";
      const TensorView gu =
          src.take(sp + "input_linear.weight", canon + "shared.w_gate_up", 2 * S, E);
      out.shared.w_gate = gu;
      out.shared.w_gate.rows = S;
      out.shared.w_up = gu;
      out.shared.w_up.rows = S;
      out.shared.w_up.data = gu.data + static_cast<size_t>(S) * gu.row_bytes;
      out.shared.w_down = src.take(sp + "output_linear.weight", canon + "shared.w_down", E, S);
    }
    return;
  }
  if (c.arch == "dbrx") {  // DBRX: w1 / v1 (gate / up) [n F, E] stacks; w2 [n F, E]: each
    // expert's down matrix transposed (copied once into [E, F] rows, in the stored type)
    const std::string p = "model.layers." + l + ".mlp.";
    out.router = src.take(p + "gate.weight", canon + "router", n, E);
    const TensorView g = src.take(p + "experts.w1", canon + "gate_exps", n * F, E);
    const TensorView u = src.take(p + "experts.v1", canon + "up_exps", n * F, E);
    const TensorView w2 = src.take(p + "experts.w2", canon + "w2_exps", n * F, E);
    const size_t es = w2.type == DType::F32 ? 4 : 2;  // (a folder's types: F32, F16, BF16)
    uint8_t* t = src.alloc(static_cast<size_t>(n * E * F) * es);
    for (int64_t e = 0; e < n; ++e)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t d = 0; d < E; ++d)
          std::memcpy(t + static_cast<size_t>((e * E + d) * F + f) * es,
                      w2.row(e * F + f) + static_cast<size_t>(d) * es, es);
    TensorView down = w2;
    down.rows = n * E;
    down.cols = F;
    down.row_bytes = static_cast<size_t>(F) * es;
    down.data = t;
    for (int64_t e = 0; e < n; ++e) {
      out.experts[e].w_gate = expert_slice(g, e, F, 0, F);
      out.experts[e].w_up = expert_slice(u, e, F, 0, F);
      out.experts[e].w_down = expert_slice(down, e, E, 0, E);
    }
    return;
  }
  // (Mixtral and LFM2-MoE name the experts' matrices w1 / w3 / w2; Jamba's router is "router")
  // (MiniMax-M2's folders: Mixtral's names, its selection bias beside the router)
  const bool minimax =
      c.arch == "minimax-m2" && src.has("model.layers." + l + ".block_sparse_moe.gate.weight");
  const bool mixtral = c.arch == "mixtral" || c.arch == "phimoe" || minimax,
             w123 = mixtral || c.arch == "lfm2moe";
  const std::string p = "model.layers." + l +
                        (mixtral                                    ? ".block_sparse_moe."
                         : c.arch == "lfm2moe" || c.arch == "jamba" ? ".feed_forward."
                                                                    : ".mlp.");
  out.router =
      src.take(p + (c.arch == "jamba" ? "router.weight" : "gate.weight"), canon + "router", n, E);
  const std::vector<int64_t> gu_shape =
      src.shape ? src.shape(p + "experts.gate_up_proj") : std::vector<int64_t>{};
  if (gu_shape.size() == 3 && gu_shape[1] == E && gu_shape[2] == 2 * F && E != 2 * F) {
    // The Hub's Qwen3-VL-MoE files: the stacks transposed (gate_up_proj [n, E, 2F], gate columns
    // then up; down_proj [n, F, E]), rearranged once as transformers' conversion does when the
    // shapes say so (a square stack, E = 2F, is read as it is, as transformers reads it).
    view_expert_rows(float_stack_rows(p, canon, E, F, n, src, false), n, E, F, out);
  } else if (src.has(p + "experts.gate_up_proj")) {
    // transformers 5's fused stacks where no conversion restores the per-expert tensors (Mistral
    // 4, Qwen3-VL-MoE as transformers 5 writes it): gate_up_proj [n, 2F, E], down_proj [n, E, F].
    view_expert_stacks(src.take(p + "experts.gate_up_proj", canon + "gate_up_exps", n * 2 * F, E),
                       src.take(p + "experts.down_proj", canon + "down_exps", n * E, F), n, F, E,
                       out);
  } else {
    for (int64_t e = 0; e < n; ++e) {
      ExpertWeights& x = out.experts[e];
      const std::string pe = p + "experts." + std::to_string(e) + ".",
                        ce = canon + "experts." + std::to_string(e) + ".";
      x.w_gate = src.take(pe + (w123 ? "w1.weight" : "gate_proj.weight"), ce + "w_gate", F, E);
      x.w_up = src.take(pe + (w123 ? "w3.weight" : "up_proj.weight"), ce + "w_up", F, E);
      x.w_down = src.take(pe + (w123 ? "w2.weight" : "down_proj.weight"), ce + "w_down", E, F);
    }
  }
  // (Qwen2-MoE: shared_expert and its gate; ERNIE, DeepSeek and GLM: shared_experts, ungated)
  const bool ungated = shared_experts_ungated(c);
  if (m.n_ff_shared > 0) {
    const int64_t S = m.n_ff_shared;
    const std::string sp = p + (ungated ? "shared_experts." : "shared_expert.");
    out.shared.w_gate = src.take(sp + "gate_proj.weight", canon + "shared.w_gate", S, E);
    out.shared.w_up = src.take(sp + "up_proj.weight", canon + "shared.w_up", S, E);
    out.shared.w_down = src.take(sp + "down_proj.weight", canon + "shared.w_down", E, S);
    if (!ungated)
      out.shared_gate_inp =
          src.take(p + "shared_expert_gate.weight", canon + "shared_gate_inp", 1, E);
  }
  if (m.selection_bias)
    out.selection_bias =
        src.take(p + (c.arch == "ernie4_5-moe" ? "moe_statics.e_score_correction_bias"
                      : c.arch == "lfm2moe"    ? "expert_bias"
                      : c.arch == "minimax-m2" ||  // (EXAONE MoE's too, where it is there)
                              (c.arch == "exaone-moe" && src.has(p + "e_score_correction_bias"))
                          ? "e_score_correction_bias"
                          : "gate.e_score_correction_bias"),
                 canon + "selection_bias", 1, n);
}

}  // namespace ossa
