// load_model: a GGUF file or a Hugging Face folder -> ossa::Model (config + validated weight
// views).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <tuple>

#include "formats/config_json.h"
#include "formats/dequantize.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "formats/safetensors.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/parallel.h"
#include "kernels/prepare_weights.h"
#include "model/arch_config.h"
#include "model/moe.h"
#include "model/weights.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/half.h"
#include "util/json.h"
#include "util/mmap.h"

namespace ossa {

namespace fs = std::filesystem;

namespace {

// Keeps the maps and converted buffers alive for as long as any view into them.
struct Storage {
  std::vector<std::shared_ptr<GGUFFile>> gguf;
  std::vector<std::shared_ptr<SafetensorsFile>> safetensors;
  std::vector<std::vector<float>> buffers;
  // Weights repacked for the AMX kernels, or dtype bfloat16's copies (kernels/prepare_weights.h).
  PreparedWeights prepared;
  std::map<std::string, TensorView> canonical;  // "layers.0.wq" -> view used by the forward pass
};

// One tensor of the file(s) by its stored name.
struct Raw {
  std::string type_name;
  bool supported = false;
  TensorView view;
  size_t n_dims = 0;
  // Safetensors: the stored bytes and shape whatever the dtype (take_u8 reads U8 tensors).
  const uint8_t* bytes = nullptr;
  std::vector<int64_t> shape;
};

struct Builder {
  std::string path;
  std::map<std::string, Raw> raw;
  Storage* storage;

  bool has(const std::string& name) const { return raw.count(name) != 0; }

  // A rows x cols F32 tensor made at load under `name` (stacked per-head norms, OLMo's weightless
  // norms as ones): its buffer, for the caller to fill.
  float* add_f32(const std::string& name, int64_t rows, int64_t cols) {
    float* buf = reinterpret_cast<float*>(alloc(static_cast<size_t>(rows * cols) * 4));
    Raw r;
    r.type_name = "F32";
    r.supported = true;
    r.n_dims = 2;
    r.view.type = DType::F32;
    r.view.rows = rows;
    r.view.cols = cols;
    r.view.row_bytes = static_cast<size_t>(cols) * 4;
    r.view.data = reinterpret_cast<const uint8_t*>(buf);
    raw[name] = r;
    return buf;
  }

  // OLMo's LayerNorms have no weights: ones under the names the loader takes (the layers' two
  // norms and the final one), where the file has none.
  void add_unit_norms(const std::function<std::string(int, const char*)>& name_of, int n_layer,
                      const std::string& output_norm, int64_t n_embd) {
    std::vector<std::string> names = {output_norm};
    for (int i = 0; i < n_layer; ++i)
      for (const char* field : {"attn_norm", "ffn_norm"}) names.push_back(name_of(i, field));
    for (const std::string& name : names)
      if (!has(name)) std::fill_n(add_f32(name, 1, n_embd), n_embd, 1.0f);
  }

  // `bytes` of memory owned by the model (4-byte aligned), for converted or rearranged copies.
  uint8_t* alloc(size_t bytes) {
    return reinterpret_cast<uint8_t*>(storage->buffers.emplace_back((bytes + 3) / 4).data());
  }

  // The rows of v as F32: v itself when stored so, else a converted copy (norms, biases).
  TensorView to_f32(const TensorView& v) {
    if (v.type == DType::F32) return v;
    float* buf = reinterpret_cast<float*>(alloc(static_cast<size_t>(v.rows * v.cols) * 4));
    for (int64_t r = 0; r < v.rows; ++r) dequantize_row_logical(v, r, buf + r * v.cols);
    TensorView out = v;
    out.in_perm = nullptr;
    out.type = DType::F32;
    out.row_bytes = static_cast<size_t>(v.cols) * 4;
    out.data = reinterpret_cast<const uint8_t*>(buf);
    return out;
  }

  // A tensor the model needs, checked for presence, type and shape. `rows == 1` marks a vector;
  // vectors are converted to F32 so the forward pass sees one type for norms and biases.
  TensorView take(const std::string& name, const std::string& canonical, int64_t rows, int64_t cols,
                  bool required = true) {
    auto it = raw.find(name);
    if (it == raw.end()) {
      if (required) throw ModelError("missing tensor '" + name + "' in '" + path + "'");
      return {};
    }
    const Raw& r = it->second;
    if (!r.supported)
      throw ModelError("unsupported tensor type '" + r.type_name + "' for tensor '" + name +
                       "' in '" + path + "'");
    const TensorView& v = r.view;
    const bool vector = rows == 1;
    // A vector may be stored 1-D or as one row (HF's shared_expert_gate is [1, n_embd]).
    const bool vector_dims = r.n_dims == 1 || (r.n_dims == 2 && v.rows == 1);
    if (v.rows != rows || v.cols != cols || (vector && !vector_dims) || (!vector && r.n_dims < 2)) {
      std::ostringstream msg;
      msg << "shape mismatch for tensor '" << name << "' in '" << path << "': expected ";
      if (vector)
        msg << "a vector of " << cols;
      else
        msg << rows << " x " << cols << " (rows x cols)";
      msg << ", got " << v.rows << " x " << v.cols << " (" << r.n_dims << "-D)";
      throw ModelError(msg.str());
    }
    TensorView out = v;
    const size_t align = v.type == DType::F32                              ? 4
                         : (v.type == DType::F16 || v.type == DType::BF16) ? 2
                                                                           : 1;
    if (vector && v.type != DType::F32) {
      out = to_f32(v);
    } else if (reinterpret_cast<uintptr_t>(v.data) % align != 0) {
      // Possible only in a hand-made safetensors file; the kernels expect aligned elements.
      uint8_t* buf = alloc(v.nbytes());
      std::memcpy(buf, v.data, v.nbytes());
      out.data = buf;
    }
    storage->canonical[canonical] = out;
    return out;
  }

  // A U8 safetensors tensor of exactly `shape` (MXFP4 blocks and scales), as its bytes.
  const uint8_t* take_u8(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = raw.find(name);
    if (it == raw.end()) throw ModelError("missing tensor '" + name + "' in '" + path + "'");
    const Raw& r = it->second;
    const auto dims = [](const std::vector<int64_t>& s) {
      std::string out;
      for (int64_t d : s) out += (out.empty() ? "" : " x ") + std::to_string(d);
      return out;
    };
    if (r.bytes == nullptr || r.type_name != "U8")
      throw ModelError("tensor '" + name + "' in '" + path + "' has type '" + r.type_name +
                       "', expected U8");
    if (r.shape != shape)
      throw ModelError("shape mismatch for tensor '" + name + "' in '" + path + "': expected " +
                       dims(shape) + ", got " + dims(r.shape));
    return r.bytes;
  }

  // A fused matrix whose rows interleave several tensors (Qwen3-Next's per-key-head projections):
  // each part gets a copy of the listed rows, in that order (rows are whole blocks in every type).
  struct Gathered {
    TensorView* view;
    std::string canonical;
    const std::vector<int64_t>& rows;
  };
  void take_gathered(const std::string& name, int64_t rows, int64_t cols,
                     std::initializer_list<Gathered> parts) {
    const TensorView whole = take(name, name, rows, cols);
    for (const Gathered& part : parts) {
      uint8_t* buf = alloc(part.rows.size() * whole.row_bytes);
      for (size_t k = 0; k < part.rows.size(); ++k) {
        OSSA_ASSERT(part.rows[k] >= 0 && part.rows[k] < rows);
        std::memcpy(buf + k * whole.row_bytes, whole.row(part.rows[k]), whole.row_bytes);
      }
      TensorView v = whole;
      v.rows = static_cast<int64_t>(part.rows.size());
      v.data = buf;
      *part.view = v;
      storage->canonical[part.canonical] = v;
    }
    storage->canonical.erase(name);
  }

  // A fused matrix (Phi-3's qkv_proj, gate_up_proj) taken whole and viewed as consecutive row
  // ranges, in place: parts[i] gets rows[i] rows under canonical names[i].
  void take_split(const std::string& name, const std::string& canonical,
                  std::initializer_list<TensorView*> parts,
                  std::initializer_list<const char*> names, std::initializer_list<int64_t> rows,
                  int64_t cols) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    const TensorView whole = take(name, canonical, total, cols);
    int64_t at = 0;
    auto part = parts.begin();
    auto part_name = names.begin();
    const std::string prefix = canonical.substr(0, canonical.rfind('.') + 1);
    for (int64_t r : rows) {
      TensorView v = whole;
      v.rows = r;
      v.data = whole.data + static_cast<size_t>(at) * whole.row_bytes;
      **part++ = v;
      storage->canonical[prefix + *part_name++] = v;
      at += r;
    }
  }
};

int checked_dim(int64_t v, const char* what, const std::string& path,
                int64_t max = int64_t{1} << 30) {
  if (v <= 0 || v > max)
    throw ModelError(std::string("invalid ") + what + " " + std::to_string(v) + " in '" + path +
                     "'");
  return static_cast<int>(v);
}

// Apertus's xIELU parameters as stored (alpha_p and alpha_n before their softplus, beta, eps; one
// per layer) into ModelConfig::xielu as applied: softplus(alpha_p), beta + softplus(alpha_n)
// (softplus in double, rounded once; transformers' float32 softplus agrees to an ulp).
void set_xielu(ModelConfig& c, const std::vector<double>& alpha_p,
               const std::vector<double>& alpha_n, const std::vector<double>& beta,
               const std::vector<double>& eps, const std::string& path) {
  const auto softplus = [](double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); };
  c.xielu.clear();
  for (size_t i = 0; i < alpha_p.size(); ++i) {
    const float b = static_cast<float>(beta[i]);
    const float v[4] = {static_cast<float>(softplus(alpha_p[i])),
                        b + static_cast<float>(softplus(alpha_n[i])), b,
                        static_cast<float>(eps[i])};
    for (float x : v)
      if (!std::isfinite(x)) throw ModelError("invalid xIELU parameter in '" + path + "'");
    c.xielu.insert(c.xielu.end(), v, v + 4);
  }
}

void validate_config(ModelConfig& c, const std::string& path) {
  checked_dim(c.n_vocab, "vocabulary size", path);
  checked_dim(c.n_embd, "embedding size", path);
  checked_dim(c.n_layer, "layer count", path, 4096);
  checked_dim(c.n_head, "head count", path, 65536);
  checked_dim(c.n_head_kv, "KV head count", path, 65536);
  checked_dim(c.head_dim, "head dimension", path, 65536);
  checked_dim(c.n_ff, "feed-forward size", path);
  if (c.n_head % c.n_head_kv != 0)
    throw ModelError("head count " + std::to_string(c.n_head) +
                     " is not a multiple of the KV head count " + std::to_string(c.n_head_kv) +
                     " in '" + path + "'");
  if (c.head_dim % 2 != 0)
    throw ModelError("odd head dimension " + std::to_string(c.head_dim) + " in '" + path + "'");
  if (c.n_ctx_train <= 0) c.n_ctx_train = 4096;
  if (!(c.rms_eps > 0.0f) || !(c.rope_theta > 0.0f))
    throw ModelError("invalid rms_eps or rope_theta in '" + path + "'");
  if (!(c.rope_scaling.factor > 0.0f))
    throw ModelError("invalid rope scaling factor in '" + path + "'");
  if (!(c.attn_scale >= 0.0f) || !(c.final_softcap >= 0.0f) || !(c.rope_theta_swa >= 0.0f) ||
      !std::isfinite(c.final_softcap) || !(c.attn_softcap >= 0.0f) ||
      !std::isfinite(c.attn_softcap) || !(c.residual_scale >= 0.0f) || !(c.logit_scale >= 0.0f) ||
      !(c.embd_scale >= 0.0f) || !(c.clamp_qkv >= 0.0f) || !std::isfinite(c.clamp_qkv) ||
      !(c.attn_temp_scale >= 0.0f) || !std::isfinite(c.attn_temp_scale) ||
      (c.attn_temp_scale > 0.0f && c.attn_temp_length < 1))
    throw ModelError("invalid attention scale, soft-capping, q/k/v clamp or local RoPE base in '" +
                     path + "'");
}

// The GGUF architectures ossa runs: the loader's check and the message naming an unknown one.
const std::vector<std::string> k_gguf_archs = {
    "llama",      "qwen2",       "qwen3",      "mistral",       "qwen3moe",   "qwen2moe",
    "gemma",      "gemma2",      "gemma3",     "phi3",          "smollm3",    "granite",
    "granitemoe", "gpt-oss",     "olmo2",      "exaone4",       "ernie4_5",   "ernie4_5-moe",
    "deepseek2",  "glm4moe",     "olmoe",      "glm4",          "mistral3",   "qwen35",
    "qwen35moe",  "lfm2",        "lfm2moe",    "granitehybrid", "nemotron_h", "nemotron_h_moe",
    "qwen3next",  "mamba2",      "mamba",      "jamba",         "falcon-h1",  "gemma4",
    "llama4",     "qwen3vl",     "qwen3vlmoe", "qwen2vl",       "command-r",  "cohere2",
    "minimax-m2", "gemma3n",     "seed_oss",   "arcee",         "exaone",     "hunyuan-dense",
    "starcoder2", "stablelm",    "phi2",       "nemotron",      "olmo",       "hunyuan-moe",
    "gptneox",    "falcon",      "dots1",      "phimoe",        "apertus",    "exaone-moe",
    "gptj",       "bloom",       "mpt",        "gpt2",          "starcoder",  "afmoe",
    "dbrx",       "chatglm",     "minicpm3",   "jais2",         "minicpm",    "internlm2",
    "deepseek",   "bailingmoe2", "deci"};
const std::string k_supported = [] {
  std::string s = "(ossa supports ";
  for (size_t i = 0; i < k_gguf_archs.size(); ++i) s += (i ? ", " : "") + k_gguf_archs[i];
  return s + ")";
}();
// config.json names (model_type), for the message; the loader maps them below (k_archs).
const char* const k_supported_hf =
    "(ossa supports llama, qwen2, qwen3, mistral, qwen3_moe, qwen2_moe, mixtral, gemma, gemma2, "
    "gemma3_text, gemma3, phi3, smollm3, granite, granitemoe, granitemoeshared, granite_swa, "
    "granitemoe_swa, gpt_oss, olmo2, "
    "olmo3, exaone4, "
    "ernie4_5, ernie4_5_moe, deepseek_v2, deepseek_v3, glm4_moe, glm4_moe_lite, olmoe, glm4, "
    "ministral3, mistral4, qwen3_5, qwen3_5_moe, qwen3_next, lfm2, lfm2_moe, granitemoehybrid, "
    "bamba, nemotron_h, mamba2, mamba, falcon_mamba, jamba, falcon_h1, gemma4_text, gemma4, "
    "llama4_text, llama4, qwen3_vl, qwen3_vl_moe, qwen2_vl, qwen2_5_vl, cohere, cohere2, "
    "minimax_m2, gemma3n_text, gemma3n, seed_oss, arcee, exaone, internlm3, helium, "
    "hunyuan_v1_dense, "
    "starcoder2, stablelm, phi, nemotron, olmo, hunyuan_v1_moe, gpt_neox, falcon, dots1, phimoe, "
    "apertus, exaone_moe, gptj, minicpm3, bloom, mpt, gpt2, gpt_bigcode, afmoe, dbrx, glm, opt, "
    "gpt_neo, bitnet, codegen, ministral, iquestcoder, cwm, jais2, vaultgemma, nanochat, "
    "flex_olmo, minicpm, internlm2, deepseek, bailing_moe (Ling 2.0), nemotron-nas)";

// Layer i's latent attention (config.mla; weights.h has the shapes). The per-head up-projections
// come from GGUF's attn_k_b / attn_v_b as llama.cpp's converter splits them (k_b already
// transposed: C x N per head), viewed in place, or from the fused kv_b ([H*(N+V)] x C: HF's
// kv_b_proj, older GGUF files), whose V rows are viewed in place and whose K rows are transposed
// into an f32 copy (k_nope = c @ wk_b[h] is applied to q: q_latent = wk_b[h] @ q_nope).
void build_mla_weights(const ModelConfig& c, Builder& b,
                       const std::function<std::string(int, const char*)>& name_of, int i,
                       LayerWeights& l) {
  const MlaConfig& a = c.mla;
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t H = c.n_head, N = a.qk_nope, R = a.qk_rope, V = a.v_head_dim, C = a.kv_lora_rank;
  if (a.q_lora_rank > 0) {
    l.wq_a = b.take(name_of(i, "wq_a"), p + "wq_a", a.q_lora_rank, c.n_embd);
    l.q_a_norm = b.take(name_of(i, "q_a_norm"), p + "q_a_norm", 1, a.q_lora_rank);
    l.wq_b = b.take(name_of(i, "wq_b"), p + "wq_b", H * (N + R), a.q_lora_rank);
  } else {
    l.wq = b.take(name_of(i, "wq"), p + "wq", H * (N + R), c.n_embd);
  }
  l.wkv_a = b.take(name_of(i, "wkv_a"), p + "wkv_a", C + R, c.n_embd);
  l.kv_a_norm = b.take(name_of(i, "kv_a_norm"), p + "kv_a_norm", 1, C);
  l.wo = b.take(name_of(i, "wo"), p + "wo", c.n_embd, H * V);
  l.wk_b.resize(static_cast<size_t>(H));
  l.wv_b.resize(static_cast<size_t>(H));
  auto head_view = [&](const TensorView& whole, int64_t first_row, int64_t rows,
                       const std::string& canonical) {
    TensorView v = whole;
    v.rows = rows;
    v.data = whole.data + static_cast<size_t>(first_row) * whole.row_bytes;
    b.storage->canonical[canonical] = v;
    return v;
  };
  if (b.has(name_of(i, "wk_b")) && b.has(name_of(i, "wv_b"))) {
    const TensorView kb = b.take(name_of(i, "wk_b"), p + "wk_b", H * C, N);
    const TensorView vb = b.take(name_of(i, "wv_b"), p + "wv_b", H * V, C);
    for (int64_t h = 0; h < H; ++h) {
      const std::string hs = std::to_string(h);
      l.wk_b[h] = head_view(kb, h * C, C, p + "wk_b." + hs);
      l.wv_b[h] = head_view(vb, h * V, V, p + "wv_b." + hs);
    }
    return;
  }
  const TensorView kvb = b.take(name_of(i, "wkv_b"), p + "wkv_b", H * (N + V), C);
  std::vector<float> row(static_cast<size_t>(C));
  for (int64_t h = 0; h < H; ++h) {
    const std::string hs = std::to_string(h);
    l.wv_b[h] = head_view(kvb, h * (N + V) + N, V, p + "wv_b." + hs);
    float* t = reinterpret_cast<float*>(b.alloc(static_cast<size_t>(C * N) * 4));
    for (int64_t n = 0; n < N; ++n) {  // row n of head h's K part, into column n
      dequantize_row_logical(kvb, h * (N + V) + n, row.data());
      for (int64_t k = 0; k < C; ++k) t[k * N + n] = row[static_cast<size_t>(k)];
    }
    TensorView v{DType::F32, C, N, reinterpret_cast<const uint8_t*>(t), static_cast<size_t>(N) * 4};
    b.storage->canonical[p + "wk_b." + hs] = v;
    l.wk_b[h] = v;
  }
}

// A depthwise convolution's taps (C x K, F32) as K x C, the layout the convolution reads.
TensorView transposed_taps(Builder& b, const TensorView& taps) {
  const int64_t C = taps.rows, K = taps.cols;
  float* t = reinterpret_cast<float*>(b.alloc(static_cast<size_t>(C * K) * 4));
  const float* src = reinterpret_cast<const float*>(taps.data);
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t j = 0; j < K; ++j) t[j * C + ch] = src[ch * K + j];
  return TensorView{DType::F32, K, C, reinterpret_cast<const uint8_t*>(t),
                    static_cast<size_t>(C) * 4};
}

// Layer i's short convolution (LFM2, config.conv; model/short_conv.cpp).
void build_conv_weights(const ModelConfig& c, Builder& b,
                        const std::function<std::string(int, const char*)>& name_of, int i,
                        LayerWeights& l) {
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t E = c.n_embd;
  l.sc_in = b.take(name_of(i, "sc_in"), p + "sc_in", 3 * E, E);
  const TensorView taps = b.to_f32(b.take(name_of(i, "sc_conv"), p + "sc_conv", E, c.conv.kernel));
  b.storage->canonical[p + "sc_conv"] = taps;
  l.sc_conv_t = transposed_taps(b, taps);
  l.sc_out = b.take(name_of(i, "sc_out"), p + "sc_out", E, E);
}

// Layer i's gated delta-net (config.delta; model/delta_net.cpp), with C = conv_dim, V = value
// heads x their size, H = value heads: ssm_qkv (C x n_embd), ssm_z (V x n_embd), ssm_beta and
// ssm_alpha (H x n_embd), ssm_conv (C x conv_kernel, F32), ssm_dt and ssm_a (1 x H: a_neg, the
// decay rate -exp(A_log), as GGUF stores it; a folder's A_log is converted), ssm_norm (1 x value
// head size), ssm_out (n_embd x V).
void build_delta_weights(const ModelConfig& c, Builder& b,
                         const std::function<std::string(int, const char*)>& name_of, int i,
                         LayerWeights& l, bool a_log) {
  const DeltaNetConfig& d = c.delta;
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t C = d.conv_dim(), V = int64_t{d.n_v_heads} * d.v_dim, H = d.n_v_heads;
  // Qwen3-Next's projections fused per key head g ([q_g | k_g | v_g | z_g], [b_g | a_g], its r =
  // value heads per key head in each), gathered row by row into Qwen3.5's layout (the value heads
  // stay grouped by key head: v_tiled false).
  const int64_t kd = d.k_dim, vd = d.v_dim, nk = d.n_k_heads, r = d.n_v_heads / d.n_k_heads;
  if (b.has(name_of(i, "ssm_qkvz"))) {
    std::vector<int64_t> qkv_rows, z_rows;
    const int64_t group = 2 * kd + 2 * r * vd;
    for (int64_t part = 0; part < 3; ++part)  // q, then k, then v of every group
      for (int64_t g = 0; g < nk; ++g)
        for (int64_t j = 0; j < (part < 2 ? kd : r * vd); ++j)
          qkv_rows.push_back(g * group + part * kd + j);
    for (int64_t g = 0; g < nk; ++g)
      for (int64_t j = 0; j < r * vd; ++j) z_rows.push_back(g * group + 2 * kd + r * vd + j);
    b.take_gathered(name_of(i, "ssm_qkvz"), nk * group, c.n_embd,
                    {{&l.ssm_qkv, p + "ssm_qkv", qkv_rows}, {&l.ssm_z, p + "ssm_z", z_rows}});
  } else {
    l.ssm_qkv = b.take(name_of(i, "ssm_qkv"), p + "ssm_qkv", C, c.n_embd);
    l.ssm_z = b.take(name_of(i, "ssm_z"), p + "ssm_z", V, c.n_embd);
  }
  if (b.has(name_of(i, "ssm_ba"))) {
    std::vector<int64_t> beta_rows, alpha_rows;
    for (int64_t g = 0; g < nk; ++g)
      for (int64_t j = 0; j < r; ++j) {
        beta_rows.push_back(g * 2 * r + j);
        alpha_rows.push_back(g * 2 * r + r + j);
      }
    b.take_gathered(
        name_of(i, "ssm_ba"), 2 * H, c.n_embd,
        {{&l.ssm_beta, p + "ssm_beta", beta_rows}, {&l.ssm_alpha, p + "ssm_alpha", alpha_rows}});
  } else {
    l.ssm_beta = b.take(name_of(i, "ssm_beta"), p + "ssm_beta", H, c.n_embd);
    l.ssm_alpha = b.take(name_of(i, "ssm_alpha"), p + "ssm_alpha", H, c.n_embd);
  }
  l.ssm_conv = b.to_f32(b.take(name_of(i, "ssm_conv"), p + "ssm_conv", C, d.conv_kernel));
  b.storage->canonical[p + "ssm_conv"] = l.ssm_conv;
  l.ssm_conv_t = transposed_taps(b, l.ssm_conv);
  l.ssm_dt = b.take(name_of(i, "ssm_dt"), p + "ssm_dt", 1, H);
  l.ssm_a = b.take(name_of(i, "ssm_a"), p + "ssm_a", 1, H);
  if (a_log) {  // (A_log -> -exp(A_log), in float as transformers computes it)
    float* a = reinterpret_cast<float*>(b.alloc(static_cast<size_t>(H) * 4));
    const float* src = reinterpret_cast<const float*>(l.ssm_a.data);
    for (int64_t h = 0; h < H; ++h) a[h] = -std::exp(src[h]);
    l.ssm_a.data = reinterpret_cast<const uint8_t*>(a);
    b.storage->canonical[p + "ssm_a"] = l.ssm_a;
  }
  l.ssm_norm = b.take(name_of(i, "ssm_norm"), p + "ssm_norm", 1, d.v_dim);
  l.ssm_out = b.take(name_of(i, "ssm_out"), p + "ssm_out", c.n_embd, V);
}

// A vector of n values (F32), as a folder stores it or as GGUF's Mamba-2 tensors do: ssm_a and
// ssm_d as n x 1, ssm_norm as n_groups rows (`rows`).
TensorView take_vector(Builder& b, const std::string& name, const std::string& canonical, int64_t n,
                       int64_t rows) {
  if (rows == 1) return b.take(name, canonical, 1, n);
  TensorView v = b.to_f32(b.take(name, canonical, rows, n / rows));
  v.rows = 1;
  v.cols = n;
  v.row_bytes = static_cast<size_t>(n) * 4;
  b.storage->canonical[canonical] = v;
  return v;
}

// Layer i's Mamba-1 mixer (config.mamba1; model/delta_net.cpp mamba1_layer), with D = d_inner, N =
// d_state, R = dt_rank: ssm_in (2D x n_embd: [x | z]), ssm_conv (D x conv_kernel, F32) and its bias
// ssm_conv_b (1 x D, where conv_bias), ssm_x (R + 2N x D), ssm_dt_w (D x R) and ssm_dt (1 x D: its
// bias), ssm_a (D x N, F32: -exp(A_log), as GGUF stores it; a folder's A_log is converted), ssm_d
// (1 x D), ssm_out (n_embd x D).
void build_mamba1_weights(const ModelConfig& c, Builder& b,
                          const std::function<std::string(int, const char*)>& name_of, int i,
                          LayerWeights& l, bool hf) {
  const Mamba1Config& s = c.mamba1;
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t D = s.d_inner, N = s.d_state;
  l.ssm_in = b.take(name_of(i, "ssm_in"), p + "ssm_in", 2 * D, c.n_embd);
  l.ssm_conv = b.to_f32(b.take(name_of(i, "ssm_conv"), p + "ssm_conv", D, s.conv_kernel));
  b.storage->canonical[p + "ssm_conv"] = l.ssm_conv;
  l.ssm_conv_t = transposed_taps(b, l.ssm_conv);
  if (s.conv_bias) l.ssm_conv_b = b.take(name_of(i, "ssm_conv_b"), p + "ssm_conv_b", 1, D);
  l.ssm_x = b.take(name_of(i, "ssm_x"), p + "ssm_x", s.x_proj_dim(), D);
  l.ssm_dt_w = b.take(name_of(i, "ssm_dt_w"), p + "ssm_dt_w", D, s.dt_rank);
  l.ssm_dt = b.take(name_of(i, "ssm_dt"), p + "ssm_dt", 1, D);
  TensorView a = b.to_f32(b.take(name_of(i, "ssm_a"), p + "ssm_a", D, N));
  if (hf) {  // (A_log -> -exp(A_log), in float as transformers computes it)
    float* neg = reinterpret_cast<float*>(b.alloc(static_cast<size_t>(D * N) * 4));
    const float* src = reinterpret_cast<const float*>(a.data);
    for (int64_t k = 0; k < D * N; ++k) neg[k] = -std::exp(src[k]);
    a.data = reinterpret_cast<const uint8_t*>(neg);
  }
  l.ssm_a = a;
  b.storage->canonical[p + "ssm_a"] = a;
  l.ssm_d = b.take(name_of(i, "ssm_d"), p + "ssm_d", 1, D);
  l.ssm_out = b.take(name_of(i, "ssm_out"), p + "ssm_out", c.n_embd, D);
  if (s.dt_b_c_weights) {  // (Jamba)
    l.ssm_dt_norm = b.take(name_of(i, "ssm_dt_norm"), p + "ssm_dt_norm", 1, s.dt_rank);
    l.ssm_b_norm = b.take(name_of(i, "ssm_b_norm"), p + "ssm_b_norm", 1, N);
    l.ssm_c_norm = b.take(name_of(i, "ssm_c_norm"), p + "ssm_c_norm", 1, N);
  }
}

// Layer i's Mamba-2 mixer (config.ssm; model/delta_net.cpp mamba2_layer), with P = proj_dim, C =
// conv_dim, H = heads, D = d_inner: ssm_in (P x n_embd), ssm_conv (C x conv_kernel, F32) and its
// bias ssm_conv_b (1 x C, where conv_bias), ssm_dt (1 x H: dt_bias), ssm_a (1 x H: -exp(A_log), as
// GGUF stores it; a folder's A_log is converted), ssm_d (1 x H), ssm_norm (1 x D), ssm_out
// (n_embd x D).
void build_mamba2_weights(const ModelConfig& c, Builder& b,
                          const std::function<std::string(int, const char*)>& name_of, int i,
                          LayerWeights& l, bool hf) {
  const Mamba2Config& s = c.ssm;
  const std::string p = "layers." + std::to_string(i) + ".";
  const int64_t C = s.conv_dim(), H = s.n_heads, D = s.d_inner;
  l.ssm_in = b.take(name_of(i, "ssm_in"), p + "ssm_in", s.proj_dim(), c.n_embd);
  l.ssm_conv = b.to_f32(b.take(name_of(i, "ssm_conv"), p + "ssm_conv", C, s.conv_kernel));
  b.storage->canonical[p + "ssm_conv"] = l.ssm_conv;
  l.ssm_conv_t = transposed_taps(b, l.ssm_conv);
  if (s.conv_bias) l.ssm_conv_b = b.take(name_of(i, "ssm_conv_b"), p + "ssm_conv_b", 1, C);
  l.ssm_dt = b.take(name_of(i, "ssm_dt"), p + "ssm_dt", 1, H);
  l.ssm_a = take_vector(b, name_of(i, "ssm_a"), p + "ssm_a", H, hf ? 1 : H);
  if (hf) {  // (A_log -> -exp(A_log), in float as transformers computes it)
    float* a = reinterpret_cast<float*>(b.alloc(static_cast<size_t>(H) * 4));
    const float* src = reinterpret_cast<const float*>(l.ssm_a.data);
    for (int64_t h = 0; h < H; ++h) a[h] = -std::exp(src[h]);
    l.ssm_a.data = reinterpret_cast<const uint8_t*>(a);
    b.storage->canonical[p + "ssm_a"] = l.ssm_a;
  }
  l.ssm_d = take_vector(b, name_of(i, "ssm_d"), p + "ssm_d", H, hf ? 1 : H);
  if (s.gated_norm)
    l.ssm_norm = take_vector(b, name_of(i, "ssm_norm"), p + "ssm_norm", D, hf ? 1 : s.n_groups);
  l.ssm_out = b.take(name_of(i, "ssm_out"), p + "ssm_out", c.n_embd, D);
}

void build_weights(Model& m, Builder& b,
                   const std::function<std::string(int, const char*)>& name_of,
                   const std::string& tok, const std::string& norm, const std::string& out) {
  const ModelConfig& c = m.config;
  const int64_t q = int64_t{c.n_head} * c.head_dim, kv = int64_t{c.n_head_kv} * c.head_dim;
  ModelWeights& w = m.weights;
  w.tok_embd = b.take(tok, "tok_embd", c.n_vocab, c.n_embd);
  const std::string stem = tok.substr(0, tok.rfind(".weight"));
  if (c.embd_norm) {  // (BLOOM: token_embd_norm; its folders' word_embeddings_layernorm renamed)
    w.tok_embd_norm = b.take(stem + "_norm.weight", "tok_embd_norm", 1, c.n_embd);
    if (c.norm_bias)  // (nanochat's RMSNorm has none)
      w.tok_embd_norm_b = b.take(stem + "_norm.bias", "tok_embd_norm_b", 1, c.n_embd);
  }
  if (c.pos_embd)  // (GPT-2, StarCoder: position_embd; the folders' wpe renamed)
    w.pos_embd =
        b.take(m.format == "safetensors" ? "model.embed_positions.weight" : "position_embd.weight",
               "pos_embd", c.n_ctx_train, c.n_embd);
  w.output_norm = b.take(norm, "output_norm", 1, c.n_embd);
  if (c.norm_bias)  // (StarCoder2: the final LayerNorm's bias, named as its weight)
    w.output_norm_b =
        b.take(norm.substr(0, norm.rfind(".weight")) + ".bias", "output_norm_b", 1, c.n_embd);
  if (c.tied_embeddings) {
    w.output = w.tok_embd;
    b.storage->canonical["output"] = w.output;
  } else {
    w.output = b.take(out, "output", c.n_vocab, c.n_embd);
  }
  const std::string out_b = out.substr(0, out.rfind(".weight")) + ".bias";
  if (b.has(out_b))  // (Phi-2's lm_head bias, tied weights or not)
    w.output_b = b.take(out_b, "output_b", 1, c.n_vocab);
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    // (Nemotron-H: a block holds a mixer or a feed-forward, not both)
    const bool mixer = !c.no_mixer(i), attention = c.has_kv(i);
    if (c.pre_norms() && mixer)
      l.attn_norm = b.take(name_of(i, "attn_norm"), p + "attn_norm", 1, c.n_embd);
    if (c.norm_bias && mixer) {
      l.attn_norm_b = b.take(name_of(i, "attn_norm_b"), p + "attn_norm_b", 1, c.n_embd);
      if (!c.parallel_block || c.parallel_norms)  // (StableLM's parallel residual: one norm)
        l.ffn_norm_b = b.take(name_of(i, "ffn_norm_b"), p + "ffn_norm_b", 1, c.n_embd);
    }
    if (!mixer) {
    } else if (c.linear_attn(i)) {  // (deci: the attention replaced by one linear map, wo)
      l.wo = b.take(name_of(i, "wo"), p + "wo", c.n_embd, c.n_embd);
    } else if (c.delta.is_layer(i)) {
      build_delta_weights(c, b, name_of, i, l, m.format == "safetensors");
    } else if (c.conv.is_layer(i)) {
      build_conv_weights(c, b, name_of, i, l);
    } else if (c.ssm.is_layer(i)) {
      build_mamba2_weights(c, b, name_of, i, l, m.format == "safetensors");
      if (attention) {  // (Falcon-H1: attention beside the mixer)
        l.wq = b.take(name_of(i, "wq"), p + "wq", q, c.n_embd);
        l.wk = b.take(name_of(i, "wk"), p + "wk", kv, c.n_embd);
        l.wv = b.take(name_of(i, "wv"), p + "wv", kv, c.n_embd);
      }
    } else if (c.mamba1.is_layer(i)) {
      build_mamba1_weights(c, b, name_of, i, l, m.format == "safetensors");
    } else if (c.mla.active()) {
      build_mla_weights(c, b, name_of, i, l);
    } else if ((c.arch == "phi3" || c.arch == "phimoe" || c.arch == "phi2" || c.arch == "gptneox" ||
                c.arch == "falcon" || c.arch == "bloom" || c.arch == "mpt" || c.arch == "gpt2" ||
                c.arch == "starcoder" || c.arch == "dbrx" || c.arch == "chatglm" ||
                c.arch == "gptj" || c.arch == "glm4moe" || c.arch == "bailingmoe2" ||
                c.arch == "llama" || c.arch == "internlm2" || c.arch == "minicpm" ||
                c.arch == "deepseek") &&
               b.has(name_of(i, "wqkv"))) {  // fused, viewed as three (InternLM2's wqkv too)
      b.take_split(name_of(i, "wqkv"), p + "wqkv", {&l.wq, &l.wk, &l.wv}, {"wq", "wk", "wv"},
                   {q, kv, kv}, c.n_embd);
      const std::string fused_b = name_of(i, "wqkv").substr(0, name_of(i, "wqkv").rfind(".weight"));
      if (c.qkv_bias && b.has(fused_b + ".bias")) {  // (Phi-2's older files: the biases fused too)
        const TensorView all = b.take(fused_b + ".bias", p + "bqkv", 1, q + 2 * kv);
        TensorView* parts[3] = {&l.bq, &l.bk, &l.bv};
        const int64_t off[3] = {0, q, q + kv}, len[3] = {q, kv, kv};
        for (int j = 0; j < 3; ++j) {
          *parts[j] = all;
          parts[j]->cols = len[j];
          parts[j]->row_bytes = static_cast<size_t>(len[j]) * 4;
          parts[j]->data = all.data + static_cast<size_t>(off[j]) * 4;
        }
      }
    } else {  // (Qwen3.5's gated attention: [query | gate] per head)
      const bool fused_gate = c.attn_gate && !c.attn_gate_proj;
      l.wq = b.take(name_of(i, "wq"), p + "wq", fused_gate ? 2 * q : q, c.n_embd);
      if (c.attn_gate_proj) l.wg = b.take(name_of(i, "wg"), p + "wg", q, c.n_embd);  // (AFMoE)
      l.wk = b.take(name_of(i, "wk"), p + "wk", kv, c.n_embd);
      l.wv = b.take(name_of(i, "wv"), p + "wv", kv, c.n_embd);
    }
    if (!c.mla.active() && attention) l.wo = b.take(name_of(i, "wo"), p + "wo", c.n_embd, q);
    if (c.sub_norms && attention)  // (BitNet: the attention output's norm before wo)
      l.attn_sub_norm = b.take(name_of(i, "attn_sub_norm"), p + "attn_sub_norm", 1, q);
    if (c.qkv_bias && attention && l.bq.empty()) {
      l.bq = b.take(name_of(i, "bq"), p + "bq", 1, q);
      l.bk = b.take(name_of(i, "bk"), p + "bk", 1, kv);
      l.bv = b.take(name_of(i, "bv"), p + "bv", 1, kv);
    }
    if (c.qk_norm && attention && c.qk_norm_heads) {  // (Cohere: a weight row per head)
      l.q_norm = b.to_f32(b.take(name_of(i, "q_norm"), p + "q_norm", c.n_head, c.head_dim));
      l.k_norm = b.to_f32(b.take(name_of(i, "k_norm"), p + "k_norm", c.n_head_kv, c.head_dim));
    } else if (c.qk_norm && attention) {  // per head, or (OLMo 2) over the whole projection
      l.q_norm = b.take(name_of(i, "q_norm"), p + "q_norm", 1, c.qk_norm_full() ? q : c.head_dim);
      l.k_norm = b.take(name_of(i, "k_norm"), p + "k_norm", 1, c.qk_norm_full() ? kv : c.head_dim);
    }
    if (c.o_bias)
      l.bo = b.take(name_of(i, "bo"), p + "bo", 1, c.n_embd);
    else if (b.has(name_of(i, "bo")))
      throw ModelError("tensor '" + name_of(i, "bo") +
                       "' (an attention output bias) is not supported");
    if (c.attn_sinks) l.sinks = b.take(name_of(i, "sinks"), p + "sinks", 1, c.n_head);
    if (c.no_ffn(i)) continue;
    // (Cohere: the attention's norm serves both; GPT-NeoX's parallel MLP has its own)
    if (c.pre_norms() && (!c.parallel_block || c.parallel_norms))
      l.ffn_norm = b.take(name_of(i, "ffn_norm"), p + "ffn_norm", 1, c.n_embd);
    if (c.post_norms()) {  // (AFMoE's MoE layers too)
      l.post_attn_norm = b.take(name_of(i, "post_attn_norm"), p + "post_attn_norm", 1, c.n_embd);
      l.post_ffn_norm = b.take(name_of(i, "post_ffn_norm"), p + "post_ffn_norm", 1, c.n_embd);
    }
    if (c.moe.is_moe_layer(i)) continue;  // its experts: build_moe_layers
    const int64_t F = c.n_ff_of(i);       // (deci: each layer's own size)
    // (Granite 4.0-H's folders: the shared MLP's input_linear, [gate | up])
    if (c.arch == "phi3" || c.arch == "glm4" || c.arch == "chatglm" ||
        (c.arch == "granitehybrid" && m.format == "safetensors" &&
         !c.hf_bamba)) {  // gate and up fused, gate
                          // first (GGUF: ffn_up)
      b.take_split(name_of(i, "w_gate_up"), p + "w_gate_up", {&l.w_gate, &l.w_up},
                   {"w_gate", "w_up"}, {F, F}, c.n_embd);
    } else {
      if (!c.ffn_relu2 && !c.ffn_gelu && !c.ffn_xielu)  // (Nemotron-H, StarCoder2: up, down)
        l.w_gate = b.take(name_of(i, "w_gate"), p + "w_gate", F, c.n_embd);
      l.w_up = b.take(name_of(i, "w_up"), p + "w_up", F, c.n_embd);
    }
    l.w_down = b.take(name_of(i, "w_down"), p + "w_down", c.n_embd, F);
    if (c.sub_norms)  // (BitNet: the MLP product's norm before w_down)
      l.ffn_sub_norm = b.take(name_of(i, "ffn_sub_norm"), p + "ffn_sub_norm", 1, F);
    if (c.ffn_bias) {
      l.b_up = b.take(name_of(i, "b_up"), p + "b_up", 1, F);
      l.b_down = b.take(name_of(i, "b_down"), p + "b_down", 1, c.n_embd);
    }
  }
}

// The router and experts of every MoE layer (model/moe_loader.cpp).
void build_moe_layers(Model& m, Builder& b, bool gguf) {
  const TensorSource src{[&](const std::string& name) { return b.has(name); },
                         [&](const std::string& name, const std::string& canonical, int64_t rows,
                             int64_t cols) { return b.take(name, canonical, rows, cols); },
                         [&](size_t bytes) { return b.alloc(bytes); },
                         [&](const TensorView& v) { return b.to_f32(v); },
                         [&](const std::string& name, const std::vector<int64_t>& shape) {
                           return b.take_u8(name, shape);
                         },
                         [&](const std::string& name) {
                           auto it = b.raw.find(name);
                           return it == b.raw.end() ? std::vector<int64_t>{} : it->second.shape;
                         }};
  for (int i : m.config.moe.layers)
    build_moe_layer(m.config, i, gguf, src, m.weights.layers[static_cast<size_t>(i)].moe);
}

// Gemma 4's weights (model/gemma4.cpp; weights.h has the shapes), by the file's names: per layer
// `name_of(layer, field)` with ossa's field names, the model's own by `global(field)` ("tok_embd",
// "output_norm", "output", "ple_tok_embd", "ple_model_proj", "ple_proj_norm"). A layer that reads
// another's K/V has no wk / wv / k_norm (a folder's are ignored, as transformers does); wv may be
// absent (k = v); out_scale is optional.
void build_gemma4_weights(Model& m, Builder& b,
                          const std::function<std::string(int, const char*)>& name_of,
                          const std::function<std::string(const char*)>& global) {
  const ModelConfig& c = m.config;
  const int64_t E = c.n_embd, P = c.ple_dim;
  ModelWeights& w = m.weights;
  w.tok_embd = b.take(global("tok_embd"), "tok_embd", c.n_vocab, E);
  w.output_norm = b.take(global("output_norm"), "output_norm", 1, E);
  if (c.tied_embeddings || !b.has(global("output"))) {
    w.output = w.tok_embd;
    b.storage->canonical["output"] = w.output;
  } else {
    w.output = b.take(global("output"), "output", c.n_vocab, E);
  }
  if (P > 0) {  // (the token table may have more rows than the vocabulary, never fewer; Gemma
                // 3n's fewer: tokens past it read row 0)
    const std::string table = global("ple_tok_embd");
    auto it = b.raw.find(table);
    const int64_t rows = it == b.raw.end() ? c.n_vocab
                         : c.altup > 0     ? std::max<int64_t>(it->second.view.rows, 1)
                                           : std::max<int64_t>(it->second.view.rows, c.n_vocab);
    w.ple_tok_embd = b.take(table, "ple_tok_embd", rows, c.n_layer * P);
    w.ple_model_proj = b.take(global("ple_model_proj"), "ple_model_proj", c.n_layer * P, E);
    w.ple_proj_norm = b.take(global("ple_proj_norm"), "ple_proj_norm", 1, P);
  }
  // Gemma 3n's projections into AltUp's streams and back: GGUF's one 3-D stack, or a folder's
  // matrix per stream (name.<i>.weight)
  auto streams = [&](const char* field, std::vector<TensorView>& out) {
    const std::string name = global(field);
    if (b.has(name)) {
      const TensorView all = b.take(name, field, (c.altup - 1) * E, E);
      for (int64_t i = 0; i + 1 < c.altup; ++i) {
        TensorView v = all;
        v.rows = E;
        v.data = all.data + static_cast<size_t>(i * E) * all.row_bytes;
        out.push_back(v);
      }
      return;
    }
    for (int64_t i = 0; i + 1 < c.altup; ++i) {
      const std::string one = name + "." + std::to_string(i) + ".weight";
      out.push_back(b.take(one, std::string(field) + "." + std::to_string(i), E, E));
    }
  };
  if (c.altup > 1) {
    streams("altup_proj", w.altup_proj);
    streams("altup_unembd", w.altup_unembd);
  }
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    const int64_t hd = c.head_dim_of(i), q = c.n_head * hd, kv = c.n_head_kv_of(i) * hd;
    const int64_t F = c.n_ff_of(i);
    auto take = [&](const char* field, int64_t rows, int64_t cols) {
      return b.take(name_of(i, field), p + field, rows, cols);
    };
    l.attn_norm = take("attn_norm", 1, E);
    l.wq = take("wq", q, E);
    l.q_norm = take("q_norm", 1, hd);
    if (c.has_kv(i)) {
      l.wk = take("wk", kv, E);
      l.k_norm = take("k_norm", 1, hd);
      if (b.has(name_of(i, "wv"))) l.wv = take("wv", kv, E);
    }
    l.wo = take("wo", E, q);
    l.post_attn_norm = take("post_attn_norm", 1, E);
    l.ffn_norm = take("ffn_norm", 1, E);
    l.w_gate = take("w_gate", F, E);
    l.w_up = take("w_up", F, E);
    l.w_down = take("w_down", E, F);
    l.post_ffn_norm = take("post_ffn_norm", 1, E);
    if (b.has(name_of(i, "out_scale"))) l.out_scale = take("out_scale", 1, 1);
    if (c.altup > 0) {  // (the small AltUp maps as F32 whatever the file's type)
      const int64_t A = c.altup;
      l.altup_router = b.to_f32(take("altup_router", A, E));
      l.altup_router_norm = take("altup_router_norm", 1, E);
      l.altup_predict = b.to_f32(take("altup_predict", A * A, A));
      l.altup_correct = b.to_f32(take("altup_correct", A, A));
      l.altup_correct_scale = take("altup_correct_scale", 1, E);
      l.laurel_l = take("laurel_l", c.laurel_rank, E);
      l.laurel_r = take("laurel_r", E, c.laurel_rank);
      l.laurel_norm = take("laurel_norm", 1, E);
    }
    if (P > 0) {
      l.ple_gate = take("ple_gate", P, E);
      l.ple_proj = take("ple_proj", E, P);
      l.ple_norm = take("ple_norm", 1, E);
    }
    if (c.moe.is_moe_layer(i)) {  // the experts beside the MLP (weights.h)
      const int64_t n = c.moe.n_expert, Fe = c.moe.n_ff_expert;
      MoeWeights& moe = l.moe;
      l.ffn_norm_2 = take("ffn_norm_2", 1, E);
      l.post_ffn_norm_1 = take("post_ffn_norm_1", 1, E);
      l.post_ffn_norm_2 = take("post_ffn_norm_2", 1, E);
      l.router_scale = take("router_scale", 1, E);
      moe.router = take("router", n, E);
      moe.expert_scale = take("expert_scale", 1, n);
      moe.experts.resize(static_cast<size_t>(n));
      const TensorView down = take("down_exps", n * E, Fe);
      if (b.has(name_of(i, "gate_up_exps"))) {
        view_expert_stacks(take("gate_up_exps", n * 2 * Fe, E), down, n, Fe, E, moe);
      } else {  // (older files: gate and up stacked apart)
        const TensorView g = take("gate_exps", n * Fe, E), u = take("up_exps", n * Fe, E);
        for (int64_t e = 0; e < n; ++e) {
          ExpertWeights& x = moe.experts[static_cast<size_t>(e)];
          x.w_gate = g;
          x.w_gate.rows = Fe;
          x.w_gate.data = g.data + static_cast<size_t>(e * Fe) * g.row_bytes;
          x.w_up = u;
          x.w_up.rows = Fe;
          x.w_up.data = u.data + static_cast<size_t>(e * Fe) * u.row_bytes;
          x.w_down = down;
          x.w_down.rows = E;
          x.w_down.data = down.data + static_cast<size_t>(e * E) * down.row_bytes;
        }
      }
    }
  }
}

// ---- GGUF -----------------------------------------------------------------------------------

std::string gguf_name(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {
      {"attn_norm", "attn_norm.weight"},
      {"wq", "attn_q.weight"},
      {"wk", "attn_k.weight"},
      {"wv", "attn_v.weight"},
      {"wo", "attn_output.weight"},
      {"bq", "attn_q.bias"},
      {"bk", "attn_k.bias"},
      {"bv", "attn_v.bias"},
      {"bo", "attn_output.bias"},
      {"q_norm", "attn_q_norm.weight"},
      {"k_norm", "attn_k_norm.weight"},
      {"ffn_norm", "ffn_norm.weight"},
      {"w_gate", "ffn_gate.weight"},
      {"w_up", "ffn_up.weight"},
      {"w_down", "ffn_down.weight"},
      {"post_attn_norm", "post_attention_norm.weight"},
      {"post_ffn_norm", "post_ffw_norm.weight"},
      {"attn_sub_norm", "attn_sub_norm.weight"},  // (BitNet)
      {"ffn_sub_norm", "ffn_sub_norm.weight"},
      {"wqkv", "attn_qkv.weight"},
      {"w_gate_up", "ffn_up.weight"},
      {"sinks", "attn_sinks.weight"},
      {"wg", "attn_gate.weight"},
      {"wq_a", "attn_q_a.weight"},
      {"q_a_norm", "attn_q_a_norm.weight"},
      {"wq_b", "attn_q_b.weight"},
      {"wkv_a", "attn_kv_a_mqa.weight"},
      {"kv_a_norm", "attn_kv_a_norm.weight"},
      {"wkv_b", "attn_kv_b.weight"},
      {"wk_b", "attn_k_b.weight"},
      {"wv_b", "attn_v_b.weight"},
      {"ssm_qkv", "attn_qkv.weight"},
      {"ssm_qkvz", "ssm_in.weight"},          // (Qwen3-Next's older files: q, k, v, z per key head)
      {"ssm_x", "ssm_x.weight"},              // (Mamba-1: x_proj)
      {"ssm_dt_w", "ssm_dt.weight"},          // (Mamba-1: dt_proj)
      {"ssm_dt_norm", "ssm_dt_norm.weight"},  // (Jamba's norms of dt, B and C)
      {"ssm_b_norm", "ssm_b_norm.weight"},
      {"ssm_c_norm", "ssm_c_norm.weight"},
      {"ssm_ba", "ssm_ba.weight"},  // (Qwen3-Next: beta, alpha per key head)
      {"ssm_z", "attn_gate.weight"},
      {"ssm_beta", "ssm_beta.weight"},
      {"ssm_alpha", "ssm_alpha.weight"},
      {"ssm_conv", "ssm_conv1d.weight"},
      {"ssm_dt", "ssm_dt.bias"},
      {"ssm_a", "ssm_a"},
      {"ssm_norm", "ssm_norm.weight"},
      {"ssm_out", "ssm_out.weight"},
      {"sc_in", "shortconv.in_proj.weight"},
      {"sc_conv", "shortconv.conv.weight"},
      {"sc_out", "shortconv.out_proj.weight"},
      {"ssm_in", "ssm_in.weight"},
      {"ssm_conv_b", "ssm_conv1d.bias"},
      {"ssm_d", "ssm_d"},
      {"attn_norm_b", "attn_norm.bias"},  // (StarCoder2)
      {"ffn_norm_b", "ffn_norm.bias"},
      {"b_up", "ffn_up.bias"},
      {"b_down", "ffn_down.bias"}};
  return "blk." + std::to_string(layer) + "." + k_names.at(field);
}

// Nemotron-H files name every block's one norm attn_norm (a feed-forward block's too).
std::string gguf_name_nemotronh(int layer, const char* field) {
  return gguf_name(layer, std::string(field) == "ffn_norm" ? "attn_norm" : field);
}

// gpt-oss and Qwen3.5 files name the norm before the feed-forward post_attention_norm (the
// feed-forward's input, as HF's post_attention_layernorm is), not ffn_norm.
std::string gguf_name_gpt_oss(int layer, const char* field) {
  return std::string(field) == "ffn_norm"
             ? "blk." + std::to_string(layer) + ".post_attention_norm.weight"
             : gguf_name(layer, field);
}

// llama.cpp's rope_freqs tensor, which its converters write for Llama-3 RoPE scaling (Llama 3.1 /
// 3.2 / 3.3, Llama 4, EXAONE 3.5, Nemotron, ...) in place of any key: a divisor per rotated pair,
// applied to the frequencies as llama.cpp does (the scaling keys ossa's own older files carried are
// then ignored: one or the other, never both).
void rope_freqs_gguf(ModelConfig& c, Builder& b, const std::string& path) {
  if (!b.has("rope_freqs.weight")) return;
  const int64_t half = (c.rope_dim > 0 ? c.rope_dim : c.head_dim) / 2;
  const TensorView v = b.take("rope_freqs.weight", "rope_freqs", 1, half);
  c.rope_freqs.resize(static_cast<size_t>(half));
  dequantize_row(v, 0, c.rope_freqs.data());
  for (float f : c.rope_freqs)
    if (!(f > 0.0f) || !std::isfinite(f))
      throw ModelError("invalid rope_freqs value in '" + path + "'");
  if (c.rope_scaling.type == "llama3") c.rope_scaling = RopeScaling{};
}

// Gemma 4 from GGUF (llama.cpp's converter's names and keys), after the shared ones: its own
// config (gemma4_config_gguf) and weights.
void load_gemma4_gguf(Model& m, Builder& b, const GGUFFile& g) {
  ModelConfig& c = m.config;
  std::vector<float> rope_freqs;
  if (auto it = b.raw.find("rope_freqs.weight"); it != b.raw.end()) {
    const TensorView v = b.take("rope_freqs.weight", "rope_freqs", 1, it->second.view.cols);
    const float* f = reinterpret_cast<const float*>(v.data);
    rope_freqs.assign(f, f + v.cols);
    m.weights.rope_freqs = v;
  }
  // (the experts' layers: those with a router)
  const std::string k = c.arch + ".";
  for (int l = 0; l < static_cast<int>(g.get_int(k + "block_count", 0)) && l < 4096; ++l)
    if (b.has("blk." + std::to_string(l) + ".ffn_gate_inp.weight")) c.moe.layers.push_back(l);
  if (!c.moe.layers.empty()) {
    auto count = [&](const char* key) {
      return static_cast<int>(std::clamp<int64_t>(g.get_int(key, 0), -1, int64_t{1} << 30));
    };
    c.moe.n_expert = count((k + "expert_count").c_str());
    c.moe.n_expert_used = count((k + "expert_used_count").c_str());
    c.moe.n_ff_expert = count((k + "expert_feed_forward_length").c_str());
  }
  gemma4_config_gguf(g, c, rope_freqs, m.path);
  if (c.altup > 0) {  // (Gemma 3n: LAuReL's rank from its first matrix)
    auto it = b.raw.find("blk.0.laurel_l.weight");
    if (it == b.raw.end())
      throw ModelError("missing tensor 'blk.0.laurel_l.weight' in '" + m.path + "'");
    c.laurel_rank = static_cast<int>(std::clamp<int64_t>(it->second.view.rows, 0, 1 << 20));
    if (c.laurel_rank < 1) throw ModelError("invalid LAuReL rank in '" + m.path + "'");
  }
  if (!rope_freqs.empty() && rope_freqs.size() != static_cast<size_t>(c.max_head_dim() / 2))
    throw ModelError("rope_freqs of '" + m.path + "' must hold the global head size / 2 values");
  c.n_vocab = checked_dim(c.n_vocab, "vocab_size", m.path);
  c.tied_embeddings = !b.has("output.weight");
  validate_config(c, m.path);
  static const std::map<std::string, std::string> k_fields = {
      {"out_scale", "layer_output_scale.weight"},
      {"ple_gate", "inp_gate.weight"},
      {"ple_proj", "proj.weight"},
      {"ple_norm", "post_norm.weight"},
      {"ffn_norm_2", "pre_ffw_norm_2.weight"},
      {"post_ffn_norm_1", "post_ffw_norm_1.weight"},
      {"post_ffn_norm_2", "post_ffw_norm_2.weight"},
      {"router", "ffn_gate_inp.weight"},
      {"router_scale", "ffn_gate_inp.scale"},
      {"expert_scale", "ffn_down_exps.scale"},
      {"gate_up_exps", "ffn_gate_up_exps.weight"},
      {"gate_exps", "ffn_gate_exps.weight"},
      {"up_exps", "ffn_up_exps.weight"},
      {"down_exps", "ffn_down_exps.weight"},
      {"altup_router", "altup_router.weight"},
      {"altup_router_norm", "altup_router_norm.weight"},
      {"altup_predict", "altup_predict_coef.weight"},
      {"altup_correct", "altup_correct_coef.weight"},
      {"altup_correct_scale", "altup_correct_scale.weight"},
      {"laurel_l", "laurel_l.weight"},
      {"laurel_r", "laurel_r.weight"},
      {"laurel_norm", "laurel_post_norm.weight"}};
  const auto name_of = [](int layer, const char* field) {
    auto it = k_fields.find(field);
    return it == k_fields.end() ? gguf_name(layer, field)
                                : "blk." + std::to_string(layer) + "." + it->second;
  };
  static const std::map<std::string, std::string> k_globals = {
      {"tok_embd", "token_embd.weight"},
      {"output_norm", "output_norm.weight"},
      {"output", "output.weight"},
      {"ple_tok_embd", "per_layer_token_embd.weight"},
      {"ple_model_proj", "per_layer_model_proj.weight"},
      {"ple_proj_norm", "per_layer_proj_norm.weight"},
      {"altup_proj", "altup_proj.weight"},
      {"altup_unembd", "altup_unembd_proj.weight"}};
  build_gemma4_weights(m, b, name_of, [](const char* field) { return k_globals.at(field); });
}

void load_gguf(Model& m, Storage& st) {
  const GGUFModelFiles files = open_gguf_model(m.path);  // every shard of a split model
  const GGUFFile* g = &files.metadata();
  Builder b{m.path, {}, &st};
  for (const std::shared_ptr<GGUFFile>& shard : files.shards) {
    st.gguf.push_back(shard);
    for (const GGUFTensorInfo& info : shard->tensors()) {
      Raw r;
      r.type_name = ggml_type_name(info.ggml_type);
      r.supported = dtype_supported(info.ggml_type);
      r.n_dims = info.ne.size();
      NamedTensor nt{info.name, r.type_name, 1, info.ne[0], 0, {}};
      for (size_t d = 1; d < info.ne.size(); ++d) nt.rows *= info.ne[d];
      if (r.supported) {
        r.view = shard->view(info);
        nt.view = r.view;
        nt.nbytes = r.view.nbytes();
      }
      m.tensors.push_back(nt);
      b.raw.emplace(info.name, r);
    }
  }

  ModelConfig& c = m.config;
  const std::string arch = g->get_string("general.architecture");
  if (arch.empty()) throw ModelError("GGUF file '" + m.path + "' has no general.architecture");
  if (std::find(k_gguf_archs.begin(), k_gguf_archs.end(), arch) == k_gguf_archs.end())
    throw ModelError("unknown architecture '" + arch + "' in '" + m.path + "' " + k_supported);
  c.arch = arch;
  const std::string k = arch + ".";
  c.n_embd = checked_dim(g->get_int(k + "embedding_length", 0), "embedding_length", m.path);
  c.n_layer = checked_dim(g->get_int(k + "block_count", 0), "block_count", m.path, 4096);
  if (arch == "gemma4" || arch == "gemma3n") {  // (per-layer head sizes, KV heads, FFN sizes)
    c.n_head = checked_dim(g->get_int(k + "attention.head_count", 0), "attention.head_count",
                           m.path, 65536);
    const GGUFTensorInfo* embd = files.find_tensor("token_embd.weight").second;
    c.n_vocab = static_cast<int>(std::clamp<int64_t>(
        g->get_int(k + "vocab_size", embd != nullptr && embd->ne.size() >= 2 ? embd->ne[1] : 0), 0,
        int64_t{1} << 31));
    c.n_ctx_train = static_cast<int>(
        std::min<int64_t>(g->get_int(k + "context_length", 4096), int64_t{1} << 30));
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_rms_epsilon", 1e-6));
    c.rope_theta = static_cast<float>(g->get_float(k + "rope.freq_base", 10000.0));
    return load_gemma4_gguf(m, b, *g);
  }
  // (Mamba-2 alone has no attention: its head count 0; the mixer's heads stand in, unused; Mamba-1
  // one head of d_inner)
  const bool mamba2 = arch == "mamba2", mamba1 = arch == "mamba";
  // (deci: one query head count per layer, 0 for a layer without attention)
  const GGUFValue* heads_value = g->find(k + "attention.head_count");
  const std::vector<int64_t> heads_per_layer =
      arch == "deci" && heads_value != nullptr &&
              std::holds_alternative<std::shared_ptr<GGUFArray>>(heads_value->value)
          ? g->get_int_array(k + "attention.head_count")
          : std::vector<int64_t>{};
  int64_t heads = heads_per_layer.empty()
                      ? g->get_int(k + (mamba2 ? "ssm.time_step_rank" : "attention.head_count"), 0)
                      : 0;
  for (int64_t v : heads_per_layer) heads = std::max(heads, v);
  c.n_head = mamba1 ? 1 : checked_dim(heads, "attention.head_count", m.path, 65536);
  // (LFM2: one count per layer, 0 for its convolution layers)
  const GGUFValue* kv_value = g->find(k + "attention.head_count_kv");
  const bool kv_array =
      kv_value != nullptr && std::holds_alternative<std::shared_ptr<GGUFArray>>(kv_value->value);
  const std::vector<int64_t> kv_per_layer =
      kv_array ? g->get_int_array(k + "attention.head_count_kv") : std::vector<int64_t>{};
  int64_t kv_heads = kv_array ? 0 : g->get_int(k + "attention.head_count_kv", c.n_head);
  for (int64_t v : kv_per_layer) kv_heads = std::max(kv_heads, v);
  const bool nemotron = arch == "nemotron_h" || arch == "nemotron_h_moe";
  if (kv_array && arch != "lfm2" && arch != "lfm2moe" && arch != "granitehybrid" && !nemotron &&
      arch != "jamba" && arch != "deci")
    throw ModelError("per-layer attention.head_count_kv in '" + m.path + "' is not supported");
  c.n_head_kv = checked_dim(kv_heads, "attention.head_count_kv", m.path, 65536);
  // (a Qwen3.5 MoE file may have no dense size: its experts'; Nemotron-H: one per layer, 0 where a
  // block has no feed-forward)
  const GGUFValue* ff_value = g->find(k + "feed_forward_length");
  const std::vector<int64_t> ff_per_layer =
      ff_value != nullptr && std::holds_alternative<std::shared_ptr<GGUFArray>>(ff_value->value)
          ? g->get_int_array(k + "feed_forward_length")
          : std::vector<int64_t>{};
  if (!ff_per_layer.empty() && !nemotron && arch != "deci")
    throw ModelError("per-layer feed_forward_length in '" + m.path + "' is not supported");
  int64_t ff = ff_per_layer.empty() ? g->get_int(k + "feed_forward_length",
                                                 g->get_int(k + "expert_feed_forward_length", 0))
                                    : 0;
  if (mamba2 || mamba1)
    ff = g->get_int(k + "ssm.inner_size", 0);  // (feed_forward_length 0, unused)
  for (int64_t v : ff_per_layer) ff = std::max(ff, v);
  // (a Nemotron-H file without feed-forward blocks: the size is unused; the hidden size stands in)
  if ((nemotron || arch == "deci") && !ff_per_layer.empty() && ff == 0) ff = c.n_embd;
  c.n_ff = checked_dim(ff, "feed_forward_length", m.path);
  const int64_t default_head_dim = mamba2 || mamba1           ? c.n_ff / c.n_head
                                   : c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head
                                                              : 0;
  c.head_dim = checked_dim(g->get_int(k + "attention.key_length", default_head_dim),
                           "head dimension", m.path, 65536);
  // (their sizes: deepseek2_config_gguf, minicpm3_config_gguf)
  const bool mla = arch == "deepseek2" || arch == "minicpm3";
  if (!mla && g->get_int(k + "attention.value_length", c.head_dim) != c.head_dim)
    throw ModelError("attention.value_length differs from key_length in '" + m.path +
                     "' (not supported)");
  const bool qwen35 = arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next";
  if (arch != "phi3" && arch != "phimoe" && arch != "glm4moe" && arch != "bailingmoe2" &&
      arch != "glm4" && arch != "chatglm" && arch != "minimax-m2" && !mla && arch != "stablelm" &&
      arch != "phi2" && arch != "nemotron" && arch != "gptneox" && arch != "gptj" && !qwen35 &&
      g->get_int(k + "rope.dimension_count", c.head_dim) != c.head_dim)
    throw ModelError("partial RoPE (rope.dimension_count != head dimension) in '" + m.path +
                     "' is not supported");
  const GGUFTensorInfo* embd = files.find_tensor("token_embd.weight").second;
  const int64_t embd_rows = embd != nullptr && embd->ne.size() >= 2 ? embd->ne[1] : 0;
  c.n_vocab = checked_dim(g->get_int(k + "vocab_size", embd_rows), "vocab_size", m.path);
  c.n_ctx_train =
      static_cast<int>(std::min<int64_t>(g->get_int(k + "context_length", 4096), int64_t{1} << 30));
  // (Nemotron-H's converter writes its RMSNorm's epsilon under the plain layer-norm key)
  c.rms_eps = static_cast<float>(
      g->get_float(k + "attention.layer_norm_rms_epsilon",
                   nemotron ? g->get_float(k + "attention.layer_norm_epsilon", 1e-5) : 1e-5));
  c.rope_theta = static_cast<float>(g->get_float(k + "rope.freq_base", 10000.0));
  std::string scaling = g->get_string(k + "rope.scaling.type", "none");
  if (g->find(k + "rope.scale_linear") != nullptr && scaling == "none") {
    scaling = "linear";
    c.rope_scaling.factor = static_cast<float>(g->get_float(k + "rope.scale_linear", 1.0));
  }
  if (scaling == "linear" || scaling == "llama3") {
    c.rope_scaling.type = scaling;
    c.rope_scaling.factor =
        static_cast<float>(g->get_float(k + "rope.scaling.factor", c.rope_scaling.factor));
    c.rope_scaling.low_freq_factor =
        static_cast<float>(g->get_float(k + "rope.scaling.low_freq_factor", 1.0));
    c.rope_scaling.high_freq_factor =
        static_cast<float>(g->get_float(k + "rope.scaling.high_freq_factor", 4.0));
    c.rope_scaling.original_max_position = static_cast<int>(std::clamp<int64_t>(
        g->get_int(k + "rope.scaling.original_context_length", 8192), 1, int64_t{1} << 30));
  } else if (scaling == "yarn") {
    // What llama.cpp's converters write for YaRN (Qwen's documented long-context setting);
    // llama.cpp multiplies cos/sin by attn_factor (default 1) times YaRN's 1 + 0.1 ln(factor).
    RopeScaling& r = c.rope_scaling;
    r.type = "yarn";
    r.factor = static_cast<float>(g->get_float(k + "rope.scaling.factor", 1.0));
    r.original_max_position = static_cast<int>(
        std::clamp<int64_t>(g->get_int(k + "rope.scaling.original_context_length", c.n_ctx_train),
                            1, int64_t{1} << 30));
    r.beta_fast = static_cast<float>(g->get_float(k + "rope.scaling.yarn_beta_fast", 32.0));
    r.beta_slow = static_cast<float>(g->get_float(k + "rope.scaling.yarn_beta_slow", 1.0));
    const double mscale =
        r.factor > 1.0f ? 1.0 + 0.1 * std::log(static_cast<double>(r.factor)) : 1.0;
    r.attn_factor = static_cast<float>(g->get_float(k + "rope.scaling.attn_factor", 1.0) * mscale);
    // (llama.cpp's newer converters write the config's attention_factor itself, the cos / sin
    // factor transformers applies, as yarn_attn_factor)
    const double yarn_attn = g->get_float(k + "rope.scaling.yarn_attn_factor", 0.0);
    if (yarn_attn != 0.0) {
      if (!(yarn_attn > 0.0) || !std::isfinite(yarn_attn))
        throw ModelError("invalid " + k + "rope.scaling.yarn_attn_factor in '" + m.path + "'");
      r.attn_factor = static_cast<float>(yarn_attn);
    }
  } else if (scaling != "none" &&
             !(scaling == "longrope" && (arch == "phi3" || arch == "phimoe" || arch == "minicpm3" ||
                                         arch == "minicpm"))) {  // (LongRoPE: the factor tensors)
    throw ModelError("unsupported rope scaling type '" + scaling + "' in '" + m.path + "'");
  }
  // (llama.cpp's converter permutes q/k rows of these for its interleaved RoPE; SmolLM3's too.)
  // (ERNIE 4.5 rotates interleaved pairs itself: its rows are as in its folder.)
  c.rope_style =
      (arch == "llama" || arch == "mistral" || arch == "mistral3" || arch == "smollm3" ||
       arch == "granite" || arch == "granitemoe" || arch == "granitehybrid" || arch == "ernie4_5" ||
       arch == "ernie4_5-moe" || arch == "arcee" || arch == "olmo" || arch == "gptj" ||
       arch == "minicpm" || arch == "internlm2" || arch == "deepseek" || arch == "deci")
          ? RopeStyle::Interleaved
          : RopeStyle::Neox;
  c.qkv_bias = arch == "qwen2" || b.has("blk.0.attn_q.bias");
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe" || arch == "qwen3vl" || arch == "qwen3vlmoe" ||
              arch == "olmo2" || arch == "exaone4" || arch == "olmoe" || arch == "dots1" ||
              arch == "apertus" || arch == "exaone-moe" || arch == "afmoe";
  c.clamp_qkv = static_cast<float>(g->get_float(k + "attention.clamp_kqv", 0.0));
  c.tied_embeddings = !b.has("output.weight");
  if (c.gemma()) gemma3_config_gguf(*g, c);  // norms stored as 1 + w by llama.cpp's converter
  if (!c.gemma() && arch != "phi3" && arch != "phimoe" && arch != "exaone-moe")
    window_config_gguf(*g, c);  // (EXAONE MoE's: after its MTP layers are left out)
  if (arch == "olmo2") olmo_window_gguf(*g, c);  // (OLMo 3 conversions: every 4th layer full)
  if (arch == "exaone4") exaone4_config_gguf(*g, c);
  if (arch == "exaone-moe") exaone_moe_config_gguf(*g, c);  // (window, NoPE, MTP layers skipped)
  if (arch == "afmoe") afmoe_config_gguf(*g, c);  // (window, global layers NoPE, gate, scale)
  if (arch == "gpt-oss") gpt_oss_config_gguf(*g, c, b.has("blk.0.attn_output.bias"));
  if (arch == "seed_oss" || arch == "internlm2" || arch == "deepseek")
    c.o_bias = b.has("blk.0.attn_output.bias");
  if (arch == "arcee") c.ffn_relu2 = true;  // (AFM: down(relu(up x)^2), no gate)
  // (partial NeoX RoPE, GPT-J's on interleaved pairs: the file's rotated dimensions)
  if (arch == "phi2" || arch == "stablelm" || arch == "nemotron" || arch == "gptneox" ||
      arch == "gptj")
    c.rope_dim = rotated_dims(g->get_int(k + "rope.dimension_count", c.head_dim), c,
                              k + "rope.dimension_count in '" + m.path + "'");
  if (arch == "phi2") {  // (Cohere's parallel block, LayerNorm with bias, GELU MLP, biases)
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.ffn_bias = c.parallel_block = true;
    c.o_bias = true;
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "stablelm") {  // (LayerNorm with bias, partial RoPE; parallel where no ffn_norm)
    c.layer_norm = c.norm_bias = true;
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
    c.parallel_block = !b.has("blk.0.ffn_norm.weight");
    c.qk_norm = c.qk_norm_heads = b.has("blk.0.attn_q_norm.weight");
  }
  if (arch == "nemotron") {  // (LayerNorm with bias stored 1 + w, relu^2 MLP, partial NeoX RoPE)
    c.layer_norm = c.norm_bias = c.ffn_relu2 = true;
    c.o_bias = b.has("blk.0.attn_output.bias");
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "jais2") {  // (LayerNorms with bias, relu^2 MLP with biases, NeoX RoPE)
    c.layer_norm = c.norm_bias = c.ffn_relu2 = true;
    c.ffn_bias = b.has("blk.0.ffn_up.bias");
    c.o_bias = b.has("blk.0.attn_output.bias");
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "gptneox") {  // (LayerNorms with bias, fused q / k / v, exact-GELU MLP, biases)
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.gelu_erf = true;
    c.ffn_bias = b.has("blk.0.ffn_up.bias");
    c.qkv_bias = b.has("blk.0.attn_qkv.bias");
    c.o_bias = b.has("blk.0.attn_output.bias");
    // (the parallel residual by default, the MLP with its own norm: x + attn(ln1 x) + mlp(ln2 x))
    c.parallel_block = c.parallel_norms = g->get_bool(k + "use_parallel_residual", true);
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "falcon") {  // (LayerNorms with bias, fused q / k / v, exact-GELU MLP; parallel)
    // (llama.cpp's files: always the parallel block, 40B's second norm as attn_norm_2)
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.gelu_erf = c.parallel_block = true;
    c.parallel_norms = b.has("blk.0.attn_norm_2.weight");
    c.ffn_bias = b.has("blk.0.ffn_up.bias");
    c.qkv_bias = b.has("blk.0.attn_qkv.bias");
    c.o_bias = b.has("blk.0.attn_output.bias");
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "gptj") {  // (Phi-2's parallel block; RoPE on interleaved pairs of rotary_dim)
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.ffn_bias = c.parallel_block = true;
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "dbrx") {  // (LayerNorms without bias, fused q / k / v, clamp_kqv read above)
    c.layer_norm = true;
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "bloom" || arch == "mpt" || arch == "gpt2" || arch == "starcoder")
    gpt_classic_config_gguf(*g, c, [&b](const std::string& name) { return b.has(name); }, m.path);
  if (arch == "apertus") {  // (xIELU MLPs: the parameters per layer under llama.cpp's keys)
    c.ffn_xielu = true;
    const auto per_layer = [&](const char* key) {
      const GGUFValue* v = g->find(key);
      if (v == nullptr)
        throw ModelError("missing key '" + std::string(key) + "' in '" + m.path + "'");
      std::vector<double> out;
      if (std::holds_alternative<std::shared_ptr<GGUFArray>>(v->value)) {
        out = g->get_float_array(key);
      } else {
        out.assign(static_cast<size_t>(c.n_layer), g->get_float(key, 0.0));
      }
      if (out.size() != static_cast<size_t>(c.n_layer))
        throw ModelError("key '" + std::string(key) + "' in '" + m.path + "' must hold " +
                         std::to_string(c.n_layer) + " values");
      return out;
    };
    set_xielu(c, per_layer("xielu.alpha_p"), per_layer("xielu.alpha_n"), per_layer("xielu.beta"),
              per_layer("xielu.eps"), m.path);
  }
  if (arch == "olmo") {  // (weightless LayerNorms: ones; clamp_kqv read above)
    c.layer_norm = true;
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "starcoder2") {  // (LayerNorm with bias, GELU MLP; biases where the file has them)
    c.layer_norm = c.norm_bias = c.ffn_gelu = true;
    c.ffn_bias = b.has("blk.0.ffn_up.bias");
    c.o_bias = b.has("blk.0.attn_output.bias");
    c.rms_eps = static_cast<float>(g->get_float(k + "attention.layer_norm_epsilon", 1e-5));
  }
  if (arch == "hunyuan-dense" ||
      arch == "hunyuan-moe") {  // (q / k norms after RoPE; NTK-alpha base)
    c.qk_norm = true;
    c.qk_norm_after_rope = true;
  }
  if (arch == "smollm3") smollm3_config_gguf(c);
  if (arch == "granite" || arch == "granitemoe") granite_config_gguf(*g, c);
  if (arch == "deepseek2") deepseek2_config_gguf(*g, c, m.path);
  if (arch == "glm4" || arch == "chatglm")  // partial RoPE on interleaved pairs
    glm4_config_gguf(*g, c);
  if (arch == "chatglm")  // (ChatGLM3 / GLM-4-9B: q / k / v fused or not, biases either way)
    c.qkv_bias = b.has("blk.0.attn_q.bias") || b.has("blk.0.attn_qkv.bias");
  // Llama 4's attention temperature, where llama.cpp reads it (Ministral 3, Mistral Large 3)
  if (arch == "mistral3" || arch == "deepseek2") temperature_config_gguf(*g, c, m.path);
  if (arch == "mistral3") mistral3_config_gguf(*g, c, m.path);  // YaRN's cos/sin factor, scale
  if (arch == "llama4") llama4_config_gguf(*g, c, m.path);      // NoPE layers, chunks, temperature
  if (arch == "command-r" || arch == "cohere2")  // LayerNorm, parallel blocks, logit scale
    cohere_config_gguf(*g, c, b.has("blk.0.attn_q_norm.weight"), m.path);
  if (arch == "minimax-m2") minimax_config_gguf(*g, c, m.path);  // q / k norms, partial RoPE
  // (Ling 2.0, bailingmoe2: GLM-4.5's layers with q / k / v fused, as llama.cpp keeps them)
  if (arch == "glm4moe" ||
      arch == "bailingmoe2") {  // partial RoPE, MTP blocks left out, q / k norms
    glm4moe_config_gguf(*g, c, m.path);
    c.qk_norm = b.has("blk.0.attn_q_norm.weight");
  }
  if (qwen35) qwen35_config_gguf(*g, c, m.path);                // delta-net layers, gated attention
  if (c.lfm2()) lfm2_config_gguf(*g, c, kv_per_layer, m.path);  // short convolutions
  if (nemotron) nemotronh_config_gguf(*g, c, kv_per_layer, ff_per_layer, m.path);
  if (mamba2) mamba2_config_gguf(*g, c, m.path);
  if (arch == "falcon-h1") falconh1_config_gguf(*g, c, m.path);
  if (mamba1) mamba1_config_gguf(*g, c, m.path);
  if (arch == "jamba") jamba_config_gguf(*g, c, kv_per_layer, m.path);
  if (c.mamba1.active()) {  // (the convolution's bias where the first Mamba-1 layer has it)
    int first = 0;
    while (first < c.n_layer && !c.mamba1.is_layer(first)) ++first;
    c.mamba1.conv_bias = b.has("blk." + std::to_string(first) + ".ssm_conv1d.bias");
  }
  if (arch == "granitehybrid" || nemotron || mamba2 ||
      arch == "falcon-h1") {  // Mamba-2 layers; biases where present
    if (arch == "granitehybrid") granitehybrid_config_gguf(*g, c, kv_per_layer, m.path);
    int first_attn = -1, first_ssm = -1;
    for (int i = c.n_layer - 1; i >= 0; --i)
      if (c.ssm.is_layer(i))
        first_ssm = i;
      else if (c.has_kv(i))
        first_attn = i;
    const std::string blk_a = "blk." + std::to_string(first_attn) + ".",
                      blk_s = "blk." + std::to_string(first_ssm) + ".";
    c.qkv_bias = first_attn >= 0 && b.has(blk_a + "attn_q.bias");
    c.ssm.conv_bias = first_ssm >= 0 && b.has(blk_s + "ssm_conv1d.bias");
    if (arch == "falcon-h1")  // (its mixers' gated norm is optional: mamba_rms_norm)
      c.ssm.gated_norm = first_ssm >= 0 && b.has(blk_s + "ssm_norm.weight");
    // (a dense Granite 4.0-H's feed-forward: the shared MLP's size where the file gives one)
    if (arch == "granitehybrid" && g->get_int(k + "expert_count", 0) == 0)
      c.n_ff = checked_dim(g->get_int(k + "expert_shared_feed_forward_length", c.n_ff),
                           "expert_shared_feed_forward_length", m.path);
  }
  if (arch == "phimoe") {  // (Phi-3's attention with LayerNorms and biases; experts below)
    c.layer_norm = c.norm_bias = true;
    c.o_bias = b.has("blk.0.attn_output.bias");
  }
  if (arch == "phi3" || arch == "phimoe" || arch == "minicpm3" || arch == "minicpm") {
    const int64_t half = g->get_int(k + "rope.dimension_count", c.head_dim) / 2;
    auto factors = [&](const char* name) {
      std::vector<float> out;
      if (!b.has(name)) return out;
      const TensorView v = b.take(name, name, 1, half);
      const float* f = reinterpret_cast<const float*>(v.data);
      out.assign(f, f + half);
      return out;
    };
    if (arch == "minicpm3")  // (MLA, its multipliers, LongRoPE)
      minicpm3_config_gguf(*g, c, factors("rope_factors_long.weight"),
                           factors("rope_factors_short.weight"), m.path);
    else if (arch == "minicpm")  // (Granite's multipliers, LongRoPE)
      minicpm_config_gguf(*g, c, factors("rope_factors_long.weight"),
                          factors("rope_factors_short.weight"), m.path);
    else
      phi3_config_gguf(*g, c, factors("rope_factors_long.weight"),
                       factors("rope_factors_short.weight"));
  }
  if (arch == "deci") {  // (per-layer shapes; a scalar key: that value in every layer)
    const auto per_layer = [&](const std::vector<int64_t>& v, int64_t all) {
      return v.empty() ? std::vector<int64_t>(static_cast<size_t>(c.n_layer), all) : v;
    };
    deci_layers(c, per_layer(heads_per_layer, c.n_head), per_layer(kv_per_layer, c.n_head_kv),
                per_layer(ff_per_layer, c.n_ff), "'" + m.path + "'");
  }
  rope_freqs_gguf(c, b, m.path);
  validate_config(c, m.path);
  read_moe_config_gguf(c, *g, [&](const std::string& name) { return b.has(name); }, m.path);
  // (LFM2's final norm is named token_embd_norm: transformers' embedding_norm, applied last)
  // (llama.cpp's Falcon-H1 files name the feed-forward's norm blk.{i}.ffn_norm, without .weight)
  const auto falconh1_name = [&b](int layer, const char* field) {
    const std::string bare = "blk." + std::to_string(layer) + ".ffn_norm";
    return std::string(field) == "ffn_norm" && b.has(bare) ? bare : gguf_name(layer, field);
  };
  // (Falcon 40B's files, as llama.cpp's converter maps them: ln_attn as attn_norm_2, ln_mlp as
  // attn_norm)
  const auto falcon_name = [two = c.parallel_norms](int layer, const char* field) {
    const std::string f = field, p = "blk." + std::to_string(layer) + ".";
    if (!two) return gguf_name(layer, field);
    return f == "attn_norm"     ? p + "attn_norm_2.weight"
           : f == "attn_norm_b" ? p + "attn_norm_2.bias"
           : f == "ffn_norm"    ? p + "attn_norm.weight"
           : f == "ffn_norm_b"  ? p + "attn_norm.bias"
                                : gguf_name(layer, field);
  };
  // (DBRX's files, as llama.cpp's converter names them: the pre-FFN norm attn_output_norm)
  const auto dbrx_name = [](int layer, const char* field) {
    return std::string(field) == "ffn_norm"
               ? "blk." + std::to_string(layer) + ".attn_output_norm.weight"
               : gguf_name(layer, field);
  };
  using NameOf = std::function<std::string(int, const char*)>;
  // (Seed-OSS files too: the pre-FFN norm as post_attention_norm)
  const NameOf name_of = arch == "gpt-oss" || qwen35 || arch == "seed_oss"
                             ? NameOf(gguf_name_gpt_oss)
                         : nemotron            ? NameOf(gguf_name_nemotronh)
                         : arch == "falcon-h1" ? NameOf(falconh1_name)
                         : arch == "falcon"    ? NameOf(falcon_name)
                         : arch == "dbrx"      ? NameOf(dbrx_name)
                                               : NameOf(gguf_name);
  if (arch == "olmo") b.add_unit_norms(name_of, c.n_layer, "output_norm.weight", c.n_embd);
  build_weights(m, b, name_of, "token_embd.weight",
                c.lfm2() ? "token_embd_norm.weight" : "output_norm.weight", "output.weight");
  build_moe_layers(m, b, true);
  if (b.has("rope_freqs.weight"))
    m.weights.rope_freqs = b.take("rope_freqs.weight", "rope_freqs", 1, c.head_dim / 2);
}

// ---- Hugging Face folder -----------------------------------------------------------------------

std::string read_text(const fs::path& p, uint64_t max_bytes) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) throw ModelError("cannot read '" + p.string() + "': " + ec.message());
  if (size > max_bytes) throw ModelError("'" + p.string() + "' is implausibly large");
  std::ifstream in(p, std::ios::binary);
  std::string s(static_cast<size_t>(size), '\0');
  if (!in.read(s.data(), static_cast<std::streamsize>(size)))
    throw ModelError("cannot read '" + p.string() + "'");
  return s;
}

std::string hf_name(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {
      {"attn_norm", "input_layernorm.weight"},
      {"wq", "self_attn.q_proj.weight"},
      {"wk", "self_attn.k_proj.weight"},
      {"wv", "self_attn.v_proj.weight"},
      {"wo", "self_attn.o_proj.weight"},
      {"bq", "self_attn.q_proj.bias"},
      {"bk", "self_attn.k_proj.bias"},
      {"bv", "self_attn.v_proj.bias"},
      {"bo", "self_attn.o_proj.bias"},
      {"q_norm", "self_attn.q_norm.weight"},
      {"k_norm", "self_attn.k_norm.weight"},
      {"ffn_norm", "post_attention_layernorm.weight"},
      {"attn_norm_b", "input_layernorm.bias"},  // (StarCoder2: LayerNorm with bias, MLP biases)
      {"ffn_norm_b", "post_attention_layernorm.bias"},
      {"b_up", "mlp.up_proj.bias"},
      {"b_down", "mlp.down_proj.bias"},
      {"w_gate", "mlp.gate_proj.weight"},
      {"w_up", "mlp.up_proj.weight"},
      {"w_down", "mlp.down_proj.weight"},
      {"wqkv", "self_attn.qkv_proj.weight"},
      {"w_gate_up", "mlp.gate_up_proj.weight"},
      {"sinks", "self_attn.sinks"},
      {"wg", "self_attn.gate_proj.weight"},
      {"wq_a", "self_attn.q_a_proj.weight"},
      {"q_a_norm", "self_attn.q_a_layernorm.weight"},
      {"wq_b", "self_attn.q_b_proj.weight"},
      {"wkv_a", "self_attn.kv_a_proj_with_mqa.weight"},
      {"kv_a_norm", "self_attn.kv_a_layernorm.weight"},
      {"wkv_b", "self_attn.kv_b_proj.weight"},
      {"wk_b", "self_attn.k_b_proj.weight"},
      {"wv_b", "self_attn.v_b_proj.weight"},
      {"ssm_qkv", "linear_attn.in_proj_qkv.weight"},
      {"ssm_qkvz", "linear_attn.in_proj_qkvz.weight"},
      {"ssm_ba", "linear_attn.in_proj_ba.weight"},
      {"ssm_z", "linear_attn.in_proj_z.weight"},
      {"ssm_beta", "linear_attn.in_proj_b.weight"},
      {"ssm_alpha", "linear_attn.in_proj_a.weight"},
      {"ssm_conv", "linear_attn.conv1d.weight"},
      {"ssm_dt", "linear_attn.dt_bias"},
      {"ssm_a", "linear_attn.A_log"},
      {"ssm_norm", "linear_attn.norm.weight"},
      {"ssm_out", "linear_attn.out_proj.weight"},
      {"sc_in", "conv.in_proj.weight"},
      {"sc_conv", "conv.conv.weight"},
      {"sc_out", "conv.out_proj.weight"},
      {"attn_sub_norm", "self_attn.attn_sub_norm.weight"},  // (BitNet)
      {"ffn_sub_norm", "mlp.ffn_sub_norm.weight"}};
  return "model.layers." + std::to_string(layer) + "." + k_names.at(field);
}

// OLMo 2 / 3's and EXAONE 4's folders name the sublayers' output norms (HF's
// post_attention_layernorm is the norm of the attention's output here, not the feed-forward's
// input as in Llama).
std::string hf_name_post_norms(int layer, const char* field) {
  const std::string f = field;
  if (f == "post_attn_norm" || f == "post_ffn_norm")
    return "model.layers." + std::to_string(layer) +
           (f == "post_attn_norm" ? ".post_attention_layernorm.weight"
                                  : ".post_feedforward_layernorm.weight");
  return hf_name(layer, field);
}

// LFM2's folders: operator_norm / ffn_norm, the attention's out_proj and q / k layernorms, and
// feed_forward.w1 / w3 / w2 for gate / up / down.
std::string hf_name_lfm2(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {
      {"attn_norm", "operator_norm.weight"},      {"ffn_norm", "ffn_norm.weight"},
      {"wo", "self_attn.out_proj.weight"},        {"q_norm", "self_attn.q_layernorm.weight"},
      {"k_norm", "self_attn.k_layernorm.weight"}, {"w_gate", "feed_forward.w1.weight"},
      {"w_up", "feed_forward.w3.weight"},         {"w_down", "feed_forward.w2.weight"}};
  auto it = k_names.find(field);
  return it == k_names.end() ? hf_name(layer, field)
                             : "model.layers." + std::to_string(layer) + "." + it->second;
}

// Granite 4.0-H's folders: the Mamba-2 mixer under mamba., the dense feed-forward as the shared
// MLP's input_linear ([gate | up]) and output_linear.
std::string hf_name_granitehybrid(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {
      {"ssm_in", "mamba.in_proj.weight"},
      {"ssm_conv", "mamba.conv1d.weight"},
      {"ssm_conv_b", "mamba.conv1d.bias"},
      {"ssm_dt", "mamba.dt_bias"},
      {"ssm_a", "mamba.A_log"},
      {"ssm_d", "mamba.D"},
      {"ssm_norm", "mamba.norm.weight"},
      {"ssm_out", "mamba.out_proj.weight"},
      {"w_gate_up", "shared_mlp.input_linear.weight"},
      {"w_down", "shared_mlp.output_linear.weight"}};
  auto it = k_names.find(field);
  return it == k_names.end() ? hf_name(layer, field)
                             : "model.layers." + std::to_string(layer) + "." + it->second;
}

// Mamba-1's folders (MambaForCausalLM, FalconMambaForCausalLM): backbone.layers.{i}.norm before the
// mixer, mixer.* for it (dt_proj's weight and bias, x_proj).
std::string hf_name_mamba1(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {{"attn_norm", "norm.weight"},
                                                             {"ssm_in", "mixer.in_proj.weight"},
                                                             {"ssm_conv", "mixer.conv1d.weight"},
                                                             {"ssm_conv_b", "mixer.conv1d.bias"},
                                                             {"ssm_x", "mixer.x_proj.weight"},
                                                             {"ssm_dt_w", "mixer.dt_proj.weight"},
                                                             {"ssm_dt", "mixer.dt_proj.bias"},
                                                             {"ssm_a", "mixer.A_log"},
                                                             {"ssm_d", "mixer.D"},
                                                             {"ssm_out", "mixer.out_proj.weight"}};
  auto it = k_names.find(field);  // (another field: a name no folder holds)
  return "backbone.layers." + std::to_string(layer) + "." +
         (it == k_names.end() ? std::string(field) : it->second);
}

// Jamba's folders: the Mamba-1 mixer under mamba. (with its norms of dt, B and C), the dense
// feed-forward under feed_forward. after pre_ff_layernorm.
std::string hf_name_jamba(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {
      {"ffn_norm", "pre_ff_layernorm.weight"},
      {"w_gate", "feed_forward.gate_proj.weight"},
      {"w_up", "feed_forward.up_proj.weight"},
      {"w_down", "feed_forward.down_proj.weight"},
      {"ssm_in", "mamba.in_proj.weight"},
      {"ssm_conv", "mamba.conv1d.weight"},
      {"ssm_conv_b", "mamba.conv1d.bias"},
      {"ssm_x", "mamba.x_proj.weight"},
      {"ssm_dt_w", "mamba.dt_proj.weight"},
      {"ssm_dt", "mamba.dt_proj.bias"},
      {"ssm_a", "mamba.A_log"},
      {"ssm_d", "mamba.D"},
      {"ssm_out", "mamba.out_proj.weight"},
      {"ssm_dt_norm", "mamba.dt_layernorm.weight"},
      {"ssm_b_norm", "mamba.b_layernorm.weight"},
      {"ssm_c_norm", "mamba.c_layernorm.weight"}};
  auto it = k_names.find(field);
  return it == k_names.end() ? hf_name(layer, field)
                             : "model.layers." + std::to_string(layer) + "." + it->second;
}

// Bamba's folders: Granite 4.0-H's mixer names, a plain gated MLP under feed_forward. and its norm
// pre_ff_layernorm.
std::string hf_name_bamba(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {
      {"ffn_norm", "pre_ff_layernorm.weight"},
      {"w_gate", "feed_forward.gate_proj.weight"},
      {"w_up", "feed_forward.up_proj.weight"},
      {"w_down", "feed_forward.down_proj.weight"}};
  auto it = k_names.find(field);
  return it == k_names.end() ? hf_name_granitehybrid(layer, field)
                             : "model.layers." + std::to_string(layer) + "." + it->second;
}

// Nemotron-H's folders: backbone.layers.{i}.norm before the block's one sublayer, mixer.* for it
// (attention, Mamba-2 or the relu2 feed-forward's up_proj / down_proj).
std::string hf_name_nemotronh(int layer, const char* field) {
  static const std::map<std::string, std::string> k_names = {{"attn_norm", "norm.weight"},
                                                             {"ffn_norm", "norm.weight"},
                                                             {"wq", "mixer.q_proj.weight"},
                                                             {"wk", "mixer.k_proj.weight"},
                                                             {"wv", "mixer.v_proj.weight"},
                                                             {"wo", "mixer.o_proj.weight"},
                                                             {"bo", "mixer.o_proj.bias"},
                                                             {"ssm_in", "mixer.in_proj.weight"},
                                                             {"ssm_conv", "mixer.conv1d.weight"},
                                                             {"ssm_conv_b", "mixer.conv1d.bias"},
                                                             {"ssm_dt", "mixer.dt_bias"},
                                                             {"ssm_a", "mixer.A_log"},
                                                             {"ssm_d", "mixer.D"},
                                                             {"ssm_norm", "mixer.norm.weight"},
                                                             {"ssm_out", "mixer.out_proj.weight"},
                                                             {"w_up", "mixer.up_proj.weight"},
                                                             {"w_down", "mixer.down_proj.weight"}};
  return "backbone.layers." + std::to_string(layer) + "." + k_names.at(field);
}

// GLM-4's folders: the norms of the attention's and the MLP's outputs (post_attention_layernorm is
// the MLP's input norm, as in Llama).
// Llama 4: the dense layers' MLP is feed_forward.{gate,up,down}_proj.
std::string hf_name_llama4(int layer, const char* field) {
  const std::string f = field;
  if (f == "w_gate" || f == "w_up" || f == "w_down")
    return "model.layers." + std::to_string(layer) + ".feed_forward." +
           (f == "w_gate" ? "gate"
            : f == "w_up" ? "up"
                          : "down") +
           "_proj.weight";
  return hf_name(layer, field);
}

std::string hf_name_glm4(int layer, const char* field) {
  const std::string f = field;
  if (f == "post_attn_norm" || f == "post_ffn_norm")
    return "model.layers." + std::to_string(layer) +
           (f == "post_attn_norm" ? ".post_self_attn_layernorm.weight"
                                  : ".post_mlp_layernorm.weight");
  return hf_name(layer, field);
}

// A folder's RMSNorm weights w that multiply by 1 + w (Gemma, Qwen3.5: transformers adds the 1 in
// float32) replaced by 1 + w, the factor the forward pass multiplies by, as llama.cpp's converter
// stores them: the output norm and each layer's (not Qwen3.5's gated delta-net norm, plain w).
void shift_norms(Model& m, Builder& b) {
  auto shift = [&](TensorView& v, const std::string& canonical) {
    std::vector<float>& buf = b.storage->buffers.emplace_back(static_cast<size_t>(v.cols));
    const float* w = reinterpret_cast<const float*>(v.data);
    for (int64_t i = 0; i < v.cols; ++i) buf[static_cast<size_t>(i)] = 1.0f + w[i];
    v.data = reinterpret_cast<const uint8_t*>(buf.data());
    b.storage->canonical[canonical] = v;
  };
  shift(m.weights.output_norm, "output_norm");
  for (int i = 0; i < m.config.n_layer; ++i) {
    LayerWeights& l = m.weights.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    for (auto [v, name] : {std::pair{&l.attn_norm, "attn_norm"},
                           {&l.q_norm, "q_norm"},
                           {&l.k_norm, "k_norm"},
                           {&l.post_attn_norm, "post_attn_norm"},
                           {&l.ffn_norm, "ffn_norm"},
                           {&l.post_ffn_norm, "post_ffn_norm"}})
      if (v->data != nullptr) shift(*v, p + name);  // (Gemma 2 has no q/k norms)
  }
}

// Gemma 3 from a folder: HF stores RMSNorm weights w and multiplies by 1 + w (in float32); the
// forward pass multiplies by the stored factor, so each norm is replaced by 1 + w here, as
// llama.cpp's converter does. A multimodal folder keeps the language model's tensors under
// model.language_model. (or language_model.model. before transformers 4.52).
void load_gemma3_hf(Model& m, Builder& b, const Json& cfg, bool multimodal,
                    const char* arch = "gemma3") {
  ModelConfig& c = m.config;
  c.arch = arch;
  gemma3_config_hf(cfg, c);
  validate_config(c, cfg.path);
  std::string prefix = "model.";
  if (multimodal)
    prefix = b.has("language_model.model.embed_tokens.weight") ? "language_model.model."
                                                               : "model.language_model.";
  // (Gemma 1's two norms per layer keep Llama's names: post_attention_layernorm is its pre-FFN
  // norm.)
  // (VaultGemma keeps Gemma 2's pre_feedforward_layernorm alone)
  const bool four_norms = c.post_norms() || c.no_post_norms;
  const auto name_of = [&prefix, four_norms](int layer, const char* field) {
    static const std::map<std::string, std::string> k_gemma = {
        {"ffn_norm", "pre_feedforward_layernorm.weight"},
        {"post_attn_norm", "post_attention_layernorm.weight"},
        {"post_ffn_norm", "post_feedforward_layernorm.weight"}};
    auto it = four_norms ? k_gemma.find(field) : k_gemma.end();
    const std::string name = it != k_gemma.end()
                                 ? "model.layers." + std::to_string(layer) + "." + it->second
                                 : hf_name(layer, field);
    return prefix + name.substr(6);  // "model." -> the folder's prefix
  };
  // A multimodal folder's lm_head: at the top since transformers 4.52, under language_model.
  // before.
  const std::string head =
      multimodal && !b.has("lm_head.weight") ? "language_model.lm_head.weight" : "lm_head.weight";
  if (!c.tied_embeddings && !b.has(head)) c.tied_embeddings = true;
  build_weights(m, b, name_of, prefix + "embed_tokens.weight", prefix + "norm.weight", head);
  shift_norms(m, b);
}

// Gemma 4 from a folder (Gemma4ForCausalLM, or a Gemma4ForConditionalGeneration's language model
// under model.language_model.): norms stored as the factor applied (no 1 + w), the layers' output
// multiplier layer_scalar.
void load_gemma4_hf(Model& m, Builder& b, const Json& cfg, bool multimodal, bool g3n = false) {
  ModelConfig& c = m.config;
  c.arch = g3n ? "gemma3n" : "gemma4";
  if (g3n)
    gemma3n_config_hf(cfg, c);
  else
    gemma4_config_hf(cfg, c);
  validate_config(c, cfg.path);
  const std::string prefix = multimodal ? "model.language_model." : "model.";
  static const std::map<std::string, std::string> k_fields = {
      {"ffn_norm", "pre_feedforward_layernorm.weight"},
      {"post_attn_norm", "post_attention_layernorm.weight"},
      {"post_ffn_norm", "post_feedforward_layernorm.weight"},
      {"out_scale", "layer_scalar"},
      {"ple_gate", "per_layer_input_gate.weight"},
      {"ple_proj", "per_layer_projection.weight"},
      {"ple_norm", "post_per_layer_input_norm.weight"},
      {"ffn_norm_2", "pre_feedforward_layernorm_2.weight"},
      {"post_ffn_norm_1", "post_feedforward_layernorm_1.weight"},
      {"post_ffn_norm_2", "post_feedforward_layernorm_2.weight"},
      {"router", "router.proj.weight"},
      {"router_scale", "router.scale"},
      {"expert_scale", "router.per_expert_scale"},
      {"gate_up_exps", "experts.gate_up_proj"},
      {"down_exps", "experts.down_proj"},
      {"altup_router", "altup.modality_router.weight"},
      {"altup_router_norm", "altup.router_norm.weight"},
      {"altup_predict", "altup.prediction_coefs.weight"},
      {"altup_correct", "altup.correction_coefs.weight"},
      {"altup_correct_scale", "altup.correct_output_scale"},
      {"laurel_l", "laurel.linear_left.weight"},
      {"laurel_r", "laurel.linear_right.weight"},
      {"laurel_norm", "laurel.post_laurel_norm.weight"}};
  const auto name_of = [&prefix](int layer, const char* field) {
    auto it = k_fields.find(field);
    const std::string name = it != k_fields.end()
                                 ? "model.layers." + std::to_string(layer) + "." + it->second
                                 : hf_name(layer, field);
    return prefix + name.substr(6);  // "model." -> the folder's prefix
  };
  const std::map<std::string, std::string> globals = {
      {"tok_embd", prefix + "embed_tokens.weight"},
      {"output_norm", prefix + "norm.weight"},
      {"output", "lm_head.weight"},
      {"ple_tok_embd", prefix + "embed_tokens_per_layer.weight"},
      {"ple_model_proj", prefix + "per_layer_model_projection.weight"},
      {"ple_proj_norm", prefix + "per_layer_projection_norm.weight"},
      {"altup_proj", prefix + "altup_projections"},
      {"altup_unembd", prefix + "altup_unembed_projections"}};
  build_gemma4_weights(m, b, name_of, [&globals](const char* field) { return globals.at(field); });
}

// What a folder without config.json holds, for the error: safetensors weights without their
// config (a partial download, or the weights copied alone), GGUF files (pass one), or neither.
std::string no_config_message(const fs::path& dir) {
  std::vector<std::string> weights, ggufs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".safetensors") weights.push_back(name);
    if (e.path().extension() == ".gguf") ggufs.push_back(name);
  }
  std::sort(weights.begin(), weights.end());
  std::sort(ggufs.begin(), ggufs.end());
  const std::string where = "'" + dir.string() + "'";
  if (!weights.empty())
    return where + " holds safetensors weights (" + std::to_string(weights.size()) +
           (weights.size() == 1 ? " file: " : " files: ") + weights.front() +
           (weights.size() > 1 ? " ... " + weights.back() : "") +
           ") but no config.json: a Hugging Face model folder needs the repo's config.json (and "
           "tokenizer files) beside the weights";
  if (!ggufs.empty())
    return where + " is a folder of GGUF files without config.json: pass one file (" +
           ggufs.front() + (ggufs.size() > 1 ? ", ..." : "") + ")";
  return where + " is a folder without config.json (not a Hugging Face model folder)";
}

// A vision-language model's folder read for its language model: Mistral 3's (the wrapper's
// model_type mistral3, its text_config's ministral3) and Qwen3.5's (qwen3_5 / qwen3_5_moe, their
// text_config's qwen3_5_text / qwen3_5_moe_text).
// config.json model types and architectures -> ossa's architecture names (the Gemma family's are
// dispatched by load_hf apart: gemma_types).
const std::map<std::string, std::string>& hf_archs() {
  static const std::map<std::string, std::string> k_archs = {
      {"llama", "llama"},
      {"LlamaForCausalLM", "llama"},
      {"qwen2", "qwen2"},
      {"Qwen2ForCausalLM", "qwen2"},
      {"qwen3", "qwen3"},
      {"Qwen3ForCausalLM", "qwen3"},
      {"mistral", "mistral"},
      {"MistralForCausalLM", "mistral"},
      {"ministral", "mistral"},  // (Ministral 8B: Mistral with layer_types)
      {"MinistralForCausalLM", "mistral"},
      {"iquestcoder", "llama"},  // (IQuest-Coder: Llama, head_dim 128 unless set)
      {"jais2", "jais2"},  // (Jais 2: LayerNorms, relu^2 MLPs, biases everywhere; folders only)
      {"Jais2ForCausalLM", "jais2"},
      {"cwm", "llama"},       // (Code World Model: Llama with a window on 3 of 4 layers)
      {"nanochat", "llama"},  // (nanochat: weightless norms, relu^2, q / k norms; below)
      {"NanoChatForCausalLM", "llama"},
      {"CwmForCausalLM", "llama"},
      {"qwen3_moe", "qwen3moe"},
      {"Qwen3MoeForCausalLM", "qwen3moe"},
      {"qwen2_moe", "qwen2moe"},
      {"Qwen2MoeForCausalLM", "qwen2moe"},
      {"mixtral", "mixtral"},
      {"MixtralForCausalLM", "mixtral"},
      {"phi3", "phi3"},
      {"Phi3ForCausalLM", "phi3"},
      {"phimoe", "phimoe"},
      {"PhimoeForCausalLM", "phimoe"},
      {"PhiMoEForCausalLM", "phimoe"},
      {"smollm3", "smollm3"},
      {"SmolLM3ForCausalLM", "smollm3"},
      {"granite", "granite"},
      {"GraniteForCausalLM", "granite"},
      {"granitemoe", "granitemoe"},
      {"GraniteMoeForCausalLM", "granitemoe"},
      {"granitemoeshared", "granitemoe"},  // (GraniteMoe with a shared MLP)
      {"GraniteMoeSharedForCausalLM", "granitemoe"},
      {"granite_swa", "granite"},  // (with a window, sinks and RoPE bases per layer)
      {"GraniteSWAForCausalLM", "granite"},
      {"granitemoe_swa", "granitemoe"},
      {"GraniteMoeSWAForCausalLM", "granitemoe"},
      {"gpt_oss", "gpt-oss"},
      {"GptOssForCausalLM", "gpt-oss"},
      {"olmo2", "olmo2"},
      {"Olmo2ForCausalLM", "olmo2"},
      {"olmo3", "olmo3"},
      {"Olmo3ForCausalLM", "olmo3"},
      {"exaone4", "exaone4"},
      {"Exaone4ForCausalLM", "exaone4"},
      {"ernie4_5", "ernie4_5"},
      {"Ernie4_5ForCausalLM", "ernie4_5"},
      {"ernie4_5_moe", "ernie4_5-moe"},
      {"Ernie4_5_MoeForCausalLM", "ernie4_5-moe"},
      {"deepseek_v2", "deepseek2"},
      {"DeepseekV2ForCausalLM", "deepseek2"},
      {"deepseek_v3", "deepseek2"},
      {"youtu", "deepseek2"},  // (Youtu-LLM: DeepSeek V3's attention, dense MLPs in every layer)
      {"YoutuForCausalLM", "deepseek2"},
      {"glm4_moe_lite", "deepseek2"},
      {"mistral4", "deepseek2"},
      {"Mistral4ForCausalLM", "deepseek2"},
      {"Glm4MoeLiteForCausalLM", "deepseek2"},
      {"DeepseekV3ForCausalLM", "deepseek2"},
      {"glm4_moe", "glm4moe"},
      {"Glm4MoeForCausalLM", "glm4moe"},
      // (Solar Open: GLM-4.5's experts in every layer, Llama's attention; Param2-MoE and
      // Sarvam-MoE: GLM-4.5's model under their own names; their defaults: glm_variant_keys)
      {"solar_open", "glm4moe"},
      {"SolarOpenForCausalLM", "glm4moe"},
      {"param2moe", "glm4moe"},
      {"bailing_moe", "glm4moe"},  // (Ling / Ring 2.0: Param2-MoE's names; glm_variant_keys)
      {"BailingMoeV2ForCausalLM", "glm4moe"},
      {"nemotron-nas", "deci"},  // (Nemotron-51B / Super / Ultra: per-layer shapes, deci_config_hf)
      {"DeciLMForCausalLM", "deci"},
      {"sarvam_moe", "glm4moe"},
      {"olmoe", "olmoe"},
      {"OlmoeForCausalLM", "olmoe"},
      {"flex_olmo", "olmoe"},  // (FlexOlmo: OLMoE's layers with OLMo 2's post-norms alone)
      {"FlexOlmoForCausalLM", "olmoe"},
      {"glm4", "glm4"},
      {"Glm4ForCausalLM", "glm4"},
      {"glm", "chatglm"},
      {"GlmForCausalLM", "chatglm"},
      {"ministral3", "mistral3"},
      {"Ministral3ForCausalLM", "mistral3"},
      {"qwen3_5_text", "qwen35"},
      {"Qwen3_5ForCausalLM", "qwen35"},
      {"qwen3_5_moe_text", "qwen35moe"},
      {"Qwen3_5MoeForCausalLM", "qwen35moe"},
      {"qwen3_next", "qwen3next"},  // (Qwen3-Next: Qwen3.5-MoE's layers, fused projections)
      {"Qwen3NextForCausalLM", "qwen3next"},
      {"lfm2", "lfm2"},
      {"Lfm2ForCausalLM", "lfm2"},
      {"lfm2_moe", "lfm2moe"},
      {"Lfm2MoeForCausalLM", "lfm2moe"},
      {"granitemoehybrid", "granitehybrid"},
      {"GraniteMoeHybridForCausalLM", "granitehybrid"},
      {"bamba", "granitehybrid"},  // (Bamba: granitehybrid in GGUF too, as llama.cpp converts it)
      {"BambaForCausalLM", "granitehybrid"},
      {"nemotron_h", "nemotron_h"},
      {"NemotronHForCausalLM", "nemotron_h"},
      {"mamba2", "mamba2"},
      {"Mamba2ForCausalLM", "mamba2"},
      {"mamba", "mamba"},  // (Mamba-1 and Falcon-Mamba: its weightless norms of dt, B, C)
      {"MambaForCausalLM", "mamba"},
      {"falcon_mamba", "mamba"},
      {"FalconMambaForCausalLM", "mamba"},
      {"jamba", "jamba"},
      {"JambaForCausalLM", "jamba"},
      {"falcon_h1", "falcon-h1"},  // (Falcon-H1: attention and Mamba-2 side by side)
      {"FalconH1ForCausalLM", "falcon-h1"},
      {"llama4_text", "llama4"},  // (Llama 4: a Llama4Config's text_config, or a text-only folder)
      {"Llama4ForCausalLM", "llama4"},
      // (Qwen3-VL's language model: Qwen3 / Qwen3-MoE's layers; its M-RoPE is plain RoPE for text,
      // every position id the same in each of the three sections)
      {"qwen3_vl_text", "qwen3vl"},
      {"qwen3_vl_moe_text", "qwen3vlmoe"},
      // (Qwen2-VL / Qwen2.5-VL's: Qwen2's layers, M-RoPE plain for text; flat configs as released)
      {"qwen2_vl_text", "qwen2vl"},
      {"qwen2_5_vl_text", "qwen2vl"},
      {"qwen2_vl", "qwen2vl"},
      {"qwen2_5_vl", "qwen2vl"},
      {"cohere", "command-r"},  // (Command R, R+, Aya: llama.cpp's name for the architecture)
      {"CohereForCausalLM", "command-r"},
      {"cohere2", "cohere2"},
      {"Cohere2ForCausalLM", "cohere2"},
      {"minimax_m2", "minimax-m2"},
      {"MiniMaxM2ForCausalLM", "minimax-m2"},
      {"seed_oss", "seed_oss"},
      {"SeedOssForCausalLM", "seed_oss"},
      {"arcee", "arcee"},
      {"ArceeForCausalLM", "arcee"},
      {"exaone", "exaone"},
      {"ExaoneForCausalLM", "exaone"},
      {"internlm3", "llama"},
      {"InternLM3ForCausalLM", "llama"},
      {"helium", "llama"},  // (Kyutai's Helium: Llama with RoPE on interleaved pairs)
      {"HeliumForCausalLM", "llama"},
      {"hunyuan_v1_dense", "hunyuan-dense"},
      {"HunYuanDenseV1ForCausalLM", "hunyuan-dense"},
      {"hunyuan_v1_moe", "hunyuan-moe"},
      {"HunYuanMoEV1ForCausalLM", "hunyuan-moe"},
      {"starcoder2", "starcoder2"},
      {"Starcoder2ForCausalLM", "starcoder2"},
      {"stablelm", "stablelm"},
      {"StableLmForCausalLM", "stablelm"},
      {"exaone_moe", "exaone-moe"},
      {"ExaoneMoEForCausalLM", "exaone-moe"},
      {"ExaoneMoeForCausalLM", "exaone-moe"},
      {"apertus", "apertus"},
      {"ApertusForCausalLM", "apertus"},
      {"minicpm3", "minicpm3"},
      {"MiniCPM3ForCausalLM", "minicpm3"},
      {"minicpm", "minicpm"},  // (MiniCPM 1 / 2 / 4: Llama with Granite's multipliers)
      {"MiniCPMForCausalLM", "minicpm"},
      {"internlm2", "llama"},  // (InternLM2 / 2.5: Llama's layers, wqkv regrouped: internlm2_qkv)
      {"InternLM2ForCausalLM", "llama"},
      {"deepseek", "deepseek"},  // (DeepSeek-MoE 16B: Llama's attention, V2's softmax experts)
      {"DeepseekForCausalLM", "deepseek"},
      {"gptj", "gptj"},
      {"GPTJForCausalLM", "gptj"},
      {"codegen", "gptj"},  // (GPT-J's block; its qkv_proj regrouped: codegen_qkv)
      {"CodeGenForCausalLM", "gptj"},
      {"bloom", "bloom"},
      {"BloomForCausalLM", "bloom"},
      {"mpt", "mpt"},
      {"MptForCausalLM", "mpt"},
      {"MPTForCausalLM", "mpt"},
      {"gpt2", "gpt2"},
      {"GPT2LMHeadModel", "gpt2"},
      {"bitnet", "bitnet"},
      {"BitNetForCausalLM", "bitnet"},
      {"opt", "gpt2"},  // (OPT, GPT-Neo: GPT-2's layout; gpt_classic_config_hf has their own)
      {"OPTForCausalLM", "gpt2"},
      {"gpt_neo", "gpt2"},
      {"GPTNeoForCausalLM", "gpt2"},
      {"gpt_bigcode", "starcoder"},
      {"GPTBigCodeForCausalLM", "starcoder"},
      {"afmoe", "afmoe"},
      {"AfmoeForCausalLM", "afmoe"},
      {"dbrx", "dbrx"},
      {"DbrxForCausalLM", "dbrx"},
      {"gpt_neox", "gptneox"},
      {"GPTNeoXForCausalLM", "gptneox"},
      {"dots1", "dots1"},
      {"Dots1ForCausalLM", "dots1"},
      {"falcon", "falcon"},
      {"FalconForCausalLM", "falcon"},
      {"nemotron", "nemotron"},
      {"NemotronForCausalLM", "nemotron"},
      {"olmo", "olmo"},
      {"OlmoForCausalLM", "olmo"},
      {"phi", "phi2"},
      {"PhiForCausalLM", "phi2"}};
  return k_archs;
}

// The Gemma family's folders (load_gemma3_hf / load_gemma4_hf).
bool gemma_type(const std::string& t) {
  return t == "gemma" || t == "gemma2" || t == "gemma3" || t == "gemma3_text" || t == "gemma4" ||
         t == "gemma4_text" || t == "GemmaForCausalLM" || t == "Gemma2ForCausalLM" ||
         t == "Gemma3ForCausalLM" || t == "Gemma4ForCausalLM" ||
         t == "Gemma3ForConditionalGeneration" || t == "Gemma4ForConditionalGeneration" ||
         t == "gemma3n" || t == "gemma3n_text" || t == "Gemma3nForCausalLM" ||
         t == "Gemma3nForConditionalGeneration" || t == "vaultgemma" ||
         t == "VaultGemmaForCausalLM";
}

bool text_wrapper(const JsonValue& cfg) {
  const JsonValue* type = cfg.get("model_type");
  const JsonValue* archs = cfg.get("architectures");
  const bool by_type =
      type != nullptr && type->is_string() &&
      (type->string == "mistral3" || type->string == "qwen3_5" || type->string == "qwen3_5_moe" ||
       type->string == "llama4" || type->string == "qwen3_vl" || type->string == "qwen3_vl_moe" ||
       type->string == "qwen2_vl" || type->string == "qwen2_5_vl" || type->string == "lfm2_vl");
  const bool by_arch = archs != nullptr && archs->is_array() && !archs->array.empty() &&
                       archs->array[0].is_string() &&
                       (archs->array[0].string == "Mistral3ForConditionalGeneration" ||
                        archs->array[0].string == "Qwen3_5ForConditionalGeneration" ||
                        archs->array[0].string == "Qwen3_5MoeForConditionalGeneration" ||
                        archs->array[0].string == "Llama4ForConditionalGeneration" ||
                        archs->array[0].string == "Qwen3VLForConditionalGeneration" ||
                        archs->array[0].string == "Qwen3VLMoeForConditionalGeneration" ||
                        archs->array[0].string == "Qwen2VLForConditionalGeneration" ||
                        archs->array[0].string == "Qwen2_5_VLForConditionalGeneration" ||
                        archs->array[0].string == "Lfm2VlForConditionalGeneration");
  if (by_type || by_arch) return true;
  // Any other vision-language folder (LLaVA, InternVL, Aya Vision, SmolVLM, ...) whose own type
  // ossa does not run but whose text_config is a language model it does: that model.
  const std::string own = type != nullptr && type->is_string() ? type->string : "";
  const JsonValue* text = cfg.get("text_config");
  const JsonValue* text_type =
      text != nullptr && text->is_object() ? text->get("model_type") : nullptr;
  return !own.empty() && !hf_archs().count(own) && !gemma_type(own) && text_type != nullptr &&
         text_type->is_string() &&
         (hf_archs().count(text_type->string) > 0 || gemma_type(text_type->string));
}

// The language model's tensors under the names of a text-only folder: model.language_model.X
// (transformers 4.52 on) or language_model.model.X (before) as model.X, language_model.lm_head as
// lm_head; the vision tower's and the projector's are left as they are (never read).
void language_model_names(Builder& b) {
  std::map<std::string, Raw> renamed;
  for (auto& [name, raw] : b.raw) {
    std::string to = name;
    for (const char* prefix :
         {"model.language_model.", "language_model.model.", "model.text_model."})
      if (name.rfind(prefix, 0) == 0) to = "model." + name.substr(std::string(prefix).size());
    if (name == "language_model.lm_head.weight") to = "lm_head.weight";
    if (!renamed.emplace(to, raw).second)
      throw ModelError("tensor '" + to + "' appears twice in '" + b.path + "'");
  }
  b.raw = std::move(renamed);
}

// Every tensor of the folder under the name `to(name)` (two names mapping to one: an error).
void rename_tensors(Builder& b, const std::function<std::string(std::string)>& to) {
  std::map<std::string, Raw> renamed;
  for (auto& [name, raw] : b.raw) {
    const std::string n = to(name);
    if (!renamed.emplace(n, raw).second)
      throw ModelError("tensor '" + n + "' appears twice in '" + b.path + "'");
  }
  b.raw = std::move(renamed);
}

// A fused query_key_value (weight rows, or the bias) held as `kv` groups of (heads / kv queries,
// one key, one value) heads of `hd` rows each (GPT-NeoX: a group per head, [q_h | k_h | v_h];
// Falcon 40B / 180B: per KV group; Falcon 7B: one group, already [q | k | v]; v_first: each group's
// value before its key, CodeGen's) regrouped into [q | k | v] as llama.cpp's converters write
// attn_qkv, then viewed as three (take_split).
void regroup_qkv(Builder& b, int64_t heads, int64_t kv, int64_t hd, bool v_first) {
  if (heads <= 0 || kv <= 0 || heads % kv != 0 || hd <= 0) return;  // (the config names it)
  const int64_t per = heads / kv, total = (heads + 2 * kv) * hd;
  const auto source = [&](int64_t r) {  // (the fused row of [q | k | v]'s row r)
    const int64_t head = r / hd, d = r % hd;
    if (head < heads) return ((head / per) * (per + 2) + head % per) * hd + d;
    const bool key = head < heads + kv;
    const int64_t g = (head - heads) % kv, part = key != v_first ? per : per + 1;
    return (g * (per + 2) + part) * hd + d;
  };
  for (auto& [name, raw] : b.raw) {
    if (name.find(".self_attn.qkv_proj.") == std::string::npos || !raw.supported) continue;
    TensorView& v = raw.view;
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias && v.rows * v.cols == total) {  // (one row of values: regrouped in F32)
      std::vector<float> in(static_cast<size_t>(total));
      for (int64_t r = 0; r < v.rows; ++r) dequantize_row(v, r, in.data() + r * v.cols);
      float* out = reinterpret_cast<float*>(b.alloc(static_cast<size_t>(total) * 4));
      for (int64_t r = 0; r < total; ++r) out[r] = in[static_cast<size_t>(source(r))];
      v.type = DType::F32;
      v.rows = 1;
      v.cols = total;
      v.row_bytes = static_cast<size_t>(total) * 4;
      v.data = reinterpret_cast<const uint8_t*>(out);
      raw.type_name = "F32";
    } else if (!bias && v.rows == total) {  // (whole rows moved, in their stored type)
      uint8_t* out = b.alloc(static_cast<size_t>(v.rows) * v.row_bytes);
      for (int64_t r = 0; r < v.rows; ++r)
        std::memcpy(out + static_cast<size_t>(r) * v.row_bytes, v.row(source(r)), v.row_bytes);
      v.data = out;
    }  // (other shapes: refused by name when taken)
  }
}

// The rotated dimensions of a folder's partial NeoX RoPE (Phi-2, StableLM, Nemotron, GPT-NeoX): the
// rope parameters' partial_rotary_factor, else the config's `top_key` (GPT-NeoX's older
// rotary_pct), else `dflt`, times head_dim; 0 when the whole head rotates.
int hf_rotated_dims(const Json& cfg, const JsonValue* params, int head_dim, double dflt,
                    const char* top_key) {
  const bool own = params != nullptr && params->get("partial_rotary_factor") != nullptr;
  const double prf = own ? Json{*params, cfg.path}.number("partial_rotary_factor", dflt)
                         : cfg.number(top_key, dflt);
  const int64_t dims = static_cast<int64_t>(prf * static_cast<double>(head_dim));
  if (!(prf > 0.0 && prf <= 1.0) || dims % 2 != 0 || dims < 2)
    throw ModelError(
        std::string("invalid partial_rotary_factor") +
        (std::string(top_key) == "partial_rotary_factor" ? "" : std::string(" / ") + top_key) +
        " in '" + cfg.path + "'");
  return dims == head_dim ? 0 : static_cast<int>(dims);
}

// Falcon's K/V heads (FalconConfig): num_kv_heads (default: every head) for the new decoder
// architecture (40B / 180B) or without multi_query, else one (7B's multi-query attention).
int64_t falcon_kv_heads(const Json& cfg, int64_t heads) {
  const int64_t kv = cfg.integer("num_kv_heads", heads);
  return cfg.boolean("new_decoder_architecture", false) || !cfg.boolean("multi_query", true) ? kv
                                                                                             : 1;
}

// The GPT-2-era configs' keys under Llama's, where Llama's are absent (GPT-J, GPT-2, GPT-BigCode:
// n_embd, n_layer, n_head, n_positions, activation_function; BLOOM: n_embed, n_layer, n_head,
// seq_length; MPT: d_model, n_layers, n_heads, max_seq_len; GPT-BigCode's K/V heads from
// multi_query; OPT: ffn_dim; GPT-Neo: num_layers, num_heads), and n_inner (null or absent meaning 4
// x the hidden size) as intermediate_size (a null one: GPT-Neo's); the tensors: family_names'
// parts.
void gpt_classic_keys(JsonValue& cfg) {
  for (const auto& [from, to] : {std::pair{"n_embd", "hidden_size"},
                                 {"n_embed", "hidden_size"},
                                 {"d_model", "hidden_size"},
                                 {"n_layer", "num_hidden_layers"},
                                 {"n_layers", "num_hidden_layers"},
                                 {"n_head", "num_attention_heads"},
                                 {"n_heads", "num_attention_heads"},
                                 {"num_layers", "num_hidden_layers"},
                                 {"num_heads", "num_attention_heads"},
                                 {"ffn_dim", "intermediate_size"},
                                 {"n_positions", "max_position_embeddings"},
                                 {"max_seq_len", "max_position_embeddings"},
                                 {"seq_length", "max_position_embeddings"},
                                 {"activation_function", "hidden_act"}}) {
    const JsonValue* v = cfg.get(from);
    if (v != nullptr && !v->is_null() && (cfg.get(to) == nullptr || cfg.get(to)->is_null())) {
      const JsonValue copy = *v;
      std::erase_if(cfg.object, [&](const auto& kv_pair) { return kv_pair.first == to; });
      cfg.object.emplace_back(to, copy);
    }
  }
  // (values copied before cfg grows: pointers into it do not survive an emplace)
  const JsonValue* type_v = cfg.get("model_type");
  const std::string type = type_v != nullptr && type_v->is_string() ? type_v->string : "";
  if (type == "gpt_bigcode") {  // (K/V heads as transformers sets them: one when multi_query)
    const JsonValue* mq = cfg.get("multi_query");
    const JsonValue* heads = cfg.get("num_attention_heads");
    const bool multi = mq == nullptr || (mq->kind == JsonValue::Kind::Bool && mq->boolean);
    const JsonValue kv = multi || heads == nullptr ? parse_json("1") : *heads;
    std::erase_if(cfg.object,
                  [](const auto& kv_pair) { return kv_pair.first == "num_key_value_heads"; });
    cfg.object.emplace_back("num_key_value_heads", kv);
  }
  if (type == "bloom" && cfg.get("max_position_embeddings") == nullptr)  // (its training length)
    cfg.object.emplace_back("max_position_embeddings", parse_json("2048"));
  if (type == "dbrx") {  // (attn_config's K/V heads and RoPE base, ffn_config's expert width)
    for (const auto& [sub, from, to] :
         {std::tuple{"attn_config", "kv_n_heads", "num_key_value_heads"},
          std::tuple{"attn_config", "rope_theta", "rope_theta"},
          std::tuple{"ffn_config", "ffn_hidden_size", "intermediate_size"}}) {
      const JsonValue* s = cfg.get(sub);
      const JsonValue* v = s != nullptr && s->is_object() ? s->get(from) : nullptr;
      if (v == nullptr || v->is_null() || cfg.get(to) != nullptr) continue;
      const JsonValue copy = *v;
      cfg.object.emplace_back(to, copy);
    }
  }
  if (const JsonValue* size = cfg.get("intermediate_size"); size != nullptr && size->is_null())
    std::erase_if(cfg.object,
                  [](const auto& kv_pair) { return kv_pair.first == "intermediate_size"; });
  const JsonValue* inner = cfg.get("n_inner");
  const JsonValue* embd = cfg.get("hidden_size");
  if (cfg.get("intermediate_size") == nullptr) {
    if (inner != nullptr && !inner->is_null()) {
      const JsonValue copy = *inner;
      cfg.object.emplace_back("intermediate_size", copy);
    } else if (embd != nullptr && embd->is_number() && embd->is_integer) {
      JsonValue four = *embd;
      four.integer = std::clamp<int64_t>(embd->integer, 0, int64_t{1} << 28) * 4;
      four.number = static_cast<double>(four.integer);
      cfg.object.emplace_back("intermediate_size", four);
    }
  }
}

// GPT-NeoX's and Falcon's fused query_key_value (renamed qkv_proj by family_names) regrouped
// (regroup_qkv): a group per head for GPT-NeoX, Falcon's KV groups.
void neox_falcon_qkv(const JsonValue& cfg, Builder& b, bool falcon) {
  const Json json{cfg, b.path};
  const int64_t heads = std::clamp<int64_t>(json.integer("num_attention_heads", 0), 0, 65536),
                width = std::clamp<int64_t>(json.integer("hidden_size", 0), 0, int64_t{1} << 30);
  if (heads <= 0 || width % heads != 0) return;  // (the config check names what is wrong)
  regroup_qkv(b, heads, falcon ? falcon_kv_heads(json, heads) : heads, width / heads, false);
}

// InternLM2's wqkv (renamed qkv_proj by family_names): num_key_value_heads groups of (the group's
// queries, one key, one value) heads, regrouped (regroup_qkv) into [q | k | v]; its output
// matrix's top-level name (output.weight) becomes lm_head's.
void internlm2_qkv(const JsonValue& cfg, Builder& b) {
  rename_tensors(b, [](std::string name) {
    return name == "output.weight" ? std::string("lm_head.weight") : name;
  });
  const Json json{cfg, b.path};
  const int64_t heads = std::clamp<int64_t>(json.integer("num_attention_heads", 0), 0, 65536),
                width = std::clamp<int64_t>(json.integer("hidden_size", 0), 0, int64_t{1} << 30),
                kv = std::clamp<int64_t>(json.integer("num_key_value_heads", heads), 0, 65536);
  if (heads <= 0 || width % heads != 0) return;  // (the config check names what is wrong)
  regroup_qkv(b, heads, kv, width / heads, false);
}

// CodeGen's qkv_proj: four groups (its mp_num) of [q_g | v_g | k_g], each a quarter of the width
// (the query heads of a group in order), regrouped into [q | k | v].
void codegen_qkv(const JsonValue& cfg, Builder& b) {
  const Json json{cfg, b.path};
  const int64_t width = std::clamp<int64_t>(json.integer("hidden_size", 0), 0, int64_t{1} << 30);
  if (width <= 0 || width % 4 != 0) return;  // (the config check names what is wrong)
  regroup_qkv(b, 4, 4, width / 4, true);
}

// BLOOM's fused query_key_value, and GPT-BigCode's without multi_query, per head [q_h | k_h | v_h]:
// regrouped (regroup_qkv, a group per head) into [q | k | v].
void bloom_bigcode_qkv(const JsonValue& cfg, Builder& b) {
  const Json json{cfg, b.path};
  const int64_t heads = std::clamp<int64_t>(json.integer("num_attention_heads", 0), 0, 65536),
                width = std::clamp<int64_t>(json.integer("hidden_size", 0), 0, int64_t{1} << 30);
  if (heads <= 0 || width % heads != 0) return;  // (the config check names what is wrong)
  if (json.string("model_type", "") == "gpt_bigcode" &&
      json.integer("num_key_value_heads", 1) != heads)
    return;  // (multi-query: c_attn is [q | k | v] already)
  regroup_qkv(b, heads, heads, width / heads, false);
}

// GPT-2's Conv1D weights are stored [in, out]: transposed into Llama's [out, in] rows (a copy in
// the stored type), and the old files' causal-mask buffers (attn.bias, attn.masked_bias) dropped.
// Folders without the transformer. prefix (the oldest GPT-2 uploads; family_names' parts already
// replaced) read as with it.
void gpt2_transpose(Builder& b) {
  std::map<std::string, Raw> kept;
  for (auto& [name, raw] : b.raw) {
    std::string n = name;
    if (n.rfind("h.", 0) == 0) n = "model.layers." + n.substr(2);
    for (const char* bare : {"wte.", "wpe.", "ln_f."})
      if (n.rfind(bare, 0) == 0)
        n = std::string(bare) == "wte."   ? "model.embed_tokens." + n.substr(4)
            : std::string(bare) == "wpe." ? "model.embed_positions." + n.substr(4)
                                          : "model.norm." + n.substr(5);
    if (n.size() > 10 && (n.compare(n.size() - 10, 10, ".attn.bias") == 0 ||
                          n.find(".attn.masked_bias") != std::string::npos))
      continue;  // (causal-mask buffers)
    const bool conv =
        n.rfind("model.layers.", 0) == 0 && n.size() > 7 &&
        n.compare(n.size() - 7, 7, ".weight") == 0 &&
        (n.find(".self_attn.") != std::string::npos || n.find(".mlp.") != std::string::npos);
    if (conv && raw.supported && raw.n_dims == 2) {  // [in, out] -> [out, in]
      TensorView& v = raw.view;
      const size_t es = v.type == DType::F32 ? 4 : 2;
      const int64_t in = v.rows, out = v.cols;
      uint8_t* t = b.alloc(static_cast<size_t>(in * out) * es);
      for (int64_t r = 0; r < in; ++r)
        for (int64_t c = 0; c < out; ++c)
          std::memcpy(t + static_cast<size_t>(c * in + r) * es,
                      v.data + static_cast<size_t>(r) * v.row_bytes + static_cast<size_t>(c) * es,
                      es);
      v.rows = out;
      v.cols = in;
      v.row_bytes = static_cast<size_t>(in) * es;
      v.data = t;
      raw.shape = {out, in};
    }
    if (!kept.emplace(n, raw).second)
      throw ModelError("tensor '" + n + "' appears twice in '" + b.path + "'");
  }
  b.raw = std::move(kept);
}

// An FP8 block scale the kernels take exactly (within these bounds 256 s and s / 512 are exact:
// kernels/matmul_fp8.cpp uses both).
bool fp8_scale_ok(float s) {
  return std::isfinite(s) && (s == 0.0f || (std::fabs(s) > 0x1p-100f && std::fabs(s) < 0x1p100f));
}

// A [rows, cols] matrix of E4M3 codes (cols a multiple of 128) as DType::FP8 rows, the scale of
// row r's 128-column block k scale_of(r, k); a NaN code is a ModelError.
TensorView fp8_repack(Builder& b, const uint8_t* bytes, int64_t rows, int64_t cols,
                      const std::function<float(int64_t, int64_t)>& scale_of,
                      const std::string& name, const std::string& where) {
  const int64_t nb = cols / 128;
  const size_t row_bytes = static_cast<size_t>(nb * 132);
  uint8_t* out = b.alloc(row_bytes * static_cast<size_t>(rows));
  std::atomic<bool> nan{false};
  parallel_for(rows, 64, parallel_threads(), [&](int64_t begin, int64_t end, int) {
    uint8_t bad = 0;
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* src = bytes + r * cols;
      uint8_t* dst = out + static_cast<size_t>(r) * row_bytes;
      for (int64_t k = 0; k < nb; ++k, src += 128, dst += 132) {
        const float v = scale_of(r, k);
        std::memcpy(dst, &v, 4);
        std::memcpy(dst + 4, src, 128);
        for (int i = 0; i < 128; ++i) bad |= static_cast<uint8_t>((src[i] & 0x7f) == 0x7f);
      }
    }
    if (bad != 0) nan = true;
  });
  if (nan) throw ModelError("FP8 matrix '" + name + "' in " + where + " holds a NaN");
  TensorView v;
  v.type = DType::FP8;
  v.rows = rows;
  v.cols = cols;
  v.data = out;
  v.row_bytes = row_bytes;
  return v;
}

// A folder's FP8 matrices (quant_method "fp8": transformers' FineGrainedFP8, DeepSeek V3's and
// Qwen3-*-FP8's releases): every F8_E4M3 tensor `X.weight` beside its `X.weight_scale_inv` (f32,
// bf16 or f16; E8M0 where scale_fmt is ue8m0), one scale per weight_block_size block (rows,
// columns; 128 x 128 unless said; null: one per matrix; a scale of one value is taken per matrix
// too), repacked into DType::FP8 rows: each 128 values, their f32 scale then their 128 bytes. The
// weights are the E4M3 values times their scale, rounded to f32 once (transformers'
// dequantization). The activation scales of static schemes are not used (transformers' CPU path
// ignores them too: it dequantizes the weights and multiplies unquantized activations).
void fp8_linear(const Json& q, Builder& b) {
  const std::string where = "'" + q.path + "'";
  const std::string fmt = q.string("fmt", "e4m3");
  if (fmt != "e4m3")
    throw ModelError("quantization_config fmt '" + fmt + "' in " + where +
                     " is not supported (e4m3 is)");
  if (q.string("expert_dtype", "fp8") != "fp8")
    throw ModelError("quantization_config expert_dtype '" + q.string("expert_dtype", "") + "' in " +
                     where + " is not supported (fp8 is)");
  const std::string scale_fmt = q.string("scale_fmt", "float");
  if (scale_fmt != "float" && scale_fmt != "ue8m0")
    throw ModelError("quantization_config scale_fmt '" + scale_fmt + "' in " + where +
                     " is not supported (float and ue8m0 are)");
  int64_t bn = 128, bk = 128;  // (transformers' default; null: one scale per matrix)
  bool per_matrix = false;
  if (const JsonValue* bs = q.v.get("weight_block_size"); bs != nullptr) {
    if (bs->is_null()) {
      per_matrix = true;
    } else if (!bs->is_array() || bs->array.size() != 2 || !bs->array[0].is_integer ||
               !bs->array[1].is_integer || bs->array[0].integer <= 0 || bs->array[1].integer <= 0) {
      throw ModelError("quantization_config weight_block_size in " + where +
                       " must be two positive integers or null");
    } else {
      bn = bs->array[0].integer;
      bk = bs->array[1].integer;
    }
  }
  if (!per_matrix && bk % 128 != 0)
    throw ModelError("quantization_config weight_block_size [" + std::to_string(bn) + ", " +
                     std::to_string(bk) + "] in " + where +
                     " is not supported (blocks of a multiple of 128 columns are)");
  for (auto& [name, raw] : b.raw) {
    if (raw.type_name == "F8_E5M2")
      throw ModelError("tensor '" + name + "' in " + where +
                       " is FP8 E5M2, which is not supported (E4M3 is)");
    if (raw.type_name != "F8_E4M3") continue;
    if (raw.shape.size() != 2)
      throw ModelError("FP8 tensor '" + name + "' in " + where + " has " +
                       std::to_string(raw.shape.size()) + " dimensions (matrices are supported)");
    const std::string scale_name = name + "_scale_inv";
    auto sc = b.raw.find(scale_name);
    if (sc == b.raw.end())
      throw ModelError("missing tensor '" + scale_name + "' in " + where +
                       " (FP8 weights need their scales)");
    const int64_t rows = raw.shape[0], cols = raw.shape[1];
    if (rows <= 0 || cols <= 0 || cols % 128 != 0 || cols > (int64_t{1} << 24) ||
        rows > (int64_t{1} << 26))
      throw ModelError("FP8 matrix '" + name + "' of " + std::to_string(cols) + " columns in " +
                       where + " is not supported (a multiple of 128 is)");
    // The scales as f32, row-major over the block grid.
    const Raw& s = sc->second;
    int64_t n_scales = 1;
    for (int64_t d : s.shape) n_scales *= d;
    const int64_t grid_r = per_matrix ? 1 : (rows + bn - 1) / bn,
                  grid_c = per_matrix ? 1 : (cols + bk - 1) / bk;
    const bool one = n_scales == 1;
    if (!one && (s.shape.size() != 2 || s.shape[0] != grid_r || s.shape[1] != grid_c))
      throw ModelError("tensor '" + scale_name + "' in " + where + " must hold " +
                       std::to_string(grid_r) + " x " + std::to_string(grid_c) +
                       " scales (one per block of " + std::to_string(bn) + " x " +
                       std::to_string(bk) + " of its [" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "] matrix)");
    std::vector<float> scales(static_cast<size_t>(n_scales));
    if (s.type_name == "F8_E8M0" || (s.type_name == "U8" && scale_fmt == "ue8m0")) {
      for (int64_t i = 0; i < n_scales; ++i) {
        const int e = s.bytes[i];
        if (e == 255)
          throw ModelError("tensor '" + scale_name + "' in " + where + " holds an invalid scale");
        scales[static_cast<size_t>(i)] = std::ldexp(1.0f, e - 127);
      }
    } else if (s.supported) {
      for (int64_t r = 0; r < s.view.rows; ++r)
        dequantize_row(s.view, r, scales.data() + r * s.view.cols);
    } else {
      throw ModelError("tensor '" + scale_name + "' in " + where + " has type '" + s.type_name +
                       "' (FP8 scales are F32, BF16, F16 or E8M0)");
    }
    for (float v : scales)
      if (!fp8_scale_ok(v))
        throw ModelError("tensor '" + scale_name + "' in " + where + " holds an invalid scale");
    raw.view = fp8_repack(
        b, raw.bytes, rows, cols,
        [&](int64_t r, int64_t k) {
          return one ? scales[0] : scales[static_cast<size_t>((r / bn) * grid_c + (128 * k) / bk)];
        },
        name, where);
    raw.supported = true;
    raw.type_name = "FP8";
  }
}

// A [rows, cols] matrix of exact integers (rows r0 .. r0 + n - 1 written by fill_rows(r0, n, out),
// n <= k_int_chunk and r0 a multiple of it, row-major; all within [lo, hi]) times scale_of(r, c)
// (one scale per 32 columns at least) as the smallest GGUF block type whose values are exactly
// their products: Q4_0 where [lo, hi] is within -8..7 ((nibble - 8) * d), Q5_0 within -16..15
// ((q5 - 16) * d), Q8_0 within -128..127, d the scale as f16; as F32, each product rounded once as
// the reference computes it, where the values exceed those ranges or a scale is not an f16 number
// (!f16_exact). Rows are filled k_int_chunk at a time per thread (no matrix-sized intermediate; the
// packed formats keep neighbouring rows' values in neighbouring words, which a chunk reads as
// runs).
constexpr int64_t k_int_chunk = 8;  // (64 measured slower: its scattered writes)
TensorView int_blocks(Builder& b, int64_t rows, int64_t cols, int lo, int hi, bool f16_exact,
                      const std::function<void(int64_t, int64_t, int16_t*)>& fill_rows,
                      const std::function<float(int64_t, int64_t)>& scale_of) {
  TensorView v;
  v.rows = rows;
  v.cols = cols;
  const bool blocks = f16_exact && lo >= -128 && hi <= 127 && cols % 32 == 0;
  const DType type = !blocks                 ? DType::F32
                     : lo >= -8 && hi <= 7   ? DType::Q4_0
                     : lo >= -16 && hi <= 15 ? DType::Q5_0
                                             : DType::Q8_0;
  v.type = type;
  v.row_bytes = blocks ? static_cast<size_t>(cols / 32 * dtype_traits(type).block_bytes)
                       : static_cast<size_t>(cols) * 4;
  uint8_t* out = b.alloc(v.row_bytes * static_cast<size_t>(rows));
  v.data = out;
  const int64_t n_chunks = (rows + k_int_chunk - 1) / k_int_chunk;
  parallel_for(n_chunks, 1, parallel_threads(), [&](int64_t begin, int64_t end, int) {
    std::vector<int16_t> chunk(static_cast<size_t>(k_int_chunk * cols));
    for (int64_t r = k_int_chunk * begin; r < std::min(rows, k_int_chunk * end); ++r) {
      if (r % k_int_chunk == 0) fill_rows(r, std::min(k_int_chunk, rows - r), chunk.data());
      const int16_t* row = chunk.data() + (r % k_int_chunk) * cols;
      uint8_t* dst = out + static_cast<size_t>(r) * v.row_bytes;
      if (!blocks) {
        float* o = reinterpret_cast<float*>(dst);
        for (int64_t c = 0; c < cols; ++c) o[c] = static_cast<float>(row[c]) * scale_of(r, c);
        continue;
      }
      const size_t bb = dtype_traits(type).block_bytes;
      for (int64_t k = 0; k < cols / 32; ++k) {
        uint8_t* blk = dst + k * bb;
        const uint16_t d = f32_to_f16(scale_of(r, 32 * k));
        std::memcpy(blk, &d, 2);
        const int16_t* x = row + 32 * k;
        if (type == DType::Q8_0) {
          for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(x[j]));
        } else if (type == DType::Q4_0) {
          for (int j = 0; j < 16; ++j)
            blk[2 + j] = static_cast<uint8_t>((x[j] + 8) | ((x[j + 16] + 8) << 4));
        } else {  // Q5_0: q5 = value + 16, low nibbles as Q4_0's, bit 4 of element j at qh bit j
          uint32_t qh = 0;
          for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(((x[j] + 16) >> 4) & 1) << j;
          std::memcpy(blk + 2, &qh, 4);
          for (int j = 0; j < 16; ++j)
            blk[6 + j] = static_cast<uint8_t>(((x[j] + 16) & 15) | (((x[j + 16] + 16) & 15) << 4));
        }
      }
    }
  });
  return v;
}

// A matrix a quantized folder's packed tensors (`beside`) became, under its float name `target`.
void add_unpacked(Builder& b, const std::string& target, const TensorView& v,
                  const std::string& beside, const std::string& where) {
  Raw out;
  out.type_name = dtype_name(v.type);
  out.supported = true;
  out.n_dims = 2;
  out.shape = {v.rows, v.cols};
  out.view = v;
  if (!b.raw.emplace(target, out).second)
    throw ModelError("tensor '" + target + "' in " + where + " appears beside '" + beside + "'");
}

// compressed-tensors' integer weights without activation quantization (quant_method
// "compressed-tensors", format "pack-quantized": llm-compressor's W4A16 / W8A16 releases, e.g.
// RedHatAI's *-quantized.w4a16): every `X.weight_packed` (int32 words, element c of a row at bit
// c * bits, stored as q + 2^(bits - 1)) with `X.weight_scale` (one per group of columns, per row or
// per matrix), `X.weight_shape` and, asymmetric, `X.weight_zero_point` (packed along the rows). The
// weight is (q - zero) * scale: exactly a GGUF block type's value when the scale is an f16 number
// (bf16 and f16 scales in range are): 4 bits symmetric as Q4_0 ((nibble - 8) * d), 4 bits with zero
// points as Q5_0 (q - zero in -15..15), 8 bits symmetric as Q8_0; so every kernel of those types
// runs them. A scale that is not an f16 number keeps the matrix exact as F32. The bits, grouping
// and symmetry are read off each tensor's shapes (a folder's config groups may differ per module)
// and checked against its config groups.
void compressed_linear(const Json& q, Builder& b) {
  const std::string where = "'" + q.path + "'";
  const std::string format = q.string("format", "");
  const auto refuse = [&](const std::string& what) {
    throw ModelError("quantization_config (compressed-tensors) " + what + " in " + where +
                     " is not supported (pack-quantized integer weights of 4 or 8 bits (W4A16 / "
                     "W8A16), int-quantized 8-bit and float-quantized FP8 weights with or without "
                     "8-bit token or tensor activations (W8A8, FP8) are)");
  };
  const auto known = [](const std::string& f) {
    return f == "pack-quantized" || f == "int-quantized" || f == "naive-quantized" ||
           f == "float-quantized";
  };
  // (mixed-precision: each config group names its own format)
  if (!known(format) && format != "mixed-precision") refuse("format '" + format + "'");
  if (q.string("quantization_status", "compressed") != "compressed")
    refuse("quantization_status '" + q.string("quantization_status", "") + "'");
  if (q.get("transform_config") != nullptr) refuse("transform_config");
  if (const JsonValue* sp = q.get("sparsity_config"); sp != nullptr && sp->is_object()) {
    const JsonValue* f = sp->get("format");
    if (f != nullptr && f->is_string() && f->string != "dense")
      refuse("sparsity format '" + f->string + "'");
  }
  std::vector<int> bits_allowed;
  const JsonValue* groups = q.get("config_groups");
  if (groups == nullptr || !groups->is_object() || groups->object.empty())
    refuse("without config_groups");
  // The activations' quantization, one for every group: none, or 8-bit int / FP8, symmetric, per
  // token (dynamic) or per tensor (static: each matrix's input_scale).
  int act_mode = -1;
  bool act_static = false;
  int64_t fp8_bn = 0, fp8_bk = 0;  // (float-quantized block strategy: block_structure)
  for (const auto& [gname, g] : groups->object) {
    if (!g.is_object()) refuse("config group '" + gname + "'");
    const Json gj{g, q.path};
    const std::string gfmt = gj.string("format", format == "mixed-precision" ? "" : format);
    if (!known(gfmt)) refuse("config group '" + gname + "' format '" + gfmt + "'");
    if (gj.get("output_activations") != nullptr)
      refuse("output_activations quantization (config group '" + gname + "')");
    int mode = k_act_quant_none;
    bool is_static = false;
    if (const JsonValue* a = gj.get("input_activations"); a != nullptr) {
      if (!a->is_object()) refuse("input_activations (config group '" + gname + "')");
      const Json aj{*a, q.path};
      const std::string type = aj.string("type", "int"), strat = aj.string("strategy", "tensor");
      if (aj.integer("num_bits", 0) != 8 || (type != "int" && type != "float"))
        refuse("input_activations of " + std::to_string(aj.integer("num_bits", 0)) + "-bit " +
               type + " (config group '" + gname + "')");
      if (!aj.boolean("symmetric", true)) refuse("asymmetric input_activations");
      const bool dyn = aj.boolean("dynamic", false);
      if (!(dyn && strat == "token") && !(!dyn && strat == "tensor"))
        refuse("input_activations strategy '" + strat + "' (" + (dyn ? "dynamic" : "static") + ")");
      mode = type == "int" ? k_act_quant_int8 : k_act_quant_fp8;
      is_static = !dyn;
      if (gfmt == "pack-quantized")  // (W4A8: transformers cannot load it to check against)
        refuse("pack-quantized weights with input_activations (config group '" + gname + "')");
    }
    if (act_mode >= 0 && (mode != act_mode || is_static != act_static))
      refuse("config groups that quantize activations differently");
    act_mode = mode;
    act_static = is_static;
    const JsonValue* w = gj.get("weights");
    if (w == nullptr || !w->is_object()) refuse("config group '" + gname + "' without weights");
    const Json wj{*w, q.path};
    const std::string wtype = wj.string("type", "int");
    const int64_t nbits = wj.integer("num_bits", 0);
    const std::string strategy = wj.string("strategy", "tensor");
    if (wj.boolean("dynamic", false)) refuse("dynamic weights");
    if (gfmt == "float-quantized") {
      if (wtype != "float" || nbits != 8)
        refuse("float-quantized weights of " + std::to_string(nbits) + "-bit " + wtype);
      if (!wj.boolean("symmetric", true)) refuse("asymmetric FP8 weights");
      if (strategy == "block") {
        const JsonValue* bs = wj.get("block_structure");
        if (bs == nullptr || !bs->is_array() || bs->array.size() != 2 || !bs->array[0].is_integer ||
            !bs->array[1].is_integer || bs->array[0].integer <= 0 || bs->array[1].integer <= 0 ||
            bs->array[1].integer % 128 != 0)
          refuse("weights block_structure (blocks of a multiple of 128 columns are supported)");
        fp8_bn = bs->array[0].integer;
        fp8_bk = bs->array[1].integer;
      } else if (strategy != "channel" && strategy != "tensor") {
        refuse("weights strategy '" + strategy + "'");
      }
      continue;
    }
    if (wtype != "int") refuse("weights type '" + wtype + "'");
    if (gfmt != "pack-quantized" && nbits != 8)
      refuse(gfmt + " weights of " + std::to_string(nbits) + " bits");
    if (nbits != 4 && nbits != 8) refuse("num_bits " + std::to_string(nbits));
    if (strategy != "group" && strategy != "channel" && strategy != "tensor")
      refuse("weights strategy '" + strategy + "'");
    if (nbits == 8 && !wj.boolean("symmetric", true)) refuse("asymmetric 8-bit weights");
    bits_allowed.push_back(static_cast<int>(nbits));
  }
  // A quantized matrix's activation settings (static: its input_scale, one positive number).
  const auto set_act = [&](TensorView& v, const std::string& base) {
    v.act_quant = static_cast<uint8_t>(act_mode);
    if (!act_static || act_mode == k_act_quant_none) return;
    auto it = b.raw.find(base + ".input_scale");
    if (it == b.raw.end())
      throw ModelError("missing tensor '" + base + ".input_scale' in " + where +
                       " (static activation quantization needs each matrix's input scale)");
    const Raw& s = it->second;
    if (!s.supported || s.view.rows * s.view.cols != 1)
      throw ModelError("tensor '" + base + ".input_scale' in " + where + " must hold one number");
    float v_s = 0.0f;
    dequantize_row(s.view, 0, &v_s);
    if (!(v_s > 0.0f) || !std::isfinite(v_s))
      throw ModelError("tensor '" + base + ".input_scale' in " + where + " holds an invalid scale");
    v.act_scale = v_s;
  };
  // Unpacked 8-bit weights (int-quantized / naive-quantized: I8; float-quantized: F8_E4M3) named
  // X.weight beside X.weight_scale (per row, per matrix; FP8 also per block).
  std::vector<std::pair<std::string, Raw>> unpacked;
  for (auto& [name, raw] : b.raw) {
    if ((raw.type_name != "I8" && raw.type_name != "F8_E4M3") || name.size() <= 7 ||
        name.compare(name.size() - 7, 7, ".weight") != 0 || !b.has(name + "_scale"))
      continue;
    const std::string base = name.substr(0, name.size() - 7);
    const bool fp8 = raw.type_name == "F8_E4M3";
    if (raw.shape.size() != 2)
      throw ModelError("tensor '" + name + "' in " + where + " must be a matrix");
    const int64_t rows = raw.shape[0], cols = raw.shape[1];
    if (rows <= 0 || cols <= 0 || cols % (fp8 ? 128 : 32) != 0 || cols > (int64_t{1} << 24))
      throw ModelError("matrix '" + name + "' of " + std::to_string(cols) + " columns in " + where +
                       " is not supported (a multiple of " + (fp8 ? "128" : "32") + " is)");
    const Raw& sc = b.raw.at(name + "_scale");
    if (!sc.supported || sc.shape.empty() || sc.shape.size() > 2)
      throw ModelError("tensor '" + name + "_scale' in " + where +
                       " must be an F32, F16 or BF16 vector or matrix");
    const int64_t s_rows = sc.shape[0], s_cols = sc.shape.size() == 2 ? sc.shape[1] : 1;
    const bool one = s_rows * s_cols == 1;
    const bool per_row = !one && s_rows == rows && s_cols == 1;
    const bool blocks = !one && !per_row && fp8 && fp8_bn > 0 &&
                        s_rows == (rows + fp8_bn - 1) / fp8_bn &&
                        s_cols == (cols + fp8_bk - 1) / fp8_bk;
    if (!one && !per_row && !blocks)
      throw ModelError("tensor '" + name + "_scale' in " + where + " does not fit its matrix [" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "]");
    std::vector<float> scales(static_cast<size_t>(s_rows * s_cols));
    for (int64_t r = 0; r < sc.view.rows; ++r)
      dequantize_row(sc.view, r, scales.data() + r * sc.view.cols);
    bool f16_exact = true;
    for (float s : scales) {
      if (!std::isfinite(s) || (fp8 && !fp8_scale_ok(s)))
        throw ModelError("tensor '" + name + "_scale' in " + where + " holds an invalid scale");
      f16_exact = f16_exact && f16_to_f32(f32_to_f16(s)) == s;
    }
    Raw out;
    out.supported = true;
    out.n_dims = 2;
    out.shape = {rows, cols};
    if (fp8) {
      out.view = fp8_repack(
          b, raw.bytes, rows, cols,
          [&](int64_t r, int64_t k) {
            if (one) return scales[0];
            if (per_row) return scales[static_cast<size_t>(r)];
            return scales[static_cast<size_t>((r / fp8_bn) * s_cols + (128 * k) / fp8_bk)];
          },
          name, where);
    } else {
      const auto* q8 = reinterpret_cast<const int8_t*>(raw.bytes);
      out.view = int_blocks(
          b, rows, cols, -128, 127, f16_exact,
          [&](int64_t r0, int64_t n, int16_t* o) {
            for (int64_t i = 0; i < n * cols; ++i) o[i] = q8[r0 * cols + i];
          },
          [&](int64_t r, int64_t) { return one ? scales[0] : scales[static_cast<size_t>(r)]; });
    }
    out.type_name = dtype_name(out.view.type);
    set_act(out.view, base);
    unpacked.emplace_back(name, out);
  }
  for (auto& [name, out] : unpacked) b.raw[name] = out;
  for (auto& [name, raw] : b.raw) {
    const std::string suffix = ".weight_packed";
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string base = name.substr(0, name.size() - suffix.size());
    const std::string target = base + ".weight";
    const auto need = [&](const std::string& n) -> Raw& {
      auto it = b.raw.find(n);
      if (it == b.raw.end())
        throw ModelError("missing tensor '" + n + "' in " + where + " (beside '" + name + "')");
      return it->second;
    };
    if (raw.type_name != "I32" || raw.shape.size() != 2)
      throw ModelError("tensor '" + name + "' in " + where + " must be a 2-D I32 tensor");
    const Raw& shape_t = need(base + ".weight_shape");
    if ((shape_t.type_name != "I64" && shape_t.type_name != "I32") || shape_t.shape.size() != 1 ||
        shape_t.shape[0] != 2)
      throw ModelError("tensor '" + base + ".weight_shape' in " + where +
                       " must hold two integers");
    int64_t rows = 0, cols = 0;
    if (shape_t.type_name == "I64") {
      std::memcpy(&rows, shape_t.bytes, 8);
      std::memcpy(&cols, shape_t.bytes + 8, 8);
    } else {
      int32_t rc[2];
      std::memcpy(rc, shape_t.bytes, 8);
      rows = rc[0], cols = rc[1];
    }
    const int64_t words = raw.shape[1];
    if (rows != raw.shape[0] || cols <= 0 || cols % 32 != 0 || cols > (int64_t{1} << 24))
      throw ModelError("tensor '" + name + "' in " + where + " does not match its weight_shape [" +
                       std::to_string(rows) + ", " + std::to_string(cols) +
                       "] (columns a multiple of 32 are supported)");
    const int bits = static_cast<int>(words * 32 / cols);
    if (words * 32 != cols * bits || (bits != 4 && bits != 8) ||
        std::find(bits_allowed.begin(), bits_allowed.end(), bits) == bits_allowed.end())
      throw ModelError("tensor '" + name + "' in " + where + " holds " + std::to_string(words) +
                       " words a row for " + std::to_string(cols) +
                       " columns: not a width its config groups give");
    Raw& sc = need(base + ".weight_scale");
    if (!sc.supported || sc.shape.empty() || sc.shape.size() > 2)
      throw ModelError("tensor '" + base + ".weight_scale' in " + where +
                       " must be an F32, F16 or BF16 vector or matrix");
    const int64_t n_groups = sc.shape.size() == 2 ? sc.shape[1] : 1;
    const int64_t s_rows = sc.shape[0];
    const bool per_matrix = s_rows == 1 && n_groups == 1 && rows != 1;
    if (!per_matrix && (s_rows != rows || n_groups <= 0 || cols % n_groups != 0))
      throw ModelError("tensor '" + base + ".weight_scale' in " + where +
                       " does not fit its matrix [" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "]");
    const int64_t group = cols / n_groups;
    if (group % 32 != 0)
      throw ModelError("matrix '" + target + "' in " + where + " has groups of " +
                       std::to_string(group) + " columns (multiples of 32 are supported)");
    if (b.has(base + ".weight_g_idx")) {
      // (activation-ordered groups: column c in group g_idx[c]; contiguous ones only)
      const Raw& gi = b.raw.at(base + ".weight_g_idx");
      if (gi.type_name != "I32" || gi.shape.size() != 1 || gi.shape[0] != cols)
        throw ModelError("tensor '" + base + ".weight_g_idx' in " + where + " is malformed");
      for (int64_t c = 0; c < cols; ++c) {
        int32_t g;
        std::memcpy(&g, gi.bytes + 4 * c, 4);
        if (g != c / group)
          throw ModelError("matrix '" + target + "' in " + where +
                           " has activation-ordered groups (weight_g_idx), which are not "
                           "supported");
      }
    }
    std::vector<float> scales(static_cast<size_t>(per_matrix ? 1 : rows * n_groups));
    for (int64_t r = 0; r < (per_matrix ? 1 : rows); ++r)
      dequantize_row(sc.view, sc.shape.size() == 2 ? r : 0,
                     scales.data() + r * n_groups);  // (a vector: its one row)
    bool f16_exact = true;
    for (float s : scales) {
      if (!std::isfinite(s))
        throw ModelError("tensor '" + base + ".weight_scale' in " + where +
                         " holds an invalid scale");
      f16_exact = f16_exact && f16_to_f32(f32_to_f16(s)) == s;
    }
    const Raw* zp =
        b.has(base + ".weight_zero_point") ? &b.raw.at(base + ".weight_zero_point") : nullptr;
    if (zp != nullptr && bits == 8)
      throw ModelError("matrix '" + target + "' in " + where +
                       " has 8-bit zero points, which are not supported");
    if (zp != nullptr && (zp->type_name != "I32" || zp->shape.size() != 2 ||
                          zp->shape[0] != (rows * bits + 31) / 32 || zp->shape[1] != n_groups))
      throw ModelError("tensor '" + base + ".weight_zero_point' in " + where + " is malformed");
    const uint8_t* packed = raw.bytes;
    const size_t prow = static_cast<size_t>(words) * 4;
    const auto fill_row = [&](int64_t r, int16_t* o) {  // q - zero, exact
      const uint8_t* p = packed + static_cast<size_t>(r) * prow;
      for (int64_t c = 0; c < cols; ++c) {
        int v = bits == 4 ? ((c % 2 != 0 ? p[c / 2] >> 4 : p[c / 2] & 15) - 8) : p[c] - 128;
        if (zp != nullptr) {
          int32_t word;
          std::memcpy(&word, zp->bytes + static_cast<size_t>(((r / 8) * n_groups + c / group) * 4),
                      4);
          v -= static_cast<int>((static_cast<uint32_t>(word) >> (4 * (r % 8))) & 15) - 8;
        }
        o[c] = static_cast<int16_t>(v);
      }
    };
    const auto scale_of = [&](int64_t r, int64_t c) {
      return per_matrix ? scales[0] : scales[static_cast<size_t>(r * n_groups + c / group)];
    };
    const auto fill_rows = [&](int64_t r0, int64_t n, int16_t* o) {
      for (int64_t i = 0; i < n; ++i) fill_row(r0 + i, o + i * cols);
    };
    // (4 bits: -8..7 less a zero point of -8..7; 8 bits: symmetric)
    TensorView v = bits == 8 ? int_blocks(b, rows, cols, -128, 127, f16_exact, fill_rows, scale_of)
                   : zp != nullptr
                       ? int_blocks(b, rows, cols, -15, 15, f16_exact, fill_rows, scale_of)
                       : int_blocks(b, rows, cols, -8, 7, f16_exact, fill_rows, scale_of);
    set_act(v, base);
    add_unpacked(b, target, v, name, where);
  }
}

// GPTQ, AWQ and AutoRound folders (quant_method "gptq": AutoGPTQ's and GPTQModel's releases, e.g.
// Qwen's *-GPTQ-Int4 / -Int8; "awq": AutoAWQ's, e.g. Qwen's *-AWQ; "auto-round": Intel's AutoRound,
// which packs as one of the two). Every quantized `X` is `X.qweight` (int32 words), `X.scales` (one
// per group of columns and row) and `X.qzeros` (packed zero points), with GPTQ's `X.g_idx`:
// - GPTQ: qweight [cols * bits / 32, rows], column c of row r at bits (c % (32 / bits)) * bits of
//   word (c / (32 / bits), r); qzeros [groups, rows * bits / 32] packed the same way along the
//   rows, stored as zero - 1 (checkpoint_format "gptq", AutoGPTQ's) or as zero ("gptq_v2",
//   GPTQModel's; AutoRound's "auto_round" packing); 2, 4 or 8 bits.
// - AWQ (version "gemm"): qweight [cols, rows / 8] and qzeros [groups, rows / 8], 4 bits, the eight
//   rows of a word in nibbles 0 2 4 6 1 3 5 7 (row 8w + i in nibble AWQ_REVERSE[i]).
// The weight is (q - zero) * scale, scale = scales[c / group, r]; stored by int_blocks as the
// smallest GGUF block type holding q - zero (4-bit symmetric: Q4_0; with zero points: Q5_0; 8-bit:
// Q8_0; 2-bit: Q4_0), each weight exact. The bits and groups are read off each matrix's shapes.
// Activation-ordered groups (desc_act: g_idx not c / group) are stored sorted by group, the input
// gathered to match (TensorView::in_perm).
void gptq_linear(const Json& q, Builder& b, const std::string& method) {
  const std::string where = "'" + q.path + "'";
  const auto refuse = [&](const std::string& what) {
    throw ModelError("quantization_config (" + method + ") " + what + " in " + where +
                     " is not supported (GPTQ's 2-, 4- and 8-bit integer weights, AWQ's 4-bit GEMM "
                     "ones and AutoRound's in either packing are)");
  };
  bool awq = method == "awq";
  int zero_offset = 0;  // (GPTQ's v1 checkpoints store zero - 1)
  if (method == "gptq") {
    std::string fmt = q.string("checkpoint_format", "");
    if (fmt.empty()) fmt = q.string("format", "gptq");
    if (fmt != "gptq" && fmt != "gptq_v2") refuse("checkpoint_format '" + fmt + "'");
    zero_offset = fmt == "gptq" ? 1 : 0;
  } else if (method == "awq") {
    std::string version = q.string("version", "gemm");
    std::transform(version.begin(), version.end(), version.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    // (exllama and ipex name kernels that read GEMM's checkpoints)
    if (version != "gemm" && version != "exllama" && version != "ipex")
      refuse("version '" + version + "'");
  } else {  // AutoRound
    const std::string pf = q.string("packing_format", "auto_round:auto_gptq");
    if (pf == "auto_round:auto_awq" || pf == "auto_round:awq")
      awq = true;
    else if (pf == "auto_round:auto_gptq" || pf == "auto_round:gptq" || pf == "auto")
      zero_offset = 1;
    else if (pf != "auto_round" && pf != "auto_round:gptqmodel")
      refuse("packing_format '" + pf + "'");
    const std::string dt = q.string("data_type", "int");
    if (dt != "int") refuse("data_type '" + dt + "'");
    if (q.integer("act_bits", 16) < 16)
      refuse("act_bits " + std::to_string(q.integer("act_bits", 16)));
  }
  const auto i32_matrix = [&](const std::string& n) -> const Raw& {
    auto it = b.raw.find(n);
    if (it == b.raw.end()) throw ModelError("missing tensor '" + n + "' in " + where);
    if (it->second.type_name != "I32" || it->second.shape.size() != 2)
      throw ModelError("tensor '" + n + "' in " + where + " must be a 2-D I32 tensor");
    return it->second;
  };
  const auto word = [](const Raw& t, int64_t i) {
    uint32_t w;
    std::memcpy(&w, t.bytes + 4 * static_cast<size_t>(i), 4);
    return w;
  };
  static constexpr int k_awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  std::vector<int16_t> zeros;
  // (act-order column orders with their lengths, shared between matrices of the same order)
  std::vector<std::pair<int64_t, const int32_t*>> perms;
  std::vector<std::string> names;
  for (const auto& [name, raw] : b.raw)
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".qweight") == 0) names.push_back(name);
  for (const std::string& name : names) {
    const std::string base = name.substr(0, name.size() - 8), target = base + ".weight";
    const Raw& qw = i32_matrix(name);
    const Raw& qz = i32_matrix(base + ".qzeros");
    auto sc_it = b.raw.find(base + ".scales");
    if (sc_it == b.raw.end())
      throw ModelError("missing tensor '" + base + ".scales' in " + where + " (beside '" + name +
                       "')");
    const Raw& sc = sc_it->second;
    if (!sc.supported || sc.shape.size() != 2)
      throw ModelError("tensor '" + base + ".scales' in " + where +
                       " must be an F16, BF16 or F32 matrix");
    const int64_t n_groups = sc.shape[0], rows = sc.shape[1];
    // The bits from the words a row of zero points takes (GPTQ) or a column of weights (AWQ).
    const int64_t packed_rows = awq ? qw.shape[1] : qz.shape[1];
    const int bits =
        rows > 0 && (packed_rows * 32) % rows == 0 ? static_cast<int>(packed_rows * 32 / rows) : 0;
    if ((bits != 2 && bits != 4 && bits != 8) || (awq && bits != 4))
      throw ModelError("matrix '" + target + "' in " + where + " of " + std::to_string(rows) +
                       " rows packs them into " + std::to_string(packed_rows) +
                       " words: not 2, 4 or 8 bits (" + (awq ? "AWQ: 4" : "GPTQ: 2, 4 or 8") +
                       " are supported)");
    const int per = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t cols = awq ? qw.shape[0] : qw.shape[0] * per;
    if (n_groups <= 0 || cols <= 0 || cols % n_groups != 0 || cols > (int64_t{1} << 24) ||
        (awq ? qw.shape[1] * per != rows : qw.shape[1] != rows) || qz.shape[0] != n_groups ||
        qz.shape[1] * per != rows)
      throw ModelError("tensors '" + base + ".qweight', '.qzeros' and '.scales' in " + where +
                       " do not fit together");
    const int64_t group = cols / n_groups;
    if (cols % 32 != 0)
      throw ModelError("matrix '" + target + "' of " + std::to_string(cols) + " columns in " +
                       where + " is not supported (a multiple of 32 is)");
    // Act-order (desc_act): column c in group g_idx[c], not c / group. The matrix is stored with
    // its columns ordered by group (a stable sort: perm[j] the input column of stored column j),
    // its input gathered so at each product (TensorView::in_perm).
    std::vector<int32_t> perm, col_group;  // (empty: contiguous groups)
    if (auto gi = b.raw.find(base + ".g_idx"); !awq && gi != b.raw.end()) {
      if (gi->second.type_name != "I32" || gi->second.shape.size() != 1 ||
          gi->second.shape[0] != cols)
        throw ModelError("tensor '" + base + ".g_idx' in " + where + " is malformed");
      bool trivial = true;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t g = static_cast<int32_t>(word(gi->second, c));
        if (g < 0 || g >= n_groups)
          throw ModelError("tensor '" + base + ".g_idx' in " + where + " holds group " +
                           std::to_string(g) + " of " + std::to_string(n_groups));
        trivial = trivial && g == c / group;
      }
      if (!trivial) {
        perm.resize(static_cast<size_t>(cols));
        for (int64_t c = 0; c < cols; ++c) perm[static_cast<size_t>(c)] = static_cast<int32_t>(c);
        std::stable_sort(perm.begin(), perm.end(), [&](int32_t x, int32_t y) {
          return static_cast<int32_t>(word(gi->second, x)) <
                 static_cast<int32_t>(word(gi->second, y));
        });
        col_group.resize(static_cast<size_t>(cols));
        for (int64_t j = 0; j < cols; ++j)
          col_group[static_cast<size_t>(j)] =
              static_cast<int32_t>(word(gi->second, perm[static_cast<size_t>(j)]));
      }
    }
    std::vector<float> scales(static_cast<size_t>(n_groups * rows));
    for (int64_t g = 0; g < n_groups; ++g) dequantize_row(sc.view, g, scales.data() + g * rows);
    bool f16_exact = group % 32 == 0;
    for (int64_t j = 0; j < static_cast<int64_t>(col_group.size()) && f16_exact; ++j)
      f16_exact = col_group[static_cast<size_t>(j)] == col_group[static_cast<size_t>(j - j % 32)];
    for (float s : scales) {
      if (!std::isfinite(s))
        throw ModelError("tensor '" + base + ".scales' in " + where + " holds an invalid scale");
      f16_exact = f16_exact && f16_to_f32(f32_to_f16(s)) == s;
    }
    // The zero points unpacked ([groups, rows]); a row's q - zero from the words in place.
    zeros.resize(static_cast<size_t>(n_groups * rows));
    int z_lo = 1 << 30, z_hi = -(1 << 30);
    for (int64_t g = 0; g < n_groups; ++g)
      for (int64_t r = 0; r < rows; ++r) {
        const int shift = bits * (awq ? k_awq_nibble[r % 8] : static_cast<int>(r % per));
        const int z =
            static_cast<int>((word(qz, g * qz.shape[1] + r / per) >> shift) & mask) + zero_offset;
        zeros[static_cast<size_t>(g * rows + r)] = static_cast<int16_t>(z);
        z_lo = std::min(z_lo, z);
        z_hi = std::max(z_hi, z);
      }
    const int64_t qw_cols = qw.shape[1];
    // Rows r0 .. r0 + n - 1 (n <= k_int_chunk, r0 a multiple of it; AWQ: rows % 8 == 0): their
    // words are neighbours in both layouts.
    const auto fill_rows = [&](int64_t r0, int64_t n, int16_t* o) {
      const int16_t* zr = zeros.data() + r0;  // (zr[g * rows + i]: row r0 + i's zero in group g)
      if (awq) {  // qweight [cols, rows / 8]: word (c, r / 8) holds rows r .. r + 7 of column c
        const uint8_t* col0 = qw.bytes + 4 * static_cast<size_t>(r0 / 8);
        for (int64_t c = 0; c < cols; ++c) {
          const int16_t* z = zr + (c / group) * rows;
          for (int64_t w8 = 0; w8 < n / 8; ++w8) {
            uint32_t w;
            std::memcpy(&w, col0 + 4 * static_cast<size_t>(c * qw_cols + w8), 4);
            for (int i = 0; i < 8; ++i)
              o[(8 * w8 + i) * cols + c] = static_cast<int16_t>(
                  static_cast<int>((w >> (4 * k_awq_nibble[i])) & 15) - z[8 * w8 + i]);
          }
        }
        return;
      }
      // GPTQ: qweight [cols / per, rows]: word (p, r) holds columns p * per .. of row r
      const auto unpack = [&](auto bits_c) {
        constexpr int kb = decltype(bits_c)::value, kper = 32 / kb;
        constexpr uint32_t kmask = (1u << kb) - 1;
        uint32_t w[k_int_chunk];
        const auto load = [&](int64_t p) {
          const uint8_t* src = qw.bytes + 4 * static_cast<size_t>(p * rows + r0);
          if (n == k_int_chunk)  // (a constant size: an inlined copy)
            std::memcpy(w, src, 4 * k_int_chunk);
          else
            std::memcpy(w, src, 4 * static_cast<size_t>(n));
        };
        if (!perm.empty() || group % kper != 0) {  // (act-order, or groups splitting a word)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t c = perm.empty() ? j : perm[static_cast<size_t>(j)];
            const int64_t g = perm.empty() ? j / group : col_group[static_cast<size_t>(j)];
            load(c / kper);
            for (int64_t i = 0; i < n; ++i)
              o[i * cols + j] = static_cast<int16_t>(
                  static_cast<int>((w[i] >> (kb * (c % kper))) & kmask) - zr[g * rows + i]);
          }
          return;
        }
        for (int64_t p = 0; p < cols / kper; ++p) {
          load(p);
          const int16_t* z = zr + ((p * kper) / group) * rows;
          for (int64_t i = 0; i < n; ++i)
            for (int j = 0; j < kper; ++j)
              o[i * cols + p * kper + j] =
                  static_cast<int16_t>(static_cast<int>((w[i] >> (kb * j)) & kmask) - z[i]);
        }
      };
      if (bits == 2) unpack(std::integral_constant<int, 2>{});
      if (bits == 4) unpack(std::integral_constant<int, 4>{});
      if (bits == 8) unpack(std::integral_constant<int, 8>{});
    };
    TensorView v = int_blocks(b, rows, cols, -z_hi, static_cast<int>(mask) - z_lo, f16_exact,
                              fill_rows, [&](int64_t r, int64_t c) {
                                const int64_t g =
                                    perm.empty() ? c / group : col_group[static_cast<size_t>(c)];
                                return scales[static_cast<size_t>(g * rows + r)];
                              });
    if (!perm.empty()) {  // (one array for every matrix of the same order: q / k / v, gate / up)
      const int32_t* shared = nullptr;
      for (const auto& [n, s] : perms)
        if (n == cols && std::equal(perm.begin(), perm.end(), s)) shared = s;
      if (shared == nullptr) {
        auto* buf = reinterpret_cast<int32_t*>(b.alloc(static_cast<size_t>(cols) * 4));
        std::copy(perm.begin(), perm.end(), buf);
        shared = buf;
        perms.emplace_back(cols, shared);
      }
      v.in_perm = shared;
    }
    add_unpacked(b, target, v, name, where);
  }
}

// A folder's quantization_config: gpt-oss's MXFP4 experts pass (moe_loader), FP8 (fp8_linear),
// compressed-tensors' (compressed_linear), GPTQ / AWQ / AutoRound (gptq_linear) and BitNet run, any
// other method is refused by name.
// BitNet b1.58 checkpoints (quant_method "bitnet": transformers' BitLinear, offline, packed): every
// matrix stored as uint8 [rows / 4, cols] holding four ternary values per byte along the rows (bits
// 2i..2i+1 of packed row p: row i * rows / 4 + p, stored as w + 1), beside its weight_scale;
// repacked into DType::BITNET rows (kernels/matmul_bitnet.cpp) with that scale. The float matrices
// (the embeddings, lm_head) stay as they are.
void bitnet_linear(const Json& cfg, Builder& b) {
  const JsonValue* qc = cfg.get("quantization_config");
  if (qc == nullptr || !qc->is_object()) return;
  const Json q{*qc, cfg.path};
  const std::string method = q.string("quant_method", "");
  const std::string where = "'" + cfg.path + "'";
  if (method == "mxfp4") return;  // (gpt-oss's experts: moe_loader reads their blocks)
  if (method == "fp8") return fp8_linear(q, b);
  if (method == "compressed-tensors") return compressed_linear(q, b);
  if (method == "gptq" || method == "awq" || method == "auto-round" || method == "intel/auto-round")
    return gptq_linear(q, b, method);
  if (method != "bitnet")  // (bitsandbytes, HQQ, EETQ, ...)
    throw ModelError(
        "quantization_config quant_method '" + method + "' in " + where +
        " is not supported (a folder of float weights is, as are FP8 (fp8), "
        "compressed-tensors' W4A16 / W8A16 / W8A8, GPTQ, AWQ, AutoRound, gpt-oss's MXFP4 "
        "and BitNet's packed ones; other quantized models run from their GGUF files)");
  // (transformers' BitLinear divides a product by weight_scale; its AutoBitLinear, offline,
  // multiplies it: TensorView::scale_mul)
  const std::string linear_class = q.string("linear_class", "bitlinear");
  if (linear_class != "bitlinear" && linear_class != "autobitlinear")
    throw ModelError("quantization_config linear_class '" + linear_class + "' in " + where +
                     " is not supported (bitlinear and autobitlinear are)");
  if (q.string("quantization_mode", "offline") != "offline")
    throw ModelError("quantization_config quantization_mode '" + q.string("quantization_mode", "") +
                     "' in " + where + " is not supported (offline is)");
  if (q.boolean("use_rms_norm", false))
    throw ModelError("quantization_config use_rms_norm=true in " + where + " is not supported");
  for (auto& [name, raw] : b.raw) {
    if (raw.type_name != "U8" && raw.supported && b.has(name + "_scale"))
      throw ModelError("BitNet matrix '" + name + "' in " + where +
                       " is stored unpacked (as floats): only packed (uint8) ones are supported");
    if (raw.type_name != "U8" || raw.shape.size() != 2 || name.size() < 7 ||
        name.compare(name.size() - 7, 7, ".weight") != 0)
      continue;
    const std::string scale_name = name + "_scale";
    auto sc = b.raw.find(scale_name);
    if (sc == b.raw.end())
      throw ModelError("missing tensor '" + scale_name + "' in " + where +
                       " (BitNet's packed weights need their scale)");
    if (!sc->second.supported || sc->second.view.rows * sc->second.view.cols != 1)
      throw ModelError("tensor '" + scale_name + "' in " + where + " must hold one number");
    float scale = 0.0f;
    dequantize_row(sc->second.view, 0, &scale);
    if (!(scale > 0.0f) || !std::isfinite(scale))
      throw ModelError("tensor '" + scale_name + "' in " + where + " holds an invalid scale");
    const int64_t packed_rows = raw.shape[0], cols = raw.shape[1], rows = 4 * packed_rows;
    if (cols % 64 != 0 || packed_rows <= 0 || cols > (int64_t{1} << 24) ||
        packed_rows > (int64_t{1} << 24))
      throw ModelError("BitNet matrix '" + name + "' of " + std::to_string(cols) + " columns in " +
                       where + " is not supported (a multiple of 64 is)");
    const size_t n_bytes = static_cast<size_t>(packed_rows * cols);
    uint8_t invalid = 0;  // (a code of 3: both bits of a value set)
    for (size_t i = 0; i < n_bytes; ++i) invalid |= raw.bytes[i] & (raw.bytes[i] >> 1) & 0x55;
    if (invalid != 0)
      throw ModelError("BitNet matrix '" + name + "' in " + where +
                       " holds a value outside -1, 0, 1");
    // The codes (w + 1 in both layouts) moved two bits at a time: row r's value k from bits 2 (r /
    // packed_rows) of byte k of packed row r % packed_rows (into bitnet_byte's order).
    uint8_t* out = b.alloc(static_cast<size_t>(rows * cols / 4));
    const uint8_t* bytes = raw.bytes;
    parallel_for(rows, 16, parallel_threads(), [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r) {
        const uint8_t* src = bytes + (r % packed_rows) * cols;
        const int shift = static_cast<int>(2 * (r / packed_rows));
        for (int64_t blk = 0; blk < cols / 64; ++blk)
          for (int i = 0; i < 16; ++i) {
            const uint8_t* s = src + 64 * blk + i;
            out[bitnet_byte(r, 64 * blk + i, cols)] =
                static_cast<uint8_t>(((s[0] >> shift) & 3) | (((s[16] >> shift) & 3) << 2) |
                                     (((s[32] >> shift) & 3) << 4) | (((s[48] >> shift) & 3) << 6));
          }
      }
    });
    raw.supported = true;
    raw.type_name = "BITNET";
    raw.n_dims = 2;
    raw.shape = {rows, cols};
    raw.view = TensorView{};
    raw.view.type = DType::BITNET;
    raw.view.rows = rows;
    raw.view.cols = cols;
    raw.view.data = out;
    raw.view.row_bytes = static_cast<size_t>(cols / 4);
    raw.view.scale = scale;
    raw.view.scale_mul = linear_class == "autobitlinear";
  }
}

// OPT's learned positions start at row 2 (its embedding offsets every position by 2): the table
// viewed from there, max_position_embeddings rows.
void opt_positions(Builder& b) {
  auto it = b.raw.find("model.embed_positions.weight");
  if (it == b.raw.end() || !it->second.supported || it->second.n_dims != 2 ||
      it->second.view.rows < 2)
    return;  // (build_weights names what is missing or misshapen)
  TensorView& v = it->second.view;
  v.data += 2 * v.row_bytes;
  v.rows -= 2;
  it->second.shape[0] -= 2;
}

// nanochat (NanoChatForCausalLM): its RMSNorms have no weights (ones here: the layers', the final
// one, the embeddings' and q / k's per head), its MLP is fc1 / fc2 (up / down), and its RoPE turns
// the other way (rotate_half as (x2, -x1)): the same scores as the usual rotation of q and k with
// each head's second half negated, which the q / k norms (weightless, after RoPE in nanochat,
// before it here: the same, a rotation keeps the norm) leave alone; so q_proj's and k_proj's rows
// of each head's second half are negated (exactly: their sign bits) at load.
void nanochat_weights(Builder& b, const ModelConfig& c, const std::string& cfg_path) {
  b.add_unit_norms(hf_name, c.n_layer, "model.norm.weight", c.n_embd);
  std::fill_n(b.add_f32("model.embed_tokens_norm.weight", 1, c.n_embd), c.n_embd, 1.0f);
  for (int i = 0; i < c.n_layer; ++i) {
    for (const char* f : {"q_norm", "k_norm"})
      if (!b.has(hf_name(i, f)))
        std::fill_n(b.add_f32(hf_name(i, f), 1, c.head_dim), c.head_dim, 1.0f);
    const std::string p = "model.layers." + std::to_string(i) + ".mlp.";
    for (auto [from, to] : {std::pair{"fc1", "up_proj"}, {"fc2", "down_proj"}}) {
      auto it = b.raw.find(p + from + ".weight");
      if (it != b.raw.end() && !b.has(p + to + ".weight")) {
        b.raw[p + to + ".weight"] = it->second;
        b.raw.erase(it);
      }
    }
    for (auto [f, heads] : {std::pair{"wq", c.n_head}, {"wk", c.n_head_kv}}) {
      auto it = b.raw.find(hf_name(i, f));
      if (it == b.raw.end()) continue;  // (build_weights names what is missing)
      Raw& r = it->second;
      const TensorView& v = r.view;
      if (!r.supported || (v.type != DType::F32 && v.type != DType::F16 && v.type != DType::BF16) ||
          v.rows != int64_t{heads} * c.head_dim || c.head_dim % 2 != 0)
        throw ModelError(
            "tensor '" + hf_name(i, f) + "' in '" + cfg_path +
            "' must be an F32, F16 or BF16 matrix of heads x head_dim rows (nanochat)");
      uint8_t* out = b.alloc(v.nbytes());
      std::memcpy(out, v.data, v.nbytes());
      const size_t es = v.type == DType::F32 ? 4 : 2;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = c.head_dim / 2; d < c.head_dim; ++d) {
          uint8_t* row = out + static_cast<size_t>(h * c.head_dim + d) * v.row_bytes;
          for (int64_t k = 0; k < v.cols; ++k) row[static_cast<size_t>(k) * es + es - 1] ^= 0x80;
        }
      r.view.data = out;
    }
  }
}

// Families whose folders hold Llama's tensors under other names, read under Llama's: Phi-2,
// StarCoder2, Hunyuan, Apertus, GPT-NeoX, Falcon and GPT-J (name parts; GPT-J's config keys too,
// GPT-NeoX's and Falcon's fused q / k / v regrouped), StableLM (per-head q / k norms stacked),
// EXAONE 3 / 3.5 as released (GPT-2-style names and its config's keys, as transformers reads it
// into LlamaForCausalLM).
bool family_names(JsonValue& cfg, Builder& b) {
  const JsonValue* type = cfg.get("model_type");
  // Name parts of families whose tensors are Llama's under other names (each replaced where
  // found, in order).
  static const std::map<std::string, std::vector<std::pair<std::string, std::string>>> k_parts = {
      {"gpt_neox",  // (Pythia, GPT-NeoX-20B; its query_key_value regrouped below)
       {{"gpt_neox.layers.", "model.layers."},
        {".attention.query_key_value.", ".self_attn.qkv_proj."},
        {".attention.dense.", ".self_attn.o_proj."},
        {".mlp.dense_h_to_4h.", ".mlp.up_proj."},
        {".mlp.dense_4h_to_h.", ".mlp.down_proj."},
        {"gpt_neox.embed_in.", "model.embed_tokens."},
        {"gpt_neox.final_layer_norm.", "model.norm."},
        {"embed_out.", "lm_head."}}},
      {"falcon",  // (40B's ln_attn / ln_mlp as the two norms; query_key_value regrouped below)
       {{"transformer.h.", "model.layers."},
        {".self_attention.query_key_value.", ".self_attn.qkv_proj."},
        {".self_attention.dense.", ".self_attn.o_proj."},
        {".mlp.dense_h_to_4h.", ".mlp.up_proj."},
        {".mlp.dense_4h_to_h.", ".mlp.down_proj."},
        {".ln_attn.", ".input_layernorm."},
        {".ln_mlp.", ".post_attention_layernorm."},
        {"transformer.word_embeddings.", "model.embed_tokens."},
        {"transformer.ln_f.", "model.norm."}}},
      {"gptj",  // (transformer.h.N.ln_1, attn.*_proj / out_proj, mlp.fc_in / fc_out)
       {{"transformer.h.", "model.layers."},
        {".ln_1.", ".input_layernorm."},
        {".attn.out_proj.", ".self_attn.o_proj."},
        {".attn.", ".self_attn."},
        {".mlp.fc_in.", ".mlp.up_proj."},
        {".mlp.fc_out.", ".mlp.down_proj."},
        {"transformer.wte.", "model.embed_tokens."},
        {"transformer.ln_f.", "model.norm."}}},
      {"bloom",  // (its query_key_value per head, regrouped below)
       {{"transformer.h.", "model.layers."},
        {".self_attention.query_key_value.", ".self_attn.qkv_proj."},
        {".self_attention.dense.", ".self_attn.o_proj."},
        {".mlp.dense_h_to_4h.", ".mlp.up_proj."},
        {".mlp.dense_4h_to_h.", ".mlp.down_proj."},
        {"transformer.word_embeddings_layernorm.", "model.embed_tokens_norm."},
        {"transformer.word_embeddings.", "model.embed_tokens."},
        {"transformer.ln_f.", "model.norm."}}},
      {"mpt",  // (Wqkv already [q | k | v])
       {{"transformer.blocks.", "model.layers."},
        {".norm_1.", ".input_layernorm."},
        {".norm_2.", ".post_attention_layernorm."},
        {".attn.Wqkv.", ".self_attn.qkv_proj."},
        {".attn.out_proj.", ".self_attn.o_proj."},
        {".ffn.up_proj.", ".mlp.up_proj."},
        {".ffn.down_proj.", ".mlp.down_proj."},
        {"transformer.wte.", "model.embed_tokens."},
        {"transformer.norm_f.", "model.norm."}}},
      // (GPT-2's and GPT-BigCode's: GPT-2's Conv1D weights transposed below, GPT-BigCode's c_attn
      // per head unless multi-query; older GPT-2 files without the transformer. prefix; their
      // attn.bias / masked_bias causal masks are buffers, not weights: left out)
      {"gpt2",
       {{"transformer.h.", "model.layers."},
        {".ln_1.", ".input_layernorm."},
        {".ln_2.", ".post_attention_layernorm."},
        {".attn.c_attn.", ".self_attn.qkv_proj."},
        {".attn.c_proj.", ".self_attn.o_proj."},
        {".mlp.c_fc.", ".mlp.up_proj."},
        {".mlp.c_proj.", ".mlp.down_proj."},
        {"transformer.wte.", "model.embed_tokens."},
        {"transformer.wpe.", "model.embed_positions."},
        {"transformer.ln_f.", "model.norm."}}},
      {"opt",  // (older uploads without the model. prefix read as with it; OPT-350m's project_in /
               // project_out are refused by gpt_classic_config_hf)
       {{"model.decoder.", "decoder."},
        {"decoder.layers.", "model.layers."},
        {"decoder.final_layer_norm.", "model.norm."},
        {"decoder.embed_tokens.", "model.embed_tokens."},
        {"decoder.embed_positions.", "model.embed_positions."},
        {".self_attn_layer_norm.", ".input_layernorm."},
        {".final_layer_norm.", ".post_attention_layernorm."},
        {".self_attn.out_proj.", ".self_attn.o_proj."},
        {".fc1.", ".mlp.up_proj."},
        {".fc2.", ".mlp.down_proj."}}},
      {"gpt_neo",  // (nn.Linear weights, no transpose; the old files' attention mask buffers
                   // unused)
       {{"transformer.h.", "model.layers."},
        {".ln_1.", ".input_layernorm."},
        {".ln_2.", ".post_attention_layernorm."},
        {".attn.attention.out_proj.", ".self_attn.o_proj."},
        {".attn.attention.", ".self_attn."},
        {".mlp.c_fc.", ".mlp.up_proj."},
        {".mlp.c_proj.", ".mlp.down_proj."},
        {"transformer.wte.", "model.embed_tokens."},
        {"transformer.wpe.", "model.embed_positions."},
        {"transformer.ln_f.", "model.norm."}}},
      {"phi",  // (Phi-2: dense / fc1 / fc2 / final_layernorm)
       {{".self_attn.dense.", ".self_attn.o_proj."},
        {".mlp.fc1.", ".mlp.up_proj."},
        {".mlp.fc2.", ".mlp.down_proj."},
        {"model.final_layernorm.", "model.norm."}}},
      {"starcoder2", {{".mlp.c_fc.", ".mlp.up_proj."}, {".mlp.c_proj.", ".mlp.down_proj."}}},
      {"hunyuan_v1_dense",  // (its q / k norms)
       {{".self_attn.query_layernorm.", ".self_attn.q_norm."},
        {".self_attn.key_layernorm.", ".self_attn.k_norm."}}},
      {"apertus",  // (its norms' names)
       {{".attention_layernorm.", ".input_layernorm."},
        {".feedforward_layernorm.", ".post_attention_layernorm."}}},
      {"dbrx",  // (its experts' stacks keep their names: moe_loader's dbrx branch)
       {{"transformer.blocks.", "model.layers."},
        {".norm_attn_norm.norm_1.", ".input_layernorm."},
        {".norm_attn_norm.norm_2.", ".post_attention_layernorm."},
        {".norm_attn_norm.attn.Wqkv.", ".self_attn.qkv_proj."},
        {".norm_attn_norm.attn.out_proj.", ".self_attn.o_proj."},
        {".ffn.router.layer.", ".mlp.gate."},
        {".ffn.experts.mlp.", ".mlp.experts."},
        {"transformer.wte.", "model.embed_tokens."},
        {"transformer.norm_f.", "model.norm."}}},
      {"afmoe",  // (its four norms under GLM-4's names; the router and its bias as DeepSeek V3's)
       {{".post_attention_layernorm.", ".post_self_attn_layernorm."},
        {".pre_mlp_layernorm.", ".post_attention_layernorm."},
        {".mlp.router.gate.", ".mlp.gate."},
        {".mlp.expert_bias", ".mlp.gate.e_score_correction_bias"}}},
      {"param2moe",  // (Param2-MoE: GLM-4.5's model; q / k / v fused as [q | k | v] rows)
       {{"model.word_embeddings.", "model.embed_tokens."},
        {".attention.query_key_value.", ".self_attn.qkv_proj."},
        {".attention.dense.", ".self_attn.o_proj."},
        {".attention.query_layernorm.", ".self_attn.q_norm."},
        {".attention.key_layernorm.", ".self_attn.k_norm."},
        {".mlp.gate.expert_bias", ".mlp.gate.e_score_correction_bias"}}},
      {"nemotron-nas",
       {{".self_attn.linear_attn.", ".self_attn.o_proj."}}},  // (deci's linear layers)
      {"internlm2",  // (InternLM2 / 2.5: wqkv per KV group, regrouped below)
       {{"model.tok_embeddings.", "model.embed_tokens."},
        {".attention.wqkv.", ".self_attn.qkv_proj."},
        {".attention.wo.", ".self_attn.o_proj."},
        {".feed_forward.w1.", ".mlp.gate_proj."},
        {".feed_forward.w3.", ".mlp.up_proj."},
        {".feed_forward.w2.", ".mlp.down_proj."},
        {".attention_norm.", ".input_layernorm."},
        {".ffn_norm.", ".post_attention_layernorm."}}},
      {"hunyuan_v1_moe",  // (and its router, gate.wg, and the ungated shared MLP, shared_mlp)
       {{".self_attn.query_layernorm.", ".self_attn.q_norm."},
        {".self_attn.key_layernorm.", ".self_attn.k_norm."},
        {".mlp.gate.wg.", ".mlp.gate."},
        {".mlp.shared_mlp.", ".mlp.shared_experts."}}}};
  // (a copy: the keys below grow cfg; GPT-BigCode's tensor names are GPT-2's, CodeGen's GPT-J's)
  const std::string t = type != nullptr && type->is_string() ? type->string : "";
  const std::string parts = t == "gpt_bigcode" ? "gpt2"
                            : t == "codegen"   ? "gptj"
                            : t == "sarvam_moe" || t == "bailing_moe"
                                ? "param2moe"  // (Sarvam-MoE's, Ling 2.0's: Param2-MoE's names)
                                : t;
  if (k_parts.count(parts) != 0) {
    rename_tensors(b, [&](std::string name) {
      for (const auto& [part, with] : k_parts.at(parts))
        if (const size_t at = name.find(part); at != std::string::npos)
          name.replace(at, part.size(), with);
      return name;
    });
    if (t == "gptj" || t == "bloom" || t == "mpt" || t == "gpt2" || t == "gpt_bigcode" ||
        t == "dbrx" || t == "opt" || t == "gpt_neo" || t == "codegen")
      gpt_classic_keys(cfg);
    if (t == "codegen") codegen_qkv(cfg, b);
    if (t == "opt") opt_positions(b);
    if (t == "gpt_neox" || t == "falcon") neox_falcon_qkv(cfg, b, t == "falcon");
    if (t == "bloom" || t == "gpt_bigcode") bloom_bigcode_qkv(cfg, b);
    if (t == "gpt2") gpt2_transpose(b);
    if (t == "internlm2") internlm2_qkv(cfg, b);
    return true;
  }
  if (type != nullptr && type->is_string() && type->string == "stablelm") {
    // (StableLM's per-head q / k LayerNorms, norms.<h>.weight: stacked into one [heads, head_dim]
    // F32 tensor, the layout GGUF files hold)
    std::map<std::string, std::vector<std::pair<int64_t, const Raw*>>> stacks;
    for (const auto& [name, raw] : b.raw)
      for (const char* part : {"self_attn.q_layernorm.norms.", "self_attn.k_layernorm.norms."})
        if (const size_t at = name.find(part); at != std::string::npos) {
          const std::string rest = name.substr(at + std::string(part).size());
          const size_t dot = rest.find('.');
          if (dot == std::string::npos || rest.substr(dot) != ".weight") continue;
          int64_t h = -1;
          try {
            h = std::stoll(rest.substr(0, dot));
          } catch (const std::exception&) {
            h = -1;
          }
          const bool q = std::string(part).find("q_layernorm") != std::string::npos;
          if (h >= 0 && h < 65536)
            stacks[name.substr(0, at) + (q ? "self_attn.q_norm.weight" : "self_attn.k_norm.weight")]
                .emplace_back(h, &raw);
        }
    for (auto& [to, heads] : stacks) {
      std::sort(heads.begin(), heads.end());
      const int64_t n = static_cast<int64_t>(heads.size());
      const int64_t d = heads[0].second->view.cols;
      for (int64_t h = 0; h < n; ++h)
        if (heads[static_cast<size_t>(h)].first != h ||
            !heads[static_cast<size_t>(h)].second->supported ||
            heads[static_cast<size_t>(h)].second->view.cols != d ||
            heads[static_cast<size_t>(h)].second->view.rows != 1)
          throw ModelError("malformed per-head q / k norms near '" + to + "' in '" + b.path + "'");
      float* buf = b.add_f32(to, n, d);
      for (int64_t h = 0; h < n; ++h)
        dequantize_row(heads[static_cast<size_t>(h)].second->view, 0, buf + h * d);
    }
    return true;
  }
  if (type == nullptr || !type->is_string() || type->string != "exaone") return false;
  for (const auto& [from, to] : {std::pair{"num_layers", "num_hidden_layers"},
                                 {"layer_norm_epsilon", "rms_norm_eps"},
                                 {"activation_function", "hidden_act"}}) {
    const JsonValue* v = cfg.get(from);
    if (v != nullptr && cfg.get(to) == nullptr) cfg.object.emplace_back(to, *v);
  }
  static const std::pair<const char*, const char*> k_exaone[] = {
      {".ln_1.", ".input_layernorm."},
      {".ln_2.", ".post_attention_layernorm."},
      {".attn.attention.out_proj.", ".self_attn.o_proj."},
      {".attn.attention.", ".self_attn."},
      {".mlp.c_fc_0.", ".mlp.gate_proj."},
      {".mlp.c_fc_1.", ".mlp.up_proj."},
      {".mlp.c_proj.", ".mlp.down_proj."}};
  rename_tensors(b, [](std::string name) {
    if (name == "transformer.wte.weight") return std::string("model.embed_tokens.weight");
    if (name == "transformer.ln_f.weight") return std::string("model.norm.weight");
    if (name.rfind("transformer.h.", 0) != 0) return name;
    std::string to = "model.layers." + name.substr(14);
    for (const auto& [part, with] : k_exaone)
      if (const size_t at = to.find(part); at != std::string::npos)
        return to.replace(at, std::string(part).size(), with);
    return to;
  });
  return true;
}

// Older GPTQ / AWQ uploads keep their settings beside config.json, which then has no
// quantization_config: AutoGPTQ's quantize_config.json (bits, group_size, desc_act, sym; the
// checkpoint format gptq unless it says) and AutoAWQ's quant_config.json (w_bit, q_group_size,
// zero_point, version). Either becomes the config's quantization_config, as transformers' later
// uploads write it (twin: reference.loader.sidecar_quantization).
void sidecar_quantization(const fs::path& dir, JsonValue& cfg) {
  if (cfg.get("quantization_config") != nullptr) return;
  for (const char* name : {"quantize_config.json", "quant_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::exists(p)) continue;
    JsonValue q = parse_json(read_text(p, 1 << 20), "'" + p.string() + "'");
    if (!q.is_object()) throw ModelError("'" + p.string() + "' is not a JSON object");
    const bool awq = std::string(name) == "quant_config.json";
    const auto add = [&](const char* key, JsonValue v) {
      if (q.get(key) == nullptr) q.object.emplace_back(key, std::move(v));
    };
    JsonValue method;
    method.kind = JsonValue::Kind::String;
    method.string = awq ? "awq" : "gptq";
    add("quant_method", method);
    if (awq)
      for (const auto& [from, to] :
           {std::pair<const char*, const char*>{"w_bit", "bits"}, {"q_group_size", "group_size"}})
        if (const JsonValue* v = q.get(from); v != nullptr) add(to, *v);
    cfg.object.emplace_back("quantization_config", std::move(q));
    return;
  }
}

// A config's keys under another family's names: each alias's value copied to its name where the
// config has the alias and not the name (GLM-4.5's variants: glm_variant_keys, bailing_keys).
void add_aliases(JsonValue& cfg,
                 std::initializer_list<std::pair<const char*, const char*>> aliases) {
  for (const auto& [alias, name] : aliases)
    if (const JsonValue* v = cfg.get(alias); v != nullptr && cfg.get(name) == nullptr)
      cfg.object.emplace_back(name, *v);
}

// Ling / Ring 2.0 (bailing_moe, BailingMoeV2ForCausalLM: inclusionAI's Ling-mini-2.0,
// Ling-flash-2.0) is GLM-4.5's model under Param2-MoE's names: its keys read as GLM's names
// (num_experts, num_shared_experts, use_qkv_bias, score_function), the partial rotation 0.5 unless
// set (as llama.cpp's converter assumes); Ling 1.0 (BailingMoeForCausalLM, softmax routing), an
// output-projection bias (use_bias), a normalised head (norm_head), experts without the selection
// bias and shared experts of another width are refused by name (twin:
// reference.loader.glm_variant_keys).
void bailing_keys(JsonValue& cfg) {
  const Json json{cfg, "config.json"};
  const JsonValue* archs = cfg.get("architectures");
  if (archs != nullptr && archs->is_array())
    for (const JsonValue& a : archs->array)
      if (a.is_string() && a.string == "BailingMoeForCausalLM")
        throw ModelError(
            "Ling 1.0 (BailingMoeForCausalLM) is not supported (Ling 2.0, BailingMoeV2ForCausalLM, "
            "is)");
  for (const char* key : {"use_bias", "norm_head"})
    if (json.boolean(key, false))
      throw ModelError(std::string("Ling 2.0 with ") + key + "=true is not supported");
  if (!json.boolean("moe_router_enable_expert_bias", true))
    throw ModelError("Ling 2.0 with moe_router_enable_expert_bias=false is not supported");
  add_aliases(cfg, {{"num_experts", "n_routed_experts"},
                    {"num_shared_experts", "n_shared_experts"},
                    {"use_qkv_bias", "attention_bias"},
                    {"score_function", "scoring_func"}});
  if (cfg.get("partial_rotary_factor") == nullptr)
    cfg.object.emplace_back("partial_rotary_factor", parse_json("0.5"));
  const JsonValue* shared = cfg.get("moe_shared_expert_intermediate_size");
  if (shared != nullptr && !shared->is_null() &&
      json.integer("moe_shared_expert_intermediate_size", 0) !=
          json.integer("moe_intermediate_size", 0) * json.integer("n_shared_experts", 1))
    throw ModelError(
        "Ling 2.0 with moe_shared_expert_intermediate_size other than the experts' width times "
        "num_shared_experts is not supported");
}

// Solar Open (solar_open: upstage/Solar-Open-100B), Param2-MoE (param2moe: BharatGen's
// Param2-17B-A2.4B) and Sarvam-MoE (sarvam_moe: sarvamai/sarvam-30b) are GLM-4.5's model under
// their own configs: their defaults where GLM's differ, as transformers' configs set them, written
// into the config (RoPE on the whole head; Solar: every layer sparse, one shared expert; Param2 and
// Sarvam: scale 2.5, q / k norms, Param2 two shared experts, tied embeddings, base 500000, Sarvam
// one, base 8000000), and Param2's / Sarvam's key aliases (num_experts, num_shared_experts,
// use_qkv_bias, num_mtp_layers) read as GLM's names (twin: reference.loader.glm_variant_keys).
void glm_variant_keys(JsonValue& cfg) {
  const JsonValue* type = cfg.get("model_type");
  if (type == nullptr || !type->is_string()) return;
  const auto add_default = [&](const char* name, const char* text) {
    if (cfg.get(name) == nullptr) cfg.object.emplace_back(name, parse_json(text));
  };
  if (type->string == "solar_open") {
    for (const auto& [name, text] :
         {std::pair<const char*, const char*>{"partial_rotary_factor", "1.0"},
          {"first_k_dense_replace", "0"},
          {"n_shared_experts", "1"}})
      add_default(name, text);
    return;
  }
  if (type->string == "bailing_moe") {
    bailing_keys(cfg);
    return;
  }
  if (type->string != "param2moe" && type->string != "sarvam_moe") return;
  const bool param2 = type->string == "param2moe";
  add_aliases(cfg, {{"num_experts", "n_routed_experts"},
                    {"num_shared_experts", "n_shared_experts"},
                    {"use_qkv_bias", "attention_bias"},
                    {"num_mtp_layers", "num_nextn_predict_layers"}});
  for (const auto& [name, text] :
       {std::pair<const char*, const char*>{"partial_rotary_factor", "1.0"},
        {"n_shared_experts", param2 ? "2" : "1"},
        {"routed_scaling_factor", "2.5"},
        {"use_qk_norm", "true"},
        {"tie_word_embeddings", param2 ? "true" : "false"}})
    add_default(name, text);
  const JsonValue* rope = cfg.get("rope_parameters");
  if (rope == nullptr || !rope->is_object() || rope->get("rope_theta") == nullptr)
    add_default("rope_theta", param2 ? "500000.0" : "8000000.0");
}

void load_hf(Model& m, Storage& st) {
  const fs::path dir(m.path);
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) throw ModelError(no_config_message(dir));
  const std::string cfg_path = config_path.string();
  JsonValue cfg_json = parse_json(read_text(config_path, 16 << 20), "'" + cfg_path + "'");
  if (!cfg_json.is_object()) throw ModelError("'" + cfg_path + "' is not a JSON object");
  sidecar_quantization(dir, cfg_json);
  glm_variant_keys(cfg_json);
  if (const JsonValue* t = cfg_json.get("model_type");
      t != nullptr && t->is_string() && t->string == "nemotron-nas")
    deci_keys(cfg_json,
              cfg_path);  // (its KV heads and widest feed-forward, for the shared reading)
  // A vision-language folder whose language model ossa runs alone
  // (Mistral3ForConditionalGeneration: Ministral 3 as released): its text_config, its tensors
  // renamed below.
  const bool wrapper = text_wrapper(cfg_json);
  // (Qwen2-VL / Qwen2.5-VL as released: the language model's keys at the top level, no text_config)
  const JsonValue* type_v = cfg_json.get("model_type");
  const bool flat_vl = type_v != nullptr && type_v->is_string() &&
                       (type_v->string == "qwen2_vl" || type_v->string == "qwen2_5_vl") &&
                       cfg_json.get("text_config") == nullptr;
  if (wrapper && !flat_vl) {
    const JsonValue* text = cfg_json.get("text_config");
    if (text == nullptr || !text->is_object())
      throw ModelError("'" + cfg_path + "' has no text_config object");
    JsonValue copy = *text;
    cfg_json = std::move(copy);
  }
  const Json cfg{cfg_json, cfg_path};

  // Shards: the index names them; otherwise model.safetensors.
  std::vector<std::string> files;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const JsonValue index =
        parse_json(read_text(index_path, 100 << 20), "'" + index_path.string() + "'");
    const JsonValue* map = index.get("weight_map");
    if (map == nullptr || !map->is_object())
      throw ModelError("'" + index_path.string() + "' has no weight_map object");
    for (const auto& [name, file] : map->object) {
      if (!file.is_string() || file.string.empty() || file.string.find('/') != std::string::npos ||
          file.string.find("..") != std::string::npos)
        throw ModelError("'" + index_path.string() + "' maps '" + name +
                         "' to an invalid file name");
      if (std::find(files.begin(), files.end(), file.string) == files.end())
        files.push_back(file.string);
    }
  } else if (fs::exists(dir / "model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    throw ModelError("'" + m.path +
                     "' has neither model.safetensors nor model.safetensors.index.json");
  }

  Builder b{m.path, {}, &st};
  for (const std::string& file : files) {
    auto sf = SafetensorsFile::open((dir / file).string());
    st.safetensors.push_back(sf);
    for (const SafetensorsInfo& info : sf->tensors()) {
      Raw r;
      r.type_name = info.dtype;
      r.supported = info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16";
      r.n_dims = info.shape.size();
      r.bytes = sf->bytes(info);
      r.shape = info.shape;
      NamedTensor nt{info.name,
                     info.dtype,
                     1,
                     info.shape.empty() ? 1 : info.shape.back(),
                     info.end - info.begin,
                     {}};
      for (size_t d = 0; d + 1 < info.shape.size(); ++d) nt.rows *= info.shape[d];
      if (r.supported) {
        r.view = sf->view(info);
        nt.view = r.view;
      }
      if (!b.raw.emplace(info.name, r).second)
        throw ModelError("tensor '" + info.name + "' appears in two shards of '" + m.path + "'");
      m.tensors.push_back(nt);
    }
  }

  if (wrapper) language_model_names(b);
  family_names(cfg_json, b);
  bitnet_linear(Json{cfg_json, cfg_path}, b);
  ModelConfig& c = m.config;
  std::string arch = cfg.string("model_type", "");
  if (arch == "gemma4" || arch == "Gemma4ForConditionalGeneration") {
    // A multimodal Gemma 4 folder: its language model alone, as Gemma4ForCausalLM.
    const JsonValue* text = cfg.get("text_config");
    if (text == nullptr || !text->is_object())
      throw ModelError("'" + cfg_path + "' has no text_config object");
    load_gemma4_hf(m, b, Json{*text, cfg_path}, true);
    return;
  }
  if (arch == "gemma3n" || arch == "Gemma3nForConditionalGeneration") {
    // A Gemma 3n folder (vision and audio towers beside): its language model alone.
    const JsonValue* text = cfg.get("text_config");
    if (text == nullptr || !text->is_object())
      throw ModelError("'" + cfg_path + "' has no text_config object");
    load_gemma4_hf(m, b, Json{*text, cfg_path}, true, true);
    return;
  }
  if (arch == "gemma3" || arch == "Gemma3ForConditionalGeneration") {
    // A multimodal Gemma 3 folder: its language model alone, as Gemma3ForCausalLM.
    const JsonValue* text = cfg.get("text_config");
    if (text == nullptr || !text->is_object())
      throw ModelError("'" + cfg_path + "' has no text_config object");
    load_gemma3_hf(m, b, Json{*text, cfg_path}, true);
    return;
  }
  if (arch.empty()) {
    const JsonValue* archs = cfg.get("architectures");
    if (archs != nullptr && archs->is_array() && !archs->array.empty() &&
        archs->array[0].is_string())
      arch = archs->array[0].string;
  }
  const std::map<std::string, std::string>& k_archs = hf_archs();
  if (arch == "gemma3_text" || arch == "Gemma3ForCausalLM") return load_gemma3_hf(m, b, cfg, false);
  if (arch == "gemma4_text" || arch == "Gemma4ForCausalLM") return load_gemma4_hf(m, b, cfg, false);
  if (arch == "gemma3n_text" || arch == "Gemma3nForCausalLM")
    return load_gemma4_hf(m, b, cfg, false, true);
  if (arch == "gemma2" || arch == "Gemma2ForCausalLM")
    return load_gemma3_hf(m, b, cfg, false, "gemma2");
  if (arch == "vaultgemma" || arch == "VaultGemmaForCausalLM") {  // (Gemma 2 without post-norms)
    m.config.no_post_norms = true;
    return load_gemma3_hf(m, b, cfg, false, "gemma2");
  }
  if (arch == "gemma" || arch == "GemmaForCausalLM")
    return load_gemma3_hf(m, b, cfg, false, "gemma");
  auto found = k_archs.find(arch);
  if (found == k_archs.end())
    throw ModelError("unknown architecture '" + arch + "' in '" + cfg_path + "' " + k_supported_hf);
  c.arch = found->second;
  c.hf_bamba = arch == "bamba" || arch == "BambaForCausalLM";
  c.n_vocab = checked_dim(cfg.integer("vocab_size", 0), "vocab_size", cfg_path);
  c.n_embd = checked_dim(cfg.integer("hidden_size", 0), "hidden_size", cfg_path);
  // (transformers 5 writes Nemotron-H's layer count as its pattern's length alone)
  const int64_t n_layer_cfg = cfg.integer("num_hidden_layers", 0);
  c.n_layer = checked_dim(c.arch == "nemotron_h" && n_layer_cfg == 0
                              ? static_cast<int64_t>(nemotronh_layer_kinds(cfg, 0).size())
                              : n_layer_cfg,
                          "num_hidden_layers", cfg_path, 4096);
  // (Mamba-2 alone: no attention; its mixer's heads and inner size stand in, unused; Mamba-1: one
  // head of d_inner)
  const bool mamba2 = c.arch == "mamba2", mamba1 = c.arch == "mamba";
  c.n_head = mamba1 ? 1
                    : checked_dim(cfg.integer(mamba2 ? "num_heads" : "num_attention_heads", 0),
                                  "num_attention_heads", cfg_path, 65536);
  c.n_head_kv = checked_dim(cfg.integer("num_key_value_heads", c.n_head), "num_key_value_heads",
                            cfg_path, 65536);
  const bool qwen35 = c.arch == "qwen35" || c.arch == "qwen35moe" || c.arch == "qwen3next";
  const bool nanochat = cfg.string("model_type", "") == "nanochat";
  // (Qwen3.5 MoE configs have no dense size: the experts')
  const int64_t mamba2_inner = static_cast<int64_t>(
      std::clamp(cfg.number("expand", 2.0), 0.0, 64.0) * static_cast<double>(c.n_embd));
  c.n_ff = checked_dim(mamba2 || mamba1 ? mamba2_inner
                       : c.arch == "falcon"  // (FalconConfig's: 4 * hidden unless set)
                           ? cfg.integer("ffn_hidden_size", 4 * c.n_embd)
                           : cfg.v.get("intermediate_size") !=
                                     nullptr  // (Hunyuan MoE: moe_intermediate_size a list)
                                 ? cfg.integer("intermediate_size", 0)
                                 : cfg.integer("moe_intermediate_size", 0),
                       "intermediate_size", cfg_path);
  const int64_t default_head_dim = mamba1                     ? c.n_ff
                                   : c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head
                                                              : 0;
  // (Ernie4_5Config's head_dim is 128 unless the file sets it, null meaning hidden / heads)
  const bool ernie = c.arch == "ernie4_5" || c.arch == "ernie4_5-moe";
  // (NemotronHConfig's and Qwen3VLTextConfig's too)
  const bool ernie_dim =
      (ernie || c.arch == "nemotron_h" || c.arch == "qwen3vl" || c.arch == "seed_oss" ||
       c.arch == "afmoe" || cfg.string("model_type", "") == "internlm3" ||
       cfg.string("model_type", "") == "iquestcoder" || cfg.string("model_type", "") == "cwm") &&
      cfg.v.get("head_dim") == nullptr;
  c.head_dim = checked_dim(ernie_dim ? 128 : cfg.integer("head_dim", default_head_dim), "head_dim",
                           cfg_path, 65536);
  c.n_ctx_train = static_cast<int>(
      std::clamp<int64_t>(cfg.integer("max_position_embeddings", 4096), 1, 1 << 30));
  c.rms_eps = static_cast<float>(cfg.number("rms_norm_eps", 1e-6));
  if (c.arch != "phi3" && c.arch != "phimoe" && c.arch != "glm4moe" && c.arch != "glm4" &&
      c.arch != "chatglm" && !qwen35 && c.arch != "granitehybrid" && c.arch != "minimax-m2" &&
      c.arch != "stablelm" && c.arch != "phi2" && c.arch != "nemotron" && c.arch != "gptneox" &&
      cfg.number("partial_rotary_factor", 1.0) != 1.0)
    throw ModelError("partial RoPE (partial_rotary_factor) in '" + cfg_path + "' is not supported");

  // RoPE: transformers 4.x writes top-level rope_theta and rope_scaling {type|rope_type, ...};
  // 5.x writes rope_parameters {rope_theta, rope_type, factor, ...}.
  const JsonValue* params = cfg.get("rope_parameters");
  if (params != nullptr && !params->is_object())
    throw ModelError("config 'rope_parameters' must be an object");
  const JsonValue* scaling = cfg.get("rope_scaling");
  if (scaling != nullptr && !scaling->is_object())
    throw ModelError("config 'rope_scaling' must be an object");
  // (GptOssConfig's defaults: base 150000, YaRN factor 32 over 4096 positions, betas 32 / 1.)
  const bool gpt_oss = c.arch == "gpt-oss";
  if (c.arch == "olmo3") {  // window, and RoPE per layer type: the full layers' are the model's
    params = olmo3_config_hf(cfg, c);
    if (params == nullptr) params = cfg.get("rope_scaling");
    scaling = nullptr;
  }
  // (Qwen3-VL's text configs default to 500000)
  // (and Qwen2-VL's to 1000000)
  const bool qwen3vl = c.arch == "qwen3vl" || c.arch == "qwen3vlmoe";
  c.rope_theta = static_cast<float>(cfg.number("rope_theta", gpt_oss                  ? 150000.0
                                                             : qwen3vl                ? 500000.0
                                                             : c.arch == "qwen2vl"    ? 1000000.0
                                                             : c.arch == "minimax-m2" ? 5000000.0
                                                             : c.arch == "exaone"     ? 500000.0
                                                                                      : 10000.0));
  if (params != nullptr)
    c.rope_theta = static_cast<float>(Json{*params, cfg_path}.number("rope_theta", c.rope_theta));
  if (scaling == nullptr) scaling = params;
  if (gpt_oss && (scaling == nullptr ||
                  (scaling->get("rope_type") == nullptr && scaling->get("type") == nullptr))) {
    static const JsonValue k_gpt_oss_rope = parse_json(
        R"({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": false, "original_max_position_embeddings": 4096})");
    scaling = &k_gpt_oss_rope;
  }
  if (scaling != nullptr) {
    const Json s{*scaling, cfg_path};
    const std::string type = s.string("rope_type", s.string("type", "default"));
    if (type == "linear" || type == "llama3") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = static_cast<float>(s.number("factor", 1.0));
      c.rope_scaling.low_freq_factor = static_cast<float>(s.number("low_freq_factor", 1.0));
      c.rope_scaling.high_freq_factor = static_cast<float>(s.number("high_freq_factor", 4.0));
      c.rope_scaling.original_max_position = static_cast<int>(
          std::clamp<int64_t>(s.integer("original_max_position_embeddings", 8192), 1, 1 << 30));
    } else if (type == "yarn" && c.arch != "phi3" && c.arch != "phimoe") {
      yarn_config_hf(cfg, s, c);
    } else if (type == "dynamic") {
      // Hunyuan's NTK-alpha: a fixed larger base, theta * alpha^(d / (d - 2)). Without alpha,
      // dynamic NTK, which changes nothing within max_position_embeddings (ossa keeps the base
      // beyond it, as llama.cpp does).
      const double alpha = s.number("alpha", 0.0);
      if (alpha > 0.0 && c.head_dim > 2)
        c.rope_theta =
            static_cast<float>(static_cast<double>(c.rope_theta) *
                               std::pow(alpha, static_cast<double>(c.head_dim) / (c.head_dim - 2)));
    } else if (type != "default" && !((c.arch == "phi3" || c.arch == "phimoe" ||
                                       c.arch == "minicpm3" || c.arch == "minicpm") &&
                                      (type == "longrope" || type == "su"))) {
      throw ModelError("unsupported rope scaling type '" + type + "' in '" + cfg_path + "'");
    }
  }
  // (ERNIE 4.5: RoPE on interleaved pairs, as transformers' Ernie4_5 rotates them.)
  // (GPT-J's rotate_every_two: interleaved pairs as well)
  // (Helium's rotate_half pairs interleaved dimensions too)
  const bool helium = cfg.string("model_type", "") == "helium";
  c.rope_style = ernie || c.arch == "gptj" || helium ? RopeStyle::Interleaved : RopeStyle::Neox;
  if (ernie && cfg.boolean("use_bias", false))
    throw ModelError("use_bias=true in '" + cfg_path + "' is not supported");
  if (c.arch == "phi3" || c.arch == "phimoe")
    phi3_config_hf(cfg, scaling, c);  // partial rotary, LongRoPE, sliding window
  if (c.arch == "phimoe") {  // LayerNorms, mscale; biases on q / k / v / o where attention_bias
    phimoe_config_hf(scaling, c, cfg_path);
    c.o_bias = cfg.boolean("attention_bias", false);
  }
  if (c.arch == "granite" || c.arch == "granitemoe") granite_config_hf(cfg, c);
  const std::string granite_type = cfg.string("model_type", "");
  const bool granite_swa = (c.arch == "granite" || c.arch == "granitemoe") &&
                           (granite_type == "granite_swa" || granite_type == "granitemoe_swa");
  if (granite_swa)
    granite_swa_config_hf(cfg, c);  // window, sinks, RoPE bases per layer
  else if (c.arch == "smollm3")
    smollm3_config_hf(cfg, c);  // NoPE layers, the window of use_sliding_window
  else if (gpt_oss)
    gpt_oss_config_hf(cfg, c);  // window, sinks, biases
  else if (c.arch != "phi3" && c.arch != "phimoe")
    window_config_hf(cfg, c);
  if (c.arch == "llama4") llama4_config_hf(cfg, c);  // NoPE layers, chunks, temperature, MLP size
  if (c.arch == "afmoe") afmoe_config_hf(cfg, c);    // window, global layers NoPE, gate, muP
  if (c.arch == "dbrx") {  // DBRX: LayerNorms without bias (torch's eps), attn_config's clip_qkv
    c.layer_norm = true;
    c.rms_eps = 1e-5f;
    const JsonValue* attn = cfg.get("attn_config");
    if (attn != nullptr && attn->is_object()) {
      const Json a{*attn, cfg_path};
      const double clip = a.number("clip_qkv", 0.0);
      if (!(clip >= 0.0)) throw ModelError("invalid attn_config.clip_qkv in '" + cfg_path + "'");
      c.clamp_qkv = static_cast<float>(clip);
      // (DBRX's own RoPE base, 500000 in the releases, over rope_parameters: transformers 5 writes
      // its default there beside it and runs that; llama.cpp's converter reads this one)
      c.rope_theta = static_cast<float>(a.number("rope_theta", c.rope_theta));
    }
    const JsonValue* ffn = cfg.get("ffn_config");
    const JsonValue* act = ffn != nullptr && ffn->is_object() ? ffn->get("ffn_act_fn") : nullptr;
    const JsonValue* name = act != nullptr && act->is_object() ? act->get("name") : nullptr;
    if (name != nullptr && (!name->is_string() || name->string != "silu"))
      throw ModelError("ffn_config.ffn_act_fn in '" + cfg_path + "' is not supported (silu is)");
  }
  if (c.arch == "command-r" || c.arch == "cohere2") cohere_config_hf(cfg, c);
  if (c.arch == "minimax-m2") minimax_config_hf(cfg, params, c);
  if (c.arch == "phi2") {  // Phi-1 / 1.5 / 2: Cohere's parallel block with LayerNorm + bias, a
                           // GELU MLP with biases, biased projections and lm_head, partial RoPE
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.ffn_bias = c.parallel_block = true;
    c.qkv_bias = c.o_bias = true;
    c.rms_eps = static_cast<float>(cfg.number("layer_norm_eps", 1e-5));
    c.rope_dim = hf_rotated_dims(cfg, params, c.head_dim, 0.5, "partial_rotary_factor");
    if (cfg.boolean("qk_layernorm", false))
      throw ModelError("qk_layernorm=true in '" + cfg_path + "' is not supported");
  }
  if (c.arch == "stablelm") {  // LayerNorm with bias, partial NeoX RoPE (0.25), options below
    c.layer_norm = c.norm_bias = true;
    c.rms_eps = static_cast<float>(cfg.number("layer_norm_eps", 1e-5));
    c.rope_dim = hf_rotated_dims(cfg, params, c.head_dim, 0.25, "partial_rotary_factor");
    c.parallel_block = cfg.boolean("use_parallel_residual", false);
    c.qk_norm_heads = cfg.boolean("qk_layernorm", false);  // (per-head LayerNorms, no bias)
  }
  if (cfg.boolean("mlp_bias", false) && c.arch != "jais2")
    throw ModelError("mlp_bias=true in '" + cfg_path + "' is not supported");
  // The MLP's activation: SiLU (SwiGLU) in the Llama family; Arcee's relu^2 without a gate
  // (Nemotron-H's is read by nemotronh_config_hf).
  if (const JsonValue* act = cfg.get("hidden_act");
      act != nullptr && act->is_string() && c.arch != "nemotron_h" && c.arch != "gptneox" &&
      c.arch != "falcon" && c.arch != "apertus" && c.arch != "gptj" && c.arch != "gpt2" &&
      c.arch != "starcoder") {
    const std::string want = c.arch == "arcee" || c.arch == "nemotron" || c.arch == "bitnet" ||
                                     c.arch == "jais2" || nanochat
                                 ? "relu2"
                             : c.arch == "starcoder2" ? "gelu_pytorch_tanh"
                             : c.arch == "phi2"       ? "gelu_new"
                                                      : "silu";
    if (act->string != want && !(want == "silu" && act->string == "swish") &&
        !(want == "gelu_new" && act->string == "gelu_pytorch_tanh"))
      throw ModelError("hidden_act '" + act->string + "' in '" + cfg_path + "' is not supported (" +
                       want + " is, for this architecture)");
  }
  if (c.arch == "arcee") c.ffn_relu2 = true;  // (AFM: down(relu(up x)^2))
  if (nanochat) {  // (Llama's layers; down(relu(fc1 x)^2), q / k normalised, the embeddings too)
    c.ffn_relu2 = c.embd_norm = true;                             // (qk_norm, after RoPE: below)
    const JsonValue* cap = cfg.v.get("final_logit_softcapping");  // (15 unless set; null: none)
    c.final_softcap = cap == nullptr ? 15.0f
                      : cap->is_null()
                          ? 0.0f
                          : static_cast<float>(cfg.number("final_logit_softcapping", 0.0));
    if (!(c.final_softcap >= 0.0f))
      throw ModelError("invalid final_logit_softcapping in '" + cfg_path + "'");
  }
  if (c.arch == "bitnet")  // (Llama's layers with sub-norms and a relu^2 gate)
    c.sub_norms = c.glu_relu2 = true;
  if (c.arch == "jais2") {  // Llama's layers with LayerNorms (bias), relu^2 MLPs and biases
    c.layer_norm = c.norm_bias = c.ffn_relu2 = true;
    c.rms_eps = static_cast<float>(cfg.number("layer_norm_eps", 1e-5));
    c.ffn_bias = cfg.boolean("mlp_bias", true);
    c.o_bias = cfg.boolean("attention_bias", true);
  }
  if (c.arch == "nemotron") {  // LayerNorm1P with bias, relu^2 MLP, partial NeoX RoPE (0.5)
    c.layer_norm = c.norm_bias = c.ffn_relu2 = true;
    c.rms_eps = static_cast<float>(cfg.number("norm_eps", 1e-5));
    c.rope_dim = hf_rotated_dims(cfg, params, c.head_dim, 0.5, "partial_rotary_factor");
    c.o_bias = cfg.boolean("attention_bias", false);
  }
  if (c.arch == "gptneox") {  // Pythia, GPT-NeoX-20B: see family_names for the tensors
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.ffn_bias = true;
    c.rms_eps = static_cast<float>(cfg.number("layer_norm_eps", 1e-5));
    c.gelu_erf = gelu_is_exact(cfg, "hidden_act", "gelu");
    c.parallel_block = c.parallel_norms = cfg.boolean("use_parallel_residual", true);
    c.o_bias = cfg.boolean("attention_bias", true);
    // (older configs: rotary_pct and rotary_emb_base at the top level; rope_parameters otherwise)
    c.rope_dim = hf_rotated_dims(cfg, params, c.head_dim, 0.25, "rotary_pct");
    if ((params == nullptr || params->get("rope_theta") == nullptr) &&
        cfg.v.get("rotary_emb_base") != nullptr)
      c.rope_theta = static_cast<float>(cfg.number("rotary_emb_base", 10000.0));
  }
  if (c.arch == "falcon") {  // Falcon 7B / 40B / 180B: see family_names for the tensors
    if (cfg.boolean("alibi", false))
      throw ModelError("alibi=true (ALiBi positions, Falcon-RW) in '" + cfg_path +
                       "' is not supported");
    c.layer_norm = c.norm_bias = c.ffn_gelu = true;
    c.rms_eps = static_cast<float>(cfg.number("layer_norm_epsilon", 1e-5));
    c.gelu_erf = gelu_is_exact(cfg, "activation", "gelu");
    const bool new_arch = cfg.boolean("new_decoder_architecture", false);
    c.parallel_block = new_arch || cfg.boolean("parallel_attn", true);
    // (40B / 180B: ln_attn and ln_mlp unless num_ln_in_parallel_attn is 1)
    c.parallel_norms = new_arch && cfg.integer("num_ln_in_parallel_attn", 2) == 2;
    c.n_head_kv = static_cast<int>(falcon_kv_heads(cfg, c.n_head));
    c.qkv_bias = c.o_bias = c.ffn_bias = cfg.boolean("bias", false);
  }
  if (c.arch == "gptj") {  // GPT-J: Phi-2's parallel block, RoPE on interleaved pairs of rotary_dim
    c.layer_norm = c.norm_bias = c.ffn_gelu = c.ffn_bias = c.parallel_block = true;
    c.rms_eps = static_cast<float>(cfg.number("layer_norm_epsilon", 1e-5));
    c.gelu_erf = gelu_is_exact(cfg, "hidden_act", "gelu_new");
    const JsonValue* rot = cfg.get("rotary_dim");
    if ((rot == nullptr || rot->is_null()) && cfg.string("model_type", "") == "codegen")
      throw ModelError("rotary_dim null in '" + cfg_path +
                       "' is not supported (CodeGen's tables then span the whole width)");
    const int64_t dims =
        rot == nullptr || rot->is_null() ? c.head_dim : cfg.integer("rotary_dim", 0);
    c.rope_dim = rotated_dims(dims, c, "rotary_dim in '" + cfg_path + "'");
  }
  if (c.arch == "apertus") {  // xIELU MLPs: each layer's parameters from mlp.act_fn.*
    const std::string act = cfg.string("hidden_act", "xielu");
    if (act != "xielu")
      throw ModelError("hidden_act '" + act + "' in '" + cfg_path +
                       "' is not supported (xielu is)");
    c.ffn_xielu = true;
    std::vector<double> vals[4];
    const char* names[4] = {"alpha_p", "alpha_n", "beta", "eps"};
    for (int i = 0; i < c.n_layer; ++i)
      for (int j = 0; j < 4; ++j) {
        const std::string name = "model.layers." + std::to_string(i) + ".mlp.act_fn." + names[j];
        auto it = b.raw.find(name);
        if (it == b.raw.end())
          throw ModelError("missing tensor '" + name + "' in '" + cfg_path + "'");
        const TensorView& v = it->second.view;
        if (!it->second.supported || v.rows * v.cols != 1)
          throw ModelError("tensor '" + name + "' in '" + cfg_path + "' must hold one number");
        float x = 0.0f;
        dequantize_row(v, 0, &x);
        vals[j].push_back(x);
      }
    set_xielu(c, vals[0], vals[1], vals[2], vals[3], cfg_path);
  }
  if (c.arch == "olmo") {  // weightless LayerNorms (eps 1e-5), clip_qkv: null or a bound
    c.layer_norm = true;
    c.rms_eps = 1e-5f;
    const JsonValue* clip = cfg.get("clip_qkv");
    if (clip != nullptr && !clip->is_null())
      c.clamp_qkv = static_cast<float>(cfg.number("clip_qkv", 0.0));
  }
  if (c.arch == "starcoder2") {  // LayerNorm with bias, GELU MLP, use_bias on every projection
    c.layer_norm = c.norm_bias = c.ffn_gelu = true;
    c.ffn_bias = cfg.boolean("use_bias", true);
    c.rms_eps = static_cast<float>(cfg.number("norm_epsilon", 1e-5));
  }
  if (cfg.string("model_type", "") == "internlm3" &&
      (cfg.boolean("qkv_bias", false) || cfg.boolean("bias", false)))
    throw ModelError("qkv_bias / bias=true in '" + cfg_path + "' is not supported");
  if (c.arch != "qwen2" && c.arch != "qwen2moe" && c.arch != "glm4moe" && c.arch != "glm4" &&
      c.arch != "chatglm" && !gpt_oss && c.arch != "seed_oss" && c.arch != "nemotron" &&
      c.arch != "jais2" && c.arch != "gptneox" && c.arch != "phimoe" &&
      cfg.boolean("attention_bias", false))
    throw ModelError("attention_bias=true in '" + cfg_path + "' is not supported");
  c.qkv_bias = c.arch == "qwen2" || c.arch == "qwen2vl" ||
               (c.arch == "qwen2moe" && cfg.boolean("qkv_bias", true)) || (gpt_oss && c.o_bias) ||
               (c.arch == "seed_oss" && cfg.boolean("attention_bias", true)) ||
               (c.arch == "starcoder2" && cfg.boolean("use_bias", true)) ||
               (c.arch == "stablelm" && cfg.boolean("use_qkv_bias", false)) || c.arch == "phi2" ||
               (c.arch == "nemotron" && cfg.boolean("attention_bias", false)) ||
               (c.arch == "jais2" && cfg.boolean("attention_bias", true)) ||
               (c.arch == "gptneox" && cfg.boolean("attention_bias", true)) ||
               (c.arch == "falcon" && cfg.boolean("bias", false)) ||
               (c.arch == "phimoe" && cfg.boolean("attention_bias", false));
  if (c.arch == "starcoder2") c.o_bias = cfg.boolean("use_bias", true);
  if (cfg.string("model_type", "") == "internlm2")  // (InternLM2Config's bias: wqkv and wo's)
    c.qkv_bias = c.o_bias = cfg.boolean("bias", true);
  if (c.arch == "seed_oss")
    c.o_bias = cfg.boolean("attention_out_bias", false);  // (SeedOssConfig's)
  // BLOOM, MPT, GPT-2, GPT-BigCode (after the bias defaults above: their own; family_names renamed
  // their keys and tensors)
  if (c.arch == "bloom" || c.arch == "mpt" || c.arch == "gpt2" || c.arch == "starcoder")
    gpt_classic_config_hf(cfg, c);
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "qwen3vl" ||
              c.arch == "qwen3vlmoe" || c.olmo() || c.arch == "exaone4" || c.arch == "olmoe" ||
              c.qk_norm_heads || c.arch == "minimax-m2" || c.arch == "hunyuan-dense" ||
              c.arch == "dots1" || c.arch == "apertus" || c.arch == "exaone-moe" ||
              c.arch == "hunyuan-moe" || nanochat ||
              c.arch == "afmoe";  // (Cohere's use_qk_norm: cohere_config_hf)
  c.qk_norm_after_rope = c.arch == "hunyuan-dense" || c.arch == "hunyuan-moe" || nanochat;
  if (c.arch == "hunyuan-moe" && cfg.boolean("use_cla", false))
    throw ModelError("use_cla=true (cross-layer attention) in '" + cfg_path + "' is not supported");
  if (cfg.string("model_type", "") == "flex_olmo") c.no_pre_norms = true;  // (see config.h)
  if (c.arch == "olmoe") {  // (OlmoeConfig's clip_qkv: null, or a bound on q, k and v)
    const JsonValue* clip = cfg.get("clip_qkv");
    if (clip != nullptr && !clip->is_null())
      c.clamp_qkv = static_cast<float>(cfg.number("clip_qkv", 0.0));
  }
  if (c.arch == "exaone4" || c.arch == "exaone-moe")
    exaone4_config_hf(cfg, c);                                    // window, NoPE global layers
  if (c.arch == "deepseek2") deepseek2_config_hf(cfg, c);         // latent attention
  if (c.arch == "minicpm3") minicpm3_config_hf(cfg, scaling, c);  // latent attention, LongRoPE
  if (c.arch == "minicpm") minicpm_config_hf(cfg, scaling, c);    // multipliers, LongRoPE
  if (c.arch == "deci") deci_config_hf(cfg, c);                // per-layer shapes (block_configs)
  if (c.arch == "glm4moe") glm4moe_config_hf(cfg, params, c);  // partial RoPE, bias, q / k norms
  if (c.arch == "glm4" || c.arch == "chatglm")                 // the same, interleaved pairs
    glm4_config_hf(cfg, params, c);
  if (qwen35) qwen35_config_hf(cfg, params, c);  // delta-net layers, gated attention
  if (c.lfm2()) lfm2_config_hf(cfg, c);          // short convolutions, norm_eps, its MLP size
  if (c.arch == "granitehybrid") granitehybrid_config_hf(cfg, c);  // Mamba-2 layers, multipliers
  if (c.arch == "nemotron_h") nemotronh_config_hf(cfg, c);  // one sublayer a block, Mamba-2, relu2
  if (mamba1) mamba1_config_hf(cfg, c);                     // every layer a Mamba-1 mixer alone
  if (c.arch == "jamba") jamba_config_hf(cfg, c);
  if (c.arch == "falcon-h1")
    falconh1_config_hf(
        cfg,
        c);  // parallel mixers, mu-P multipliers           // Mamba-1 among NoPE attention, experts
  if (mamba2) mamba2_config_hf(cfg, c);  // every layer a Mamba-2 mixer alone
  if (c.arch == "mistral3" || cfg.string("model_type", "") == "mistral4")
    temperature_config_hf(cfg, scaling, c);  // Llama 4's attention temperature
  // (transformers' NemotronH never ties its lm_head, whatever tie_word_embeddings says)
  c.tied_embeddings = (cfg.boolean("tie_word_embeddings", false) && c.arch != "nemotron_h") ||
                      !b.has("lm_head.weight");
  validate_config(c, cfg_path);
  read_moe_config_hf(c, cfg_json, cfg_path);
  if (c.arch == "olmo") b.add_unit_norms(hf_name, c.n_layer, "model.norm.weight", c.n_embd);
  if (nanochat) nanochat_weights(b, c, cfg_path);
  build_weights(m, b,
                c.arch == "glm4" || c.arch == "afmoe" ? hf_name_glm4
                : c.arch == "llama4"                  ? hf_name_llama4
                : c.lfm2()                            ? hf_name_lfm2
                : c.hf_bamba || c.arch == "falcon-h1" ? hf_name_bamba
                : c.arch == "granitehybrid"           ? hf_name_granitehybrid
                : mamba1                              ? hf_name_mamba1
                : c.arch == "jamba"                   ? hf_name_jamba
                : c.arch == "nemotron_h" || mamba2    ? hf_name_nemotronh
                : c.pre_norms()                       ? hf_name
                                                      : hf_name_post_norms,
                c.arch == "nemotron_h" || mamba2 || mamba1 ? "backbone.embeddings.weight"
                                                           : "model.embed_tokens.weight",
                c.lfm2()                                     ? "model.embedding_norm.weight"
                : c.arch == "nemotron_h" || mamba2 || mamba1 ? "backbone.norm_f.weight"
                : c.hf_bamba || c.arch == "jamba" || c.arch == "falcon-h1"
                    ? "model.final_layernorm.weight"
                    : "model.norm.weight",
                "lm_head.weight");
  build_moe_layers(m, b, false);
  if (qwen35 || c.arch == "nemotron") shift_norms(m, b);  // (Qwen3.5's RMSNorm, Nemotron's 1P)
}

}  // namespace

const TensorView* Model::find_tensor(const std::string& name) const {
  const auto* st = static_cast<const Storage*>(storage.get());
  if (st != nullptr) {
    auto it = st->canonical.find(name);
    if (it != st->canonical.end()) return &it->second;
  }
  for (const NamedTensor& t : tensors)
    if (t.name == name) return t.view.empty() ? nullptr : &t.view;
  return nullptr;
}

bool Model::uses_amx() const { return amx; }

std::map<std::string, int> Model::int8_matrices() const {
  std::map<std::string, int> out;
  const auto add = [&](const TensorView& v, const std::string& name) {
    if (quantized_activations && takes_q8(v)) {
      out[name] = 32;  // 8-bit blocks (matmul_q8.cpp, or the int8 kernels' first piece)
      return;
    }
    if (v.packed == nullptr || v.bf16_compute) return;
    if (amx_i8_type(v.type) && !quantized_activations)
      out[name] = 32;  // matmul_amx_i8.cpp: amx_i8_split_rows
    else if (amx_q23k_type(v.type))
      out[name] = 64;  // Q2_K / Q3_K, matmul_amx_q23k.cpp: amx_q23k_split_rows
  };
  const char* names[] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  const char* ffn[] = {"w_gate", "w_up", "w_down"};
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    const LayerWeights& l = weights.layers[i];
    const std::string layer = "layers." + std::to_string(i) + ".";
    const TensorView* views[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down};
    for (int k = 0; k < 7; ++k) add(*views[k], layer + names[k]);
    for (auto [v, name] : {std::pair{&l.ssm_qkv, "ssm_qkv"},
                           {&l.ssm_in, "ssm_in"},
                           {&l.ssm_z, "ssm_z"},
                           {&l.ssm_beta, "ssm_beta"},
                           {&l.ssm_alpha, "ssm_alpha"},
                           {&l.ssm_out, "ssm_out"},
                           {&l.sc_in, "sc_in"},
                           {&l.sc_out, "sc_out"},
                           {&l.ple_gate, "ple_gate"},
                           {&l.ple_proj, "ple_proj"},
                           {&l.laurel_l, "laurel_l"},
                           {&l.laurel_r, "laurel_r"}})  // (Qwen3.5's delta-net, LFM2's
                                                        // convolution, Gemma 4's per-layer branch,
                                                        // Gemma 3n's LAuReL)
      add(*v, layer + name);
    add(l.wq_a, layer + "wq_a");  // (DeepSeek's latent attention)
    add(l.wq_b, layer + "wq_b");
    add(l.wkv_a, layer + "wkv_a");
    for (size_t h = 0; h < l.wk_b.size(); ++h) {
      add(l.wk_b[h], layer + "wk_b." + std::to_string(h));
      add(l.wv_b[h], layer + "wv_b." + std::to_string(h));
    }
    // MoE experts (moe.cpp's matmuls take the same kernels), by ossa.reference.moe's names.
    for (size_t e = 0; e < l.moe.experts.size(); ++e) {
      const ExpertWeights& x = l.moe.experts[e];
      const TensorView* ev[] = {&x.w_gate, &x.w_up, &x.w_down};
      for (int k = 0; k < 3; ++k)
        add(*ev[k], layer + "experts." + std::to_string(e) + "." + ffn[k]);
    }
    if (!l.moe.shared.empty()) {
      const TensorView* sv[] = {&l.moe.shared.w_gate, &l.moe.shared.w_up, &l.moe.shared.w_down};
      for (int k = 0; k < 3; ++k) add(*sv[k], layer + "shared." + ffn[k]);
    }
  }
  add(weights.ple_model_proj, "ple_model_proj");
  for (size_t i = 0; i < weights.altup_proj.size(); ++i)  // (Gemma 3n's streams)
    add(weights.altup_proj[i], "altup_proj." + std::to_string(i));
  for (size_t i = 0; i < weights.altup_unembd.size(); ++i)
    add(weights.altup_unembd[i], "altup_unembd." + std::to_string(i));
  add(weights.output, "output");
  return out;
}

// The matrices the forward pass multiplies (not the embedding lookup's view of a tied output).
template <class F>
void for_each_matrix(Model& m, F&& f) {
  for (LayerWeights& l : m.weights.layers) {
    for (TensorView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) f(*v);
    for (TensorView* v : {&l.wq_a, &l.wq_b, &l.wkv_a}) f(*v);
    for (TensorView* v : {&l.ssm_qkv, &l.ssm_in, &l.ssm_z, &l.ssm_beta, &l.ssm_alpha, &l.ssm_out,
                          &l.sc_in, &l.sc_out, &l.ple_gate, &l.ple_proj, &l.laurel_l, &l.laurel_r})
      f(*v);
    for (TensorView& v : l.wk_b) f(v);
    for (TensorView& v : l.wv_b) f(v);
    for_each_moe_matrix(l.moe, f);
  }
  f(m.weights.ple_model_proj);  // (Gemma 4's per-layer embeddings; empty otherwise)
  for (TensorView& v : m.weights.altup_proj) f(v);  // (Gemma 3n's streams)
  for (TensorView& v : m.weights.altup_unembd) f(v);
  f(m.weights.output);
}

// The layouts the kernels multiply (kernels/prepare_weights.h): AMX repacks or dtype bfloat16's
// copies; the file's views stay as they are for everything else (embedding lookups, listings).
void prepare_matrices(Model& m, Storage& st, bool bf16_compute, bool amx) {
  std::vector<TensorView*> matrices;
  for_each_matrix(m, [&](TensorView& v) { matrices.push_back(&v); });
  m.amx = prepare_weights(matrices, bf16_compute, amx, st.prepared, m.quantized_activations);
  if (bf16_compute) m.compute_dtype = "bfloat16";
}

std::shared_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  const std::string& dtype = options.dtype;
  if (dtype != "auto" && dtype != "float32" && dtype != "bfloat16")
    throw InputError("dtype must be 'auto', 'float32' or 'bfloat16', got '" + dtype + "'");
  auto model = std::make_shared<Model>();
  auto storage = std::make_shared<Storage>();
  model->path = path;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw ModelError("no such model file or folder: '" + path + "'");
  if (fs::is_directory(status)) {
    model->format = "safetensors";
    load_hf(*model, *storage);
  } else {
    model->format = "gguf";
    {
      MappedFile f(path);
      if (f.size() < 4 || std::memcmp(f.data(), "GGUF", 4) != 0) {
        // A file of a Hugging Face folder (a safetensors shard, config.json): name the folder.
        const fs::path parent = fs::path(path).parent_path();
        if (!parent.empty() && fs::exists(parent / "config.json"))
          throw ModelError("'" + path + "' is not a GGUF file; it is a file of the Hugging Face " +
                           "model folder '" + parent.string() + "': pass the folder");
        throw ModelError("'" + path +
                         "' is neither a GGUF file (bad magic) nor a Hugging Face folder");
      }
    }
    load_gguf(*model, *storage);
  }
  model->quantized_activations = options.quantized_activations;
  const bool amx = options.amx && repack_default();
  prepare_matrices(*model, *storage, dtype == "bfloat16", amx);
  model->storage = storage;
  return model;
}

}  // namespace ossa
