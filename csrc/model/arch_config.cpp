#include "model/arch_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <variant>

#include "util/error.h"

namespace ossa {

namespace {

// Gemma's sliding_window_pattern: layer i is global when (i + 1) % pattern == 0.
std::vector<uint8_t> pattern_layers(int n_layer, int64_t pattern) {
  std::vector<uint8_t> out(static_cast<size_t>(n_layer));
  for (int i = 0; i < n_layer; ++i) out[i] = pattern > 0 && (i + 1) % pattern != 0;
  return out;
}

int window_of(int64_t w, const std::string& where) {
  if (w < 0 || w > (int64_t{1} << 30))
    throw ModelError("invalid sliding window " + std::to_string(w) + " (" + where + ")");
  return static_cast<int>(w);
}

// {arch}.attention.sliding_window_pattern when it is a bool per layer (true: sliding); empty when
// the key is absent or an integer (the caller's default then applies).
std::vector<uint8_t> gguf_layer_pattern(const GGUFFile& g, const std::string& key, int n_layer) {
  std::vector<uint8_t> out;
  const GGUFValue* p = g.find(key);
  if (p == nullptr || p->type != GGUFType::ARRAY) return out;
  const auto& arr = std::get<std::shared_ptr<GGUFArray>>(p->value);
  if (p->elem_type != GGUFType::BOOL || arr == nullptr ||
      arr->size() != static_cast<size_t>(n_layer))
    throw ModelError(key + " must be one bool per layer");
  for (const GGUFValue& v : *arr) out.push_back(std::get<bool>(v.value) ? 1 : 0);
  return out;
}

// config.json's layer_types (1: "sliding_attention"); empty when absent.
std::vector<uint8_t> hf_layer_types(const Json& cfg, int n_layer) {
  std::vector<uint8_t> out;
  const JsonValue* types = cfg.get("layer_types");
  if (types == nullptr) return out;
  if (!types->is_array() || types->array.size() != static_cast<size_t>(n_layer))
    throw ModelError("config 'layer_types' in '" + cfg.path + "' must list one type per layer");
  for (const JsonValue& t : types->array) {
    if (!t.is_string() || (t.string != "sliding_attention" && t.string != "full_attention"))
      throw ModelError("config 'layer_types' in '" + cfg.path + "' holds an unknown layer type");
    out.push_back(t.string == "sliding_attention");
  }
  return out;
}

}  // namespace

void gemma3_config_gguf(const GGUFFile& g, ModelConfig& c) {
  const bool gemma2 = c.arch == "gemma2", gemma1 = c.arch == "gemma";
  const std::string k = c.arch + ".";
  c.rope_style = RopeStyle::Neox;
  c.qk_norm = c.arch == "gemma3";
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.sliding_window = gemma1 ? 0
                            : window_of(g.get_int(k + "attention.sliding_window", 0),
                                        k + "attention.sliding_window");
  if (c.sliding_window > 0) {
    c.layer_sliding = gguf_layer_pattern(g, k + "attention.sliding_window_pattern", c.n_layer);
    if (c.layer_sliding.empty())
      c.layer_sliding = pattern_layers(
          c.n_layer, g.get_int(k + "attention.sliding_window_pattern", gemma2 ? 2 : 6));
    if (!gemma2)
      c.rope_theta_swa = static_cast<float>(g.get_float(k + "rope.freq_base_swa", 10000.0));
  }
  const double scale = g.get_float(k + "attention.scale", 0.0);
  const bool big = !gemma1 && c.n_layer == (gemma2 ? 46 : 62);  // the 27B models
  const double scalar =
      big ? static_cast<double>(c.n_embd / c.n_head) : static_cast<double>(c.head_dim);
  c.attn_scale = static_cast<float>(scale > 0.0 ? scale : 1.0 / std::sqrt(scalar));
  c.final_softcap = static_cast<float>(g.get_float(k + "final_logit_softcapping", 0.0));
  if (gemma2) c.attn_softcap = static_cast<float>(g.get_float(k + "attn_logit_softcapping", 0.0));
}

void gemma3_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string& path = cfg.path;
  const bool gemma1 = c.arch == "gemma", gemma2 = c.arch == "gemma2";
  const bool before3 = gemma1 || gemma2;  // GemmaConfig and Gemma2Config share these defaults
  auto dim = [&](const char* key, int64_t dflt, int64_t max = int64_t{1} << 30) {
    const int64_t v = cfg.integer(key, dflt);
    if (v <= 0 || v > max)
      throw ModelError(std::string("invalid ") + key + " " + std::to_string(v) + " in '" + path +
                       "'");
    return static_cast<int>(v);
  };
  c.n_vocab = dim("vocab_size", before3 ? 256000 : 262208);
  c.n_embd = dim("hidden_size", 2304);
  c.n_layer = dim("num_hidden_layers", 26, 4096);
  c.n_head = dim("num_attention_heads", 8, 65536);
  c.n_head_kv = dim("num_key_value_heads", 4, 65536);
  c.head_dim = dim("head_dim", 256, 65536);
  c.n_ff = dim("intermediate_size", 9216);
  c.n_ctx_train = dim("max_position_embeddings", before3 ? 8192 : 131072);
  c.rms_eps = static_cast<float>(cfg.number("rms_norm_eps", 1e-6));
  // Gemma 1 configs name it hidden_act (often "gelu"); the released models and llama.cpp use the
  // tanh approximation, and vLLM takes "gelu" to mean it (transformers 5 would run exact GELU).
  std::string act = cfg.string("hidden_activation", "");
  if (act.empty())
    act = gemma1 ? cfg.string("hidden_act", "gelu_pytorch_tanh") : "gelu_pytorch_tanh";
  if (act != "gelu_pytorch_tanh" && !(gemma1 && act == "gelu"))
    throw ModelError("hidden_activation '" + act + "' in '" + path +
                     "' is not supported (gelu_pytorch_tanh is)");
  if (cfg.boolean("attention_bias", false))
    throw ModelError("attention_bias=true in '" + path + "' is not supported");
  if (cfg.boolean("use_bidirectional_attention", false))
    throw ModelError("use_bidirectional_attention=true in '" + path +
                     "' (an encoder) is not supported");

  // RoPE: transformers 5 writes rope_parameters {full_attention: {...}, sliding_attention: {...}};
  // 4.x wrote rope_theta, rope_local_base_freq and rope_scaling (the global layers'). Gemma 2 has
  // one base for every layer (rope_theta, or a flat rope_parameters {rope_theta, rope_type}).
  c.rope_theta = static_cast<float>(cfg.number("rope_theta", before3 ? 1e4 : 1e6));
  c.rope_theta_swa = before3 ? 0.0f : static_cast<float>(cfg.number("rope_local_base_freq", 1e4));
  const JsonValue* scaling = cfg.get("rope_scaling");
  if (const JsonValue* params = cfg.get("rope_parameters"); params != nullptr) {
    if (!params->is_object()) throw ModelError("config 'rope_parameters' must be an object");
    const JsonValue* full = params->get("full_attention");
    const JsonValue* local = params->get("sliding_attention");
    if (full == nullptr && local == nullptr) {  // one set of parameters for every layer
      c.rope_theta = static_cast<float>(Json{*params, path}.number("rope_theta", c.rope_theta));
      if (!before3) c.rope_theta_swa = c.rope_theta;
      scaling = params;
    }
    if (full != nullptr && full->is_object()) {
      c.rope_theta = static_cast<float>(Json{*full, path}.number("rope_theta", c.rope_theta));
      scaling = full;
    }
    if (local != nullptr && local->is_object()) {
      const Json l{*local, path};
      c.rope_theta_swa = static_cast<float>(l.number("rope_theta", c.rope_theta_swa));
      if (l.string("rope_type", "default") != "default")
        throw ModelError("RoPE scaling of the sliding layers in '" + path + "' is not supported");
    }
  }
  if (scaling != nullptr && scaling->is_object()) {
    const Json s{*scaling, path};
    const std::string type = s.string("rope_type", s.string("type", "default"));
    if (type == "linear") {
      c.rope_scaling.type = "linear";
      c.rope_scaling.factor = static_cast<float>(s.number("factor", 1.0));
    } else if (type != "default") {
      throw ModelError("unsupported rope scaling type '" + type + "' in '" + path + "'");
    }
  }

  c.sliding_window = gemma1 ? 0 : window_of(cfg.integer("sliding_window", 4096), "'" + path + "'");
  c.layer_sliding = hf_layer_types(cfg, c.n_layer);
  if (c.layer_sliding.empty())
    c.layer_sliding =
        pattern_layers(c.n_layer, cfg.integer("sliding_window_pattern", before3 ? 2 : 6));
  if (c.sliding_window == 0) c.layer_sliding.clear();
  const double scalar = cfg.number("query_pre_attn_scalar", gemma1 ? c.head_dim : 256.0);
  if (!(scalar > 0.0)) throw ModelError("invalid query_pre_attn_scalar in '" + path + "'");
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(scalar));
  // Gemma2Config's defaults cap both (30 and 50), Gemma3TextConfig's neither; null: no capping.
  auto cap = [&](const char* key, double dflt) {
    const JsonValue* x = cfg.v.get(key);
    return static_cast<float>(x != nullptr && x->is_null() ? 0.0 : cfg.number(key, dflt));
  };
  c.final_softcap = cap("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
  if (gemma2) c.attn_softcap = cap("attn_logit_softcapping", 50.0);
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.rope_style = RopeStyle::Neox;
  c.qk_norm = c.arch == "gemma3";
  c.tied_embeddings = cfg.boolean("tie_word_embeddings", true);
}

namespace {

// LongRoPE's factor on cos/sin when a file does not give it (transformers' default): with
// factor = context / original context, sqrt(1 + ln(factor) / ln(original)), or 1 for factor <= 1.
float longrope_attn_factor(double factor, int original) {
  if (factor <= 1.0 || original <= 1) return 1.0f;
  return static_cast<float>(
      std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original))));
}

void check_longrope(const ModelConfig& c, const std::string& where) {
  const size_t half = static_cast<size_t>((c.rope_dim > 0 ? c.rope_dim : c.head_dim) / 2);
  const RopeScaling& s = c.rope_scaling;
  if (s.long_factor.size() != half || s.short_factor.size() != half)
    throw ModelError("LongRoPE factors of " + where + " must hold " + std::to_string(half) +
                     " values each");
  for (float v : s.long_factor)
    if (!(v > 0.0f) || !std::isfinite(v)) throw ModelError("invalid LongRoPE factor in " + where);
  for (float v : s.short_factor)
    if (!(v > 0.0f) || !std::isfinite(v)) throw ModelError("invalid LongRoPE factor in " + where);
  if (!(s.attn_factor > 0.0f) || !std::isfinite(s.attn_factor) || s.original_max_position < 1)
    throw ModelError("invalid LongRoPE attention factor or original context in " + where);
}

// LongRoPE from llama.cpp's rope factor tensors (none: no scaling), the original context from
// rope.scaling.original_context_length, the cos / sin factor from rope.scaling.attn_factor (Phi-3's
// converter writes it), else transformers' default (MiniCPM's and MiniCPM3's files hold no key).
void longrope_factors_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                           std::vector<float> short_factor) {
  if (long_factor.empty() && short_factor.empty()) return;
  const std::string k = c.arch + ".";
  RopeScaling& s = c.rope_scaling;
  s.type = "longrope";
  s.long_factor = std::move(long_factor);
  s.short_factor = std::move(short_factor);
  s.original_max_position = static_cast<int>(std::clamp<int64_t>(
      g.get_int(k + "rope.scaling.original_context_length", c.n_ctx_train), 1, int64_t{1} << 30));
  const double attn = g.get_float(k + "rope.scaling.attn_factor", 0.0);
  s.attn_factor = attn > 0.0 ? static_cast<float>(attn)
                             : longrope_attn_factor(
                                   static_cast<double>(c.n_ctx_train) / s.original_max_position,
                                   s.original_max_position);
  check_longrope(c, "the GGUF file");
}

void all_sliding(ModelConfig& c, int64_t window, const std::string& where) {
  c.sliding_window = window_of(window, where);
  c.layer_sliding.clear();
  if (c.sliding_window > 0) c.layer_sliding.assign(static_cast<size_t>(c.n_layer), 1);
}

}  // namespace

int rotated_dims(int64_t dims, const ModelConfig& c, const std::string& where) {
  if (dims <= 0 || dims > c.head_dim || dims % 2 != 0)
    throw ModelError("invalid rotated dimensions " + std::to_string(dims) + " (" + where + ")");
  return dims == c.head_dim ? 0 : static_cast<int>(dims);
}

void phi3_config_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                      std::vector<float> short_factor) {
  const std::string k = c.arch + ".";  // (phi3, phimoe)
  c.rope_style = RopeStyle::Neox;
  c.rope_dim = rotated_dims(g.get_int(k + "rope.dimension_count", c.head_dim), c,
                            k + "rope.dimension_count");
  window_config_gguf(g, c);
  longrope_factors_gguf(g, c, std::move(long_factor), std::move(short_factor));
}

namespace {

// MiniCPM's three multipliers from config.json (Granite's, under other names): embeddings times
// scale_emb, each sublayer's output times scale_depth / sqrt(layers), logits divided by hidden /
// dim_model_base (a null scale_depth / dim_model_base: 1); the config class's defaults given.
void minicpm_multipliers_hf(const Json& cfg, ModelConfig& c, double emb, double depth_dflt,
                            double base_dflt) {
  const JsonValue* depth = cfg.get("scale_depth");
  const JsonValue* base = cfg.get("dim_model_base");
  c.embd_scale = static_cast<float>(cfg.number("scale_emb", emb));
  const double sd = depth != nullptr && depth->is_null() ? std::sqrt(static_cast<double>(c.n_layer))
                                                         : cfg.number("scale_depth", depth_dflt);
  c.residual_scale = static_cast<float>(sd / std::sqrt(static_cast<double>(c.n_layer)));
  const double b = base != nullptr && base->is_null() ? static_cast<double>(c.n_embd)
                                                      : cfg.number("dim_model_base", base_dflt);
  c.logit_scale = static_cast<float>(static_cast<double>(c.n_embd) / b);
  if (!(c.embd_scale > 0.0f) || !(c.residual_scale > 0.0f) || !(c.logit_scale > 0.0f) ||
      !std::isfinite(c.logit_scale))
    throw ModelError("invalid scale_emb, scale_depth or dim_model_base in '" + cfg.path + "'");
}

}  // namespace

void deci_layers(ModelConfig& c, const std::vector<int64_t>& heads, const std::vector<int64_t>& kv,
                 const std::vector<int64_t>& ff, const std::string& where) {
  const size_t n = static_cast<size_t>(c.n_layer);
  if (heads.size() != n || kv.size() != n || ff.size() != n)
    throw ModelError("per-layer head, KV head and feed-forward counts of " + where + " must list " +
                     std::to_string(n) + " layers");
  int64_t kv_heads = 0;
  c.layer_no_mixer.assign(n, 0);
  c.layer_linear_attn.assign(n, 0);
  c.layer_no_ffn.assign(n, 0);
  c.layer_n_ff.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (heads[i] != 0 && heads[i] != c.n_head)
      throw ModelError("the layers' query head counts differ in " + where + " (not supported)");
    if (kv[i] < 0 || ff[i] < 0 || ff[i] > (int64_t{1} << 30))
      throw ModelError("invalid KV head count or feed-forward size of layer " + std::to_string(i) +
                       " in " + where);
    if (heads[i] > 0 && kv[i] > 0) {
      if (kv_heads != 0 && kv[i] != kv_heads)
        throw ModelError("the attention layers' KV head counts differ in " + where +
                         " (not supported)");
      kv_heads = kv[i];
    }
    c.layer_no_mixer[i] = heads[i] == 0;
    c.layer_linear_attn[i] = heads[i] > 0 && kv[i] == 0;
    c.layer_no_ffn[i] = ff[i] == 0;
    c.layer_n_ff[i] = static_cast<int>(ff[i] > 0 ? ff[i] : c.n_ff);
  }
  if (kv_heads > 0) c.n_head_kv = static_cast<int>(kv_heads);
}

namespace {

// DeciLM's feed-forward size from its multiplier (the converter's and the model's rounding).
int64_t deci_ffn_size(double mult, int64_t hidden) {
  const int64_t size = static_cast<int64_t>(2.0 * mult * static_cast<double>(hidden) / 3.0);
  return size % 256 == 0 ? size : size + 256 - size % 256;
}

struct DeciBlocks {
  std::vector<int64_t> heads, kv, ff;
};

DeciBlocks deci_blocks(const Json& cfg) {
  const JsonValue* blocks = cfg.get("block_configs");
  const int64_t n_head = cfg.integer("num_attention_heads", 0);
  const int64_t hidden = cfg.integer("hidden_size", 0);
  if (blocks == nullptr || !blocks->is_array())
    throw ModelError("config 'block_configs' in '" + cfg.path + "' must be a list");
  DeciBlocks out;
  for (const JsonValue& b : blocks->array) {
    const JsonValue* attn = b.get("attention");
    const JsonValue* ffn = b.get("ffn");
    if (!b.is_object() || attn == nullptr || !attn->is_object() || ffn == nullptr ||
        !ffn->is_object())
      throw ModelError("config 'block_configs' in '" + cfg.path +
                       "' must hold attention and ffn objects");
    const Json a{*attn, cfg.path}, f{*ffn, cfg.path};
    for (const char* key : {"window_length", "num_sink_tokens", "sparsify"}) {
      const JsonValue* v = a.get(key);
      if (v != nullptr && !v->is_null() && !(v->kind == JsonValue::Kind::Bool && !v->boolean))
        throw ModelError(std::string("block_configs attention ") + key + " in '" + cfg.path +
                         "' is not supported");
    }
    if (f.boolean("replace_with_linear", false))
      throw ModelError("block_configs ffn replace_with_linear in '" + cfg.path +
                       "' is not supported");
    const JsonValue* group = a.get("n_heads_in_group");
    const bool attn_noop = a.boolean("no_op", false);
    if (attn_noop || group == nullptr || group->is_null()) {
      out.heads.push_back(!attn_noop && a.boolean("replace_with_linear", false) ? n_head : 0);
      out.kv.push_back(0);
    } else {
      const int64_t g = a.integer("n_heads_in_group", 1);
      if (g <= 0 || n_head % g != 0)
        throw ModelError("invalid n_heads_in_group in '" + cfg.path + "'");
      out.heads.push_back(n_head);
      out.kv.push_back(n_head / g);
    }
    const JsonValue* mult = f.get("ffn_mult");
    if (f.boolean("no_op", false) || mult == nullptr || mult->is_null()) {
      out.ff.push_back(0);
    } else {
      const double m = f.number("ffn_mult", 0.0);
      if (!(m > 0.0) || !std::isfinite(m) || m > 1e4)
        throw ModelError("invalid ffn_mult in '" + cfg.path + "'");
      out.ff.push_back(deci_ffn_size(m, hidden));
    }
  }
  return out;
}

}  // namespace

void deci_keys(JsonValue& cfg, const std::string& path) {
  const DeciBlocks b = deci_blocks(Json{cfg, path});
  int64_t kv = 0, ff = 0;
  for (size_t i = 0; i < b.kv.size(); ++i) {
    if (b.heads[i] > 0 && b.kv[i] > 0 && kv == 0) kv = b.kv[i];
    ff = std::max(ff, b.ff[i]);
  }
  // (no attention layer: the query heads stand in, unused; no feed-forward: the hidden size)
  const auto put = [&](const char* key, int64_t value) {
    for (auto& [name, v] : cfg.object)
      if (name == key) {
        v = parse_json(std::to_string(value));
        return;
      }
    cfg.object.emplace_back(key, parse_json(std::to_string(value)));
  };
  const Json json{cfg, path};
  put("num_key_value_heads", kv > 0 ? kv : json.integer("num_attention_heads", 1));
  put("intermediate_size", ff > 0 ? ff : json.integer("hidden_size", 1));
}

void deci_config_hf(const Json& cfg, ModelConfig& c) {
  const DeciBlocks b = deci_blocks(cfg);
  deci_layers(c, b.heads, b.kv, b.ff, "'" + cfg.path + "'");
}

void minicpm3_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c) {
  deepseek2_config_hf(cfg, c);     // (its latent attention: DeepSeek V2's)
  c.rope_style = RopeStyle::Neox;  // (rotate_half, not DeepSeek's interleaved pairs)
  longrope_config_hf(cfg, scaling, c);
  minicpm_multipliers_hf(cfg, c, 12.0, 1.4, 256.0);
}

void minicpm_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c) {
  const JsonValue* experts = cfg.get("num_experts");
  if (experts != nullptr && experts->is_number() && experts->number > 0)
    throw ModelError("MiniCPM with experts (num_experts) in '" + cfg.path + "' is not supported");
  longrope_config_hf(cfg, scaling, c);
  minicpm_multipliers_hf(cfg, c, 1.0, 1.0, 1.0);  // (MiniCPMConfig's defaults)
}

void minicpm_config_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                         std::vector<float> short_factor, const std::string& path) {
  if (g.get_int(c.arch + ".expert_count", 0) > 0)
    throw ModelError("MiniCPM with experts (minicpm.expert_count) in '" + path +
                     "' is not supported");
  granite_config_gguf(g, c);  // (the same keys under minicpm.; no attention.scale)
  longrope_factors_gguf(g, c, std::move(long_factor), std::move(short_factor));
}

void phimoe_config_hf(const JsonValue* scaling, ModelConfig& c, const std::string& path) {
  c.layer_norm = c.norm_bias = true;  // (nn.LayerNorm, eps rms_norm_eps)
  if (c.rope_scaling.type != "longrope" || scaling == nullptr || !scaling->is_object()) return;
  // PhimoeConfig's own factors on cos / sin: short_mscale within the original context,
  // long_mscale beyond it (one factor here: differing ones are refused)
  const Json s{*scaling, path};
  const double shrt = s.number("short_mscale", 0.0), lng = s.number("long_mscale", shrt);
  if (shrt <= 0.0) return;  // (absent: LongRoPE's default factor, as Phi-3)
  if (lng != shrt || !std::isfinite(shrt))
    throw ModelError("short_mscale and long_mscale differ in '" + path + "' (not supported)");
  c.rope_scaling.attn_factor = static_cast<float>(shrt);
}

void phi3_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c) {
  const std::string& path = cfg.path;
  const std::string act = cfg.string("hidden_act", "silu");
  if (act != "silu")
    throw ModelError("hidden_act '" + act + "' in '" + path + "' is not supported (silu is)");
  c.rope_style = RopeStyle::Neox;
  double partial = cfg.number("partial_rotary_factor", 1.0);
  if (scaling != nullptr && scaling->is_object())
    partial = Json{*scaling, path}.number("partial_rotary_factor", partial);
  if (!(partial > 0.0 && partial <= 1.0))
    throw ModelError("invalid partial_rotary_factor in '" + path + "'");
  c.rope_dim = rotated_dims(static_cast<int64_t>(c.head_dim * partial), c, "'" + path + "'");
  all_sliding(c, cfg.integer("sliding_window", 0), "'" + path + "'");
  longrope_config_hf(cfg, scaling, c);
}

void longrope_config_hf(const Json& cfg, const JsonValue* scaling, ModelConfig& c) {
  const std::string& path = cfg.path;
  if (scaling == nullptr || !scaling->is_object()) return;
  const Json s{*scaling, path};
  const std::string type = s.string("rope_type", s.string("type", "default"));
  if (type != "longrope" && type != "su") return;  // other types: the caller's
  auto factors = [&](const char* key) {
    const JsonValue* v = s.get(key);
    std::vector<float> out;
    if (v == nullptr || !v->is_array())
      throw ModelError(std::string("rope scaling '") + key + "' in '" + path + "' must be a list");
    for (const JsonValue& x : v->array) {
      if (!x.is_number())
        throw ModelError(std::string("rope scaling '") + key + "' in '" + path +
                         "' must hold numbers");
      out.push_back(static_cast<float>(x.number));
    }
    return out;
  };
  RopeScaling& r = c.rope_scaling;
  r.type = "longrope";
  r.long_factor = factors("long_factor");
  r.short_factor = factors("short_factor");
  // The top-level key wins (transformers copies it into rope_parameters).
  const int64_t original =
      cfg.integer("original_max_position_embeddings",
                  s.integer("original_max_position_embeddings", c.n_ctx_train));
  r.original_max_position = static_cast<int>(std::clamp<int64_t>(original, 1, int64_t{1} << 30));
  const double factor =
      s.number("factor", static_cast<double>(c.n_ctx_train) / r.original_max_position);
  const double attn = s.number("attention_factor", 0.0);
  r.attn_factor =
      attn > 0.0 ? static_cast<float>(attn) : longrope_attn_factor(factor, r.original_max_position);
  check_longrope(c, "'" + path + "'");
}

namespace {

std::vector<uint8_t> nope_every(int n_layer, int64_t interval) {
  std::vector<uint8_t> out(static_cast<size_t>(n_layer));
  for (int i = 0; i < n_layer; ++i) out[i] = interval > 0 && (i + 1) % interval == 0;
  return out;
}

// config.json's NoPE layers (SmolLM3, Llama 4): no_rope_layers (1 = RoPE, transformers' naming; at
// least one entry per layer), or, where that is absent or empty, every no_rope_layer_interval-th
// (default 4).
std::vector<uint8_t> nope_layers_hf(const Json& cfg, int n_layer) {
  const std::string where = "'" + cfg.path + "'";
  const JsonValue* list = cfg.get("no_rope_layers");
  if (list == nullptr || list->is_null() || (list->is_array() && list->array.empty())) {
    const int64_t interval = cfg.integer("no_rope_layer_interval", 4);
    if (interval < 0) throw ModelError("invalid no_rope_layer_interval in " + where);
    return nope_every(n_layer, interval);
  }
  if (!list->is_array() || list->array.size() < static_cast<size_t>(n_layer))
    throw ModelError("config 'no_rope_layers' in " + where + " must hold one entry per layer");
  std::vector<uint8_t> out;
  for (int i = 0; i < n_layer; ++i) {
    const JsonValue& v = list->array[static_cast<size_t>(i)];
    if (!v.is_number() || (v.number != 0.0 && v.number != 1.0))
      throw ModelError("config 'no_rope_layers' in " + where + " must hold 0 or 1 per layer");
    out.push_back(v.number == 0.0);
  }
  return out;
}

// A window on every layer but each interval-th (OLMo 3, EXAONE 4's hybrid layout).
std::vector<uint8_t> sliding_but_every(int n_layer, int64_t interval) {
  std::vector<uint8_t> out = nope_every(n_layer, interval);
  for (uint8_t& v : out) v = !v;
  return out;
}

}  // namespace

void yarn_config_hf(const Json& cfg, const Json& s, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  RopeScaling& r = c.rope_scaling;
  r.type = "yarn";
  const int64_t original = cfg.integer(
      "original_max_position_embeddings",
      s.integer("original_max_position_embeddings", cfg.integer("max_position_embeddings", 0)));
  if (original <= 0 || original > (int64_t{1} << 30))
    throw ModelError("invalid original_max_position_embeddings for YaRN in " + where);
  r.original_max_position = static_cast<int>(original);
  const double factor =
      s.number("factor", static_cast<double>(cfg.integer("max_position_embeddings", original)) /
                             static_cast<double>(original));
  if (!(factor > 0.0) || !std::isfinite(factor))
    throw ModelError("invalid YaRN factor in " + where);
  r.factor = static_cast<float>(factor);
  auto mscale = [&](double m) { return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
  double attn = s.number("attention_factor", 0.0);
  if (attn <= 0.0) {
    const double m = s.number("mscale", 0.0), m_all = s.number("mscale_all_dim", 0.0);
    attn = m != 0.0 && m_all != 0.0 ? mscale(m) / mscale(m_all) : mscale(1.0);
  }
  r.attn_factor = static_cast<float>(attn);
  // (transformers takes `or` defaults: 0 means the default too)
  const double fast = s.number("beta_fast", 0.0), slow = s.number("beta_slow", 0.0);
  r.beta_fast = static_cast<float>(fast != 0.0 ? fast : 32.0);
  r.beta_slow = static_cast<float>(slow != 0.0 ? slow : 1.0);
  r.truncate = s.boolean("truncate", true);
  if (!(r.beta_fast > 0.0f) || !(r.beta_slow > 0.0f) || !std::isfinite(r.attn_factor))
    throw ModelError("invalid YaRN beta_fast / beta_slow / attention_factor in " + where);
}

namespace {

float positive_scale(double v, const char* name, const std::string& where) {
  if (!(v > 0.0) || !std::isfinite(v))
    throw ModelError(std::string("invalid ") + name + " " + std::to_string(v) + " in " + where);
  return static_cast<float>(v);
}

}  // namespace

void granite_config_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string w = "'" + c.arch + "' metadata", k = c.arch + ".";
  c.embd_scale = positive_scale(g.get_float(k + "embedding_scale", 1.0), "embedding_scale", w);
  c.residual_scale = positive_scale(g.get_float(k + "residual_scale", 1.0), "residual_scale", w);
  c.logit_scale = positive_scale(g.get_float(k + "logit_scale", 1.0), "logit_scale", w);
  const double scale = g.get_float(k + "attention.scale", 0.0);
  c.attn_scale = scale == 0.0 ? 0.0f : positive_scale(scale, "attention.scale", w);
}

void granite_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string w = "'" + cfg.path + "'";
  c.embd_scale = positive_scale(cfg.number("embedding_multiplier", 1.0), "embedding_multiplier", w);
  c.residual_scale =
      positive_scale(cfg.number("residual_multiplier", 1.0), "residual_multiplier", w);
  c.attn_scale = positive_scale(cfg.number("attention_multiplier", 1.0), "attention_multiplier", w);
  c.logit_scale = positive_scale(cfg.number("logits_scaling", 1.0), "logits_scaling", w);
}

void smollm3_config_gguf(ModelConfig& c) { c.layer_nope = nope_every(c.n_layer, 4); }

void granite_swa_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.attn_sinks = true;
  const JsonValue* raw = cfg.v.get("sliding_window");
  all_sliding(c,
              raw == nullptr   ? 128
              : raw->is_null() ? 0
                               : cfg.integer("sliding_window", 128),
              where);
  if (c.sliding_window > 0) {
    std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
    if (types.empty())
      for (int i = 0; i < c.n_layer; ++i) types.push_back(i % 4 != 0);
    c.layer_sliding = std::move(types);
  }
  const JsonValue* thetas = cfg.get("layer_rope_theta");
  if (thetas == nullptr || thetas->is_null()) return;
  if (!thetas->is_array() || static_cast<int>(thetas->array.size()) != c.n_layer)
    throw ModelError("config 'layer_rope_theta' in " + where + " must list one base per layer");
  double full = 0.0, local = 0.0;  // (0: none seen yet)
  std::vector<uint8_t> nope(static_cast<size_t>(c.n_layer), 0);
  for (int i = 0; i < c.n_layer; ++i) {
    const JsonValue& v = thetas->array[static_cast<size_t>(i)];
    if (!v.is_number() || !(v.number >= 0.0) || !std::isfinite(v.number))
      throw ModelError("config 'layer_rope_theta' in " + where + " holds an invalid base");
    if (v.number == 0.0) {
      nope[static_cast<size_t>(i)] = 1;
      continue;
    }
    const bool sliding = !c.layer_sliding.empty() && c.layer_sliding[static_cast<size_t>(i)] != 0;
    double& slot = sliding ? local : full;
    if (slot != 0.0 && slot != v.number)
      throw ModelError("config 'layer_rope_theta' in " + where +
                       " gives layers of one attention type different RoPE bases (one base for "
                       "the full layers and one for the sliding ones is supported)");
    slot = v.number;
  }
  if (std::find(nope.begin(), nope.end(), 1) != nope.end()) c.layer_nope = std::move(nope);
  if (full != 0.0 || local != 0.0) c.rope_theta = static_cast<float>(full != 0.0 ? full : local);
  if (full != 0.0 && local != 0.0 && local != full) {
    if (c.rope_scaling.type != "none")
      throw ModelError("config 'layer_rope_theta' in " + where +
                       " gives the sliding layers their own RoPE base under rope scaling, which "
                       "is not supported");
    c.rope_theta_swa = static_cast<float>(local);
  }
}

const JsonValue* olmo3_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  all_sliding(c, cfg.integer("sliding_window", 4096), where);
  if (c.sliding_window > 0) {
    std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
    c.layer_sliding = types.empty() ? sliding_but_every(c.n_layer, 4) : std::move(types);
  }
  const JsonValue* params = cfg.get("rope_parameters");
  const JsonValue* full =
      params != nullptr && params->is_object() ? params->get("full_attention") : nullptr;
  const JsonValue* local =
      params != nullptr && params->is_object() ? params->get("sliding_attention") : nullptr;
  for (const JsonValue* v : {full, local})
    if (v != nullptr && !v->is_object())
      throw ModelError("config 'rope_parameters' in " + where +
                       " must hold objects per layer type");
  const double top = cfg.number("rope_theta", 10000.0);
  const double full_theta = full != nullptr ? Json{*full, cfg.path}.number("rope_theta", top) : top;
  const double local_theta =
      local != nullptr ? Json{*local, cfg.path}.number("rope_theta", top) : full_theta;
  // The sliding layers' own table: their base, no scaling (transformers scales the full layers
  // only).
  const JsonValue* scaling = full != nullptr ? full : cfg.get("rope_scaling");
  const bool scaled =
      scaling != nullptr && scaling->is_object() &&
      Json{*scaling, cfg.path}.string(
          "rope_type", Json{*scaling, cfg.path}.string("type", "default")) != "default";
  if (c.sliding_window > 0 && (scaled || local_theta != full_theta))
    c.rope_theta_swa = static_cast<float>(local_theta);
  return full;
}

namespace {
// With a window, EXAONE 4's global layers attend without RoPE.
void exaone4_nope(ModelConfig& c) {
  c.layer_nope.clear();
  if (c.sliding_window == 0) return;
  for (int i = 0; i < c.n_layer; ++i) c.layer_nope.push_back(c.layer_sliding[i] == 0);
}
}  // namespace

void exaone4_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  const JsonValue* raw = cfg.v.get("sliding_window");  // (absent: 4096; null: none)
  all_sliding(c, raw == nullptr ? 4096 : cfg.integer("sliding_window", 0), where);
  if (c.sliding_window == 0) return;
  std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
  if (types.empty()) {
    const JsonValue* pat = cfg.get("sliding_window_pattern");
    if (pat != nullptr && pat->is_string()) {  // L: sliding, G: global, repeated over the layers
      const std::string& letters = pat->string;
      if (letters.empty() || letters.find_first_not_of("LG") != std::string::npos)
        throw ModelError("config 'sliding_window_pattern' in " + where +
                         " must be an integer or L/G letters");
      for (int i = 0; i < c.n_layer; ++i)
        types.push_back(letters[static_cast<size_t>(i) % letters.size()] == 'L');
    } else {
      const int64_t every = cfg.integer("sliding_window_pattern", 4);
      if (every < 1)
        throw ModelError("config 'sliding_window_pattern' in " + where + " must be >= 1");
      types = sliding_but_every(c.n_layer, every);
    }
  }
  c.layer_sliding = std::move(types);
  exaone4_nope(c);
}

void exaone4_config_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string key = c.arch + ".attention.sliding_window";
  std::vector<uint8_t> pattern = gguf_layer_pattern(g, key + "_pattern", c.n_layer);
  if (pattern.empty() && c.n_layer != 64) {  // (llama.cpp: no window but for the 32B model)
    all_sliding(c, 0, key);
    return;
  }
  all_sliding(c, g.get_int(key, 4096), key);
  if (c.sliding_window == 0) return;
  c.layer_sliding = pattern.empty() ? sliding_but_every(c.n_layer, 4) : std::move(pattern);
  exaone4_nope(c);
}

void olmo_window_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string key = c.arch + ".attention.sliding_window";
  if (c.sliding_window == 0) return;
  // (OLMo 3: the sliding layers' RoPE unscaled, at rope.freq_base_swa where the file has one, as
  // llama.cpp's olmo2 graph runs them and transformers' Olmo3 defines them)
  const double local = g.get_float(c.arch + ".rope.freq_base_swa", c.rope_theta);
  if (c.rope_scaling.type != "none" || local != static_cast<double>(c.rope_theta))
    c.rope_theta_swa = static_cast<float>(local);
  if (!gguf_layer_pattern(g, key + "_pattern", c.n_layer).empty()) return;
  c.layer_sliding = sliding_but_every(c.n_layer, 4);
}

void gpt_oss_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.attn_sinks = true;
  c.o_bias = cfg.boolean("attention_bias", true);
  all_sliding(c, cfg.integer("sliding_window", 128), where);
  if (c.sliding_window == 0) return;
  std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
  if (types.empty())
    for (int i = 0; i < c.n_layer; ++i) types.push_back(i % 2 == 0);
  c.layer_sliding = std::move(types);
}

void gpt_oss_config_gguf(const GGUFFile& g, ModelConfig& c, bool o_bias) {
  c.attn_sinks = true;
  c.o_bias = o_bias;
  if (c.sliding_window > 0 && g.find(c.arch + ".attention.sliding_window_pattern") == nullptr)
    for (int i = 0; i < c.n_layer; ++i) c.layer_sliding[static_cast<size_t>(i)] = i % 2 == 0;
}

void smollm3_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.layer_nope = nope_layers_hf(cfg, c.n_layer);
  if (std::find(c.layer_nope.begin(), c.layer_nope.end(), 1) == c.layer_nope.end())
    c.layer_nope.clear();
  c.sliding_window = 0;
  c.layer_sliding.clear();
  if (!cfg.boolean("use_sliding_window", false)) return;
  const int window = window_of(cfg.integer("sliding_window", 0), where);
  std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
  if (types.empty()) types = c.layer_nope;  // SmolLM3Config's default: the NoPE layers
  if (window == 0 || std::find(types.begin(), types.end(), 1) == types.end()) return;
  c.sliding_window = window;
  c.layer_sliding = std::move(types);
}

void window_config_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string key = c.arch + ".attention.sliding_window";
  all_sliding(c, g.get_int(key, 0), key);
  if (c.sliding_window == 0) return;
  std::vector<uint8_t> pattern = gguf_layer_pattern(g, key + "_pattern", c.n_layer);
  if (!pattern.empty()) c.layer_sliding = std::move(pattern);
}

void window_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  const std::string& a = c.arch;
  if (a == "starcoder2") {  // (a window on every layer where the config sets one)
    all_sliding(c, cfg.integer("sliding_window", 0), where);
    return;
  }
  if (a == "mistral" || a == "mixtral") {
    // MistralConfig's default window is 4096 (a file without the key gets it); null means none.
    const JsonValue* raw = cfg.v.get("sliding_window");
    const int64_t dflt = a == "mistral" && raw == nullptr ? 4096 : 0;
    all_sliding(c, cfg.integer("sliding_window", dflt), where);
    // (Ministral 8B, MinistralConfig: the window on the layers layer_types calls sliding)
    if (cfg.string("model_type", "") == "ministral" && c.sliding_window > 0) {
      std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
      if (!types.empty()) c.layer_sliding = std::move(types);
      if (std::find(c.layer_sliding.begin(), c.layer_sliding.end(), 1) == c.layer_sliding.end()) {
        c.sliding_window = 0;
        c.layer_sliding.clear();
      }
    }
    return;
  }
  if (cfg.string("model_type", "") == "cwm") {  // CwmConfig: layer_types, else 3 of every 4 layers
    const JsonValue* raw = cfg.v.get("sliding_window");
    all_sliding(c, raw == nullptr ? 8192 : cfg.integer("sliding_window", 0), where);
    if (c.sliding_window == 0) return;
    std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
    if (types.empty())
      for (int i = 0; i < c.n_layer; ++i) types.push_back(i % 4 != 0);
    c.layer_sliding = std::move(types);
    if (std::find(c.layer_sliding.begin(), c.layer_sliding.end(), 1) == c.layer_sliding.end()) {
      c.sliding_window = 0;
      c.layer_sliding.clear();
    }
    return;
  }
  if (a == "dots1") {  // Dots1Config: layer_types, else from max_window_layers (62) on
    const JsonValue* raw = cfg.v.get("sliding_window");
    all_sliding(c, raw == nullptr ? 4096 : cfg.integer("sliding_window", 0), where);
    if (c.sliding_window == 0) return;
    std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
    if (types.empty()) {
      const int64_t first = cfg.integer("max_window_layers", 62);
      types.resize(static_cast<size_t>(c.n_layer));
      for (int i = 0; i < c.n_layer; ++i) types[static_cast<size_t>(i)] = i >= first;
    }
    c.layer_sliding = std::move(types);
    if (std::find(c.layer_sliding.begin(), c.layer_sliding.end(), 1) == c.layer_sliding.end()) {
      c.sliding_window = 0;
      c.layer_sliding.clear();
    }
    return;
  }
  if (a != "qwen2" && a != "qwen3" && a != "qwen2moe" && a != "qwen3moe" && a != "qwen2vl")
    return;  // llama: none
  // The Qwen configs keep sliding_window (4096 by default) but apply it only with
  // use_sliding_window.
  const bool use = cfg.boolean("use_sliding_window", false);
  all_sliding(c, use ? cfg.integer("sliding_window", 4096) : 0, where);
  if (c.sliding_window == 0 || a == "qwen3moe") return;  // Qwen3-MoE: every layer
  std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
  if (types.empty()) {
    // transformers' defaults: Qwen2 / Qwen3 window the layers from max_window_layers on, Qwen2-MoE
    // the even-numbered layers below it.
    const int64_t max_window_layers = cfg.integer("max_window_layers", 28);
    types.resize(static_cast<size_t>(c.n_layer));
    for (int i = 0; i < c.n_layer; ++i)
      types[i] = a == "qwen2moe" ? (i % 2 == 0 && i < max_window_layers) : i >= max_window_layers;
  }
  c.layer_sliding = std::move(types);
  if (std::find(c.layer_sliding.begin(), c.layer_sliding.end(), 1) == c.layer_sliding.end()) {
    c.sliding_window = 0;
    c.layer_sliding.clear();
  }
}

namespace {

// The latent attention's sizes into the config: one cached row of qk_rope + kv_lora_rank values,
// its first qk_rope rotated, and the scores' scale with YaRN's mscale (mscale_coef * ln(factor)).
void mla_config(ModelConfig& c, int64_t q_lora, int64_t kv_lora, int64_t nope, int64_t rope,
                int64_t v, double mscale_coef, const std::string& where) {
  auto dim = [&](int64_t x, const char* what, int64_t lo) {
    if (x < lo || x > 65536)
      throw ModelError(std::string("invalid ") + what + " " + std::to_string(x) + " in " + where);
    return static_cast<int>(x);
  };
  MlaConfig& a = c.mla;
  a.q_lora_rank = dim(q_lora, "q_lora_rank", 0);
  a.kv_lora_rank = dim(kv_lora, "kv_lora_rank", 1);
  a.qk_nope = dim(nope, "qk_nope_head_dim", 1);
  a.qk_rope = dim(rope, "qk_rope_head_dim", 2);
  a.v_head_dim = dim(v, "v_head_dim", 1);
  if (a.qk_rope % 2 != 0)
    throw ModelError("odd qk_rope_head_dim " + std::to_string(rope) + " in " + where);
  c.head_dim = a.qk_rope + a.kv_lora_rank;
  c.n_head_kv = 1;
  c.rope_dim = a.qk_rope;
  double mscale = 1.0;
  const RopeScaling& r = c.rope_scaling;
  if (r.type == "yarn" && r.factor > 1.0f && mscale_coef > 0.0)
    mscale = 1.0 + mscale_coef * std::log(static_cast<double>(r.factor));
  c.attn_scale = static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(nope + rope)));
}

}  // namespace

namespace {

// The multi-token-prediction layers llama.cpp's converter appends (nextn_predict_layers: GLM-4.5,
// GLM-4.7-Flash): not run, n_layer excludes them.
void skip_mtp_layers(const GGUFFile& g, ModelConfig& c, const std::string& where) {
  const std::string key = c.arch + ".nextn_predict_layers";
  const int64_t nextn = g.get_int(key, 0);
  if (nextn < 0 || nextn >= c.n_layer)
    throw ModelError("invalid " + key + " " + std::to_string(nextn) + " in " + where);
  c.n_layer -= static_cast<int>(nextn);
}

// Llama 4's attention temperature from its two values (0 scale: off), by the names of the file's
// keys for the errors.
void set_temperature(ModelConfig& c, double scale, int64_t length, const std::string& scale_name,
                     const std::string& length_name, const std::string& where) {
  if (scale == 0.0) return;
  c.attn_temp_scale = positive_scale(scale, scale_name.c_str(), where);
  c.attn_temp_length = static_cast<int>(std::clamp<int64_t>(length, 0, int64_t{1} << 30));
  if (c.attn_temp_length < 1)
    throw ModelError(scale_name + " without " + length_name + " in " + where);
}

}  // namespace

void deepseek2_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  const int64_t rope = g.get_int(k + "rope.dimension_count", 64);
  const int64_t key_mla = g.get_int(k + "attention.key_length_mla", 0);
  const int64_t nope = (key_mla > 0 ? key_mla : g.get_int(k + "attention.key_length", 192)) - rope;
  const int64_t v = key_mla > 0 ? g.get_int(k + "attention.value_length_mla", 0)
                                : g.get_int(k + "attention.value_length", 128);
  c.rope_style = RopeStyle::Interleaved;
  // llama.cpp cancels YaRN's own cos/sin factor for deepseek2 (transformers' is
  // mscale / mscale_all_dim, 1 in every DeepSeek release) and scales the scores instead.
  c.rope_scaling.attn_factor = 1.0f;
  mla_config(c, g.get_int(k + "attention.q_lora_rank", 0),
             g.get_int(k + "attention.kv_lora_rank", 0), nope, rope, v,
             g.get_float(k + "rope.scaling.yarn_log_multiplier", 0.0), where);
  skip_mtp_layers(g, c, where);  // (GLM-4.7-Flash's files)
}

void minicpm3_config_gguf(const GGUFFile& g, ModelConfig& c, std::vector<float> long_factor,
                          std::vector<float> short_factor, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  const int64_t rope = g.get_int(k + "rope.dimension_count", 32);
  // (llama.cpp's converter writes key_length = nope + rope and no value length: hidden / heads)
  const int64_t key = g.get_int(k + "attention.key_length", 96);
  const int64_t v = g.get_int(k + "attention.value_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  mla_config(c, g.get_int(k + "attention.q_lora_rank", 0),
             g.get_int(k + "attention.kv_lora_rank", 0), key - rope, rope, v, 0.0, where);
  c.rope_style = RopeStyle::Neox;
  // llama.cpp's graph hard-codes the release's multipliers (scale_emb 12, scale_depth 1.4,
  // dim_model_base 256): no key holds them
  c.embd_scale = 12.0f;
  c.residual_scale = static_cast<float>(1.4 / std::sqrt(static_cast<double>(c.n_layer)));
  c.logit_scale = static_cast<float>(static_cast<double>(c.n_embd) / 256.0);
  longrope_factors_gguf(g, c, std::move(long_factor), std::move(short_factor));
}

void exaone_moe_config_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string key = c.arch + ".attention.sliding_window";
  skip_mtp_layers(g, c, key.substr(0, key.find('.')) + " file");
  // (the window where the file gives one: its pattern, else every 4th layer global)
  all_sliding(c, g.get_int(key, 0), key);
  if (c.sliding_window == 0) return;
  std::vector<uint8_t> pattern = gguf_layer_pattern(g, key + "_pattern", c.n_layer);
  c.layer_sliding = pattern.empty() ? sliding_but_every(c.n_layer, 4) : std::move(pattern);
  exaone4_nope(c);
}

void glm4moe_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  const std::string k = c.arch + ".";
  c.rope_style = RopeStyle::Neox;
  c.rope_dim = rotated_dims(g.get_int(k + "rope.dimension_count", c.head_dim), c,
                            k + "rope.dimension_count");
  skip_mtp_layers(g, c, "'" + path + "'");
}

void glm4moe_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c) {
  const std::string& path = cfg.path;
  c.rope_style = RopeStyle::Neox;
  double partial = cfg.number("partial_rotary_factor", 0.5);  // (variants: glm_variant_keys)
  if (rope != nullptr && rope->is_object())
    partial = Json{*rope, path}.number("partial_rotary_factor", partial);
  if (!(partial > 0.0 && partial <= 1.0))
    throw ModelError("invalid partial_rotary_factor in '" + path + "'");
  c.rope_dim = rotated_dims(static_cast<int64_t>(c.head_dim * partial), c, "'" + path + "'");
  c.qkv_bias = cfg.boolean("attention_bias", false);
  c.qk_norm = cfg.boolean("use_qk_norm", false);
}

void glm4_config_gguf(const GGUFFile& g, ModelConfig& c) {
  c.rope_style = RopeStyle::Interleaved;
  c.rope_dim = rotated_dims(g.get_int(c.arch + ".rope.dimension_count", c.head_dim), c,
                            c.arch + ".rope.dimension_count");
}

void glm4_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c) {
  glm4moe_config_hf(cfg, rope, c);  // (the same keys: partial rotary, bias)
  c.rope_style = RopeStyle::Interleaved;
  c.qkv_bias = cfg.boolean("attention_bias", true);
  c.qk_norm = false;
}

void temperature_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  const std::string k = c.arch + ".";
  // (Ministral 3's files carry no length: llama.cpp's mistral3 takes the original context's, the
  // config's original_max_position_embeddings the converter writes)
  const int64_t dflt = c.arch == "mistral3" ? g.get_int(k + "rope.scaling.original_context_length",
                                                        g.get_int(k + "context_length", 0))
                                            : 0;
  set_temperature(c, g.get_float(k + "attention.temperature_scale", 0.0),
                  g.get_int(k + "attention.temperature_length", dflt),
                  k + "attention.temperature_scale", k + "attention.temperature_length",
                  "'" + path + "'");
}

void mistral3_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  if (c.rope_scaling.type == "yarn") c.rope_scaling.attn_factor = 1.0f;
  const double scale = g.get_float(c.arch + ".attention.scale", 0.0);
  if (scale != 0.0) c.attn_scale = positive_scale(scale, "attention.scale", "'" + path + "'");
}

void llama4_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  c.rope_style = RopeStyle::Interleaved;
  c.qk_l2_norm = g.get_int(k + "expert_count", 0) != 128;
  c.sliding_window = 0;
  c.layer_sliding.clear();
  c.layer_nope.clear();
  if (g.find(k + "attention.sliding_window") != nullptr &&
      g.get_int(k + "attention.sliding_window", 0) == 0)
    return;  // (llama.cpp: "always use rope", no chunks, no temperature)
  if (const double swa = g.get_float(k + "rope.freq_base_swa", c.rope_theta); swa != c.rope_theta)
    throw ModelError("a chunked-attention RoPE base (" + k + "rope.freq_base_swa) other than " + k +
                     "rope.freq_base in " + where + " is not supported");
  std::vector<uint8_t> chunked =
      gguf_layer_pattern(g, k + "attention.sliding_window_pattern", c.n_layer);
  if (chunked.empty()) {  // a period: the last layer of each is full attention
    const int64_t period = g.get_int(k + "attention.sliding_window_pattern", 4);
    if (period < 0 || period > c.n_layer + 1)
      throw ModelError("invalid " + k + "attention.sliding_window_pattern in " + where);
    chunked.resize(static_cast<size_t>(c.n_layer));
    for (int i = 0; i < c.n_layer; ++i) chunked[i] = period == 0 || i % period < period - 1;
  }
  c.layer_nope = nope_every(c.n_layer, 4);
  if (std::find(c.layer_nope.begin(), c.layer_nope.end(), 1) == c.layer_nope.end())
    c.layer_nope.clear();
  if (std::find(chunked.begin(), chunked.end(), 1) != chunked.end()) {
    c.sliding_window = 8192;
    c.attn_chunked = true;
    c.layer_sliding = std::move(chunked);
  }
  c.attn_temp_scale = 0.1f;
  c.attn_temp_length = 8192;
  c.attn_temp_offset = 1;
  c.attn_temp_nope = true;
}

void llama4_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.rope_style = RopeStyle::Interleaved;
  c.n_ff = static_cast<int>(
      std::clamp<int64_t>(cfg.integer("intermediate_size_mlp", 16384), 0, int64_t{1} << 30));
  if (c.n_ff < 1) throw ModelError("invalid intermediate_size_mlp in " + where);
  c.qk_l2_norm = cfg.boolean("use_qk_norm", true);
  // no_rope_layers: 1 = RoPE (transformers' naming); absent or empty: every interval-th layer NoPE
  c.layer_nope = nope_layers_hf(cfg, c.n_layer);
  const JsonValue* chunk_v = cfg.get("attention_chunk_size");
  const int64_t chunk = chunk_v != nullptr && chunk_v->is_null()
                            ? 0
                            : window_of(cfg.integer("attention_chunk_size", 8192), where);
  std::vector<uint8_t> chunked(static_cast<size_t>(c.n_layer));
  if (const JsonValue* types = cfg.get("layer_types"); types != nullptr && !types->is_null()) {
    if (!types->is_array() || types->array.size() != static_cast<size_t>(c.n_layer))
      throw ModelError("config 'layer_types' in " + where + " must list one type per layer");
    for (int i = 0; i < c.n_layer; ++i) {
      const JsonValue& t = types->array[static_cast<size_t>(i)];
      if (!t.is_string() || (t.string != "chunked_attention" && t.string != "full_attention"))
        throw ModelError("config 'layer_types' in " + where + " holds an unknown layer type");
      chunked[i] = t.string == "chunked_attention";
    }
  } else {
    for (int i = 0; i < c.n_layer; ++i) chunked[i] = chunk > 0 && !c.nope(i);
  }
  if (chunk > 0 && std::find(chunked.begin(), chunked.end(), 1) != chunked.end()) {
    c.sliding_window = static_cast<int>(chunk);
    c.attn_chunked = true;
    c.layer_sliding = std::move(chunked);
  } else {
    c.sliding_window = 0;
    c.layer_sliding.clear();
  }
  // attn_temperature_tuning: true / false (the Hub's first configs: a number, nonzero meaning on)
  const JsonValue* tuning = cfg.get("attn_temperature_tuning");
  const bool tune =
      tuning == nullptr || tuning->is_null() ||
      (tuning->kind == JsonValue::Kind::Bool ? tuning->boolean
                                             : tuning->is_number() && tuning->number != 0.0);
  if (tune && std::find(c.layer_nope.begin(), c.layer_nope.end(), 1) != c.layer_nope.end()) {
    set_temperature(c, cfg.number("attn_scale", 0.1), cfg.integer("floor_scale", 8192),
                    "attn_scale", "floor_scale", where);
    c.attn_temp_offset = 1;
    c.attn_temp_nope = true;
  }
  if (std::find(c.layer_nope.begin(), c.layer_nope.end(), 1) == c.layer_nope.end())
    c.layer_nope.clear();
}

namespace {

// The parts of Cohere's config both formats share, given its logit scale and the cohere2 window.
void cohere_common(ModelConfig& c, double logit_scale, int window, std::vector<uint8_t> sliding,
                   const std::string& where) {
  c.rope_style = RopeStyle::Interleaved;
  c.layer_norm = c.parallel_block = true;
  c.logit_scale = static_cast<float>(1.0 / positive_scale(logit_scale, "logit_scale", where));
  c.sliding_window = 0;
  c.layer_sliding.clear();
  c.layer_nope.clear();
  if (c.arch != "cohere2" || window == 0) return;
  c.sliding_window = window;
  c.layer_nope.resize(static_cast<size_t>(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) c.layer_nope[i] = !sliding[i];  // (the full layers: NoPE)
  c.layer_sliding = std::move(sliding);
  if (std::find(c.layer_nope.begin(), c.layer_nope.end(), 1) == c.layer_nope.end())
    c.layer_nope.clear();
}

}  // namespace

void cohere_config_gguf(const GGUFFile& g, ModelConfig& c, bool qk_norm, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  c.rms_eps = static_cast<float>(g.get_float(k + "attention.layer_norm_epsilon", 1e-5));
  c.qk_norm = c.qk_norm_heads = qk_norm;
  const int window = window_of(g.get_int(k + "attention.sliding_window", 0), where);
  std::vector<uint8_t> sliding =
      gguf_layer_pattern(g, k + "attention.sliding_window_pattern", c.n_layer);
  if (sliding.empty()) sliding = pattern_layers(c.n_layer, 4);  // (llama.cpp: 3 sliding, 1 full)
  cohere_common(c, g.get_float(k + "logit_scale", 1.0), window, std::move(sliding), where);
}

void cohere_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.rms_eps = static_cast<float>(cfg.number("layer_norm_eps", 1e-5));
  c.qk_norm = c.qk_norm_heads = c.arch != "cohere2" && cfg.boolean("use_qk_norm", false);
  const JsonValue* w = cfg.get("sliding_window");
  const int window =
      w != nullptr && w->is_null() ? 0 : window_of(cfg.integer("sliding_window", 4096), where);
  std::vector<uint8_t> sliding = hf_layer_types(cfg, c.n_layer);
  if (sliding.empty())
    sliding = pattern_layers(c.n_layer, cfg.integer("sliding_window_pattern", 4));
  cohere_common(c, cfg.number("logit_scale", 0.0625), window, std::move(sliding), where);
}

void minimax_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  c.qk_norm = true;
  c.rope_style = RopeStyle::Neox;
  const int64_t dims = g.get_int(c.arch + ".rope.dimension_count", c.head_dim);
  if (dims < 2 || dims > c.head_dim || dims % 2 != 0)
    throw ModelError("invalid " + c.arch + ".rope.dimension_count in '" + path + "'");
  c.rope_dim = dims == c.head_dim ? 0 : static_cast<int>(dims);
}

void minimax_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c) {
  c.qk_norm = true;
  c.rope_style = RopeStyle::Neox;
  double partial = cfg.number("partial_rotary_factor", 1.0);
  if (rope != nullptr && rope->is_object())
    partial = Json{*rope, cfg.path}.number("partial_rotary_factor", partial);
  const int64_t dims = cfg.integer("rotary_dim", static_cast<int64_t>(partial * c.head_dim));
  if (dims < 2 || dims > c.head_dim || dims % 2 != 0)
    throw ModelError("invalid rotary_dim " + std::to_string(dims) + " in '" + cfg.path + "'");
  c.rope_dim = dims == c.head_dim ? 0 : static_cast<int>(dims);
}

void temperature_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c) {
  if (rope == nullptr || !rope->is_object()) return;
  const Json r{*rope, cfg.path};
  set_temperature(c, r.number("llama_4_scaling_beta", 0.0),
                  r.integer("original_max_position_embeddings", 0), "llama_4_scaling_beta",
                  "original_max_position_embeddings", "'" + cfg.path + "'");
}

namespace {

// The delta-net sizes, checked: the convolution's taps, heads that divide evenly.
void check_delta(const DeltaNetConfig& d, const std::string& where) {
  const auto bad = [&](const std::string& what) {
    throw ModelError("invalid gated delta-net " + what + " in " + where);
  };
  if (d.n_k_heads < 1 || d.n_v_heads < 1 || d.n_v_heads % d.n_k_heads != 0)
    bad("head counts (" + std::to_string(d.n_k_heads) + " key, " + std::to_string(d.n_v_heads) +
        " value heads)");
  if (d.k_dim < 1 || d.k_dim > 4096 || d.v_dim < 1 || d.v_dim > 4096) bad("head sizes");
  if (d.conv_kernel < 1 || d.conv_kernel > 64) bad("convolution size");
}

// config.json's layer_types as one flag per layer: 1 for `yes` (or `yes2`), 0 for `no` (or `no2`)
// (anything else, or a list of another length, refused); false when the config has none.
bool layer_type_flags(const Json& cfg, int n_layer, const char* yes, const char* no,
                      std::vector<uint8_t>& flags, const char* yes2 = nullptr,
                      const char* no2 = nullptr) {
  const JsonValue* types = cfg.get("layer_types");
  if (types == nullptr || types->is_null()) return false;
  const std::string where = "'" + cfg.path + "'";
  if (!types->is_array() || types->array.size() != static_cast<size_t>(n_layer))
    throw ModelError("config 'layer_types' in " + where + " must list " + std::to_string(n_layer) +
                     " layer types");
  flags.assign(static_cast<size_t>(n_layer), 0);
  for (int i = 0; i < n_layer; ++i) {
    const JsonValue& t = types->array[static_cast<size_t>(i)];
    const bool y = t.is_string() && (t.string == yes || (yes2 != nullptr && t.string == yes2));
    if (!y && (!t.is_string() || (t.string != no && (no2 == nullptr || t.string != no2))))
      throw ModelError("config 'layer_types' in " + where + " must hold \"" + yes + "\" or \"" +
                       no + "\"");
    flags[static_cast<size_t>(i)] = y;
  }
  return true;
}

}  // namespace

void qwen35_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  skip_mtp_layers(g, c, where);
  c.rope_style = RopeStyle::Neox;  // (llama.cpp's multi-section RoPE: one position for text)
  c.rope_dim = rotated_dims(g.get_int(k + "rope.dimension_count", c.head_dim), c,
                            k + "rope.dimension_count");
  c.qk_norm = true;
  c.attn_gate = true;
  DeltaNetConfig& d = c.delta;
  auto dim = [&](const char* key) {
    return static_cast<int>(std::clamp<int64_t>(g.get_int(k + key, 0), -1, int64_t{1} << 20));
  };
  d.conv_kernel = dim("ssm.conv_kernel");
  d.k_dim = dim("ssm.state_size");
  d.n_k_heads = dim("ssm.group_count");
  d.n_v_heads = dim("ssm.time_step_rank");
  const int64_t inner = g.get_int(k + "ssm.inner_size", 0);
  d.v_dim = d.n_v_heads > 0 && inner % d.n_v_heads == 0
                ? static_cast<int>(std::clamp<int64_t>(inner / d.n_v_heads, -1, 1 << 20))
                : -1;
  // (llama.cpp's converter reorders Qwen3.5's value heads, not Qwen3-Next's)
  d.v_tiled = c.arch != "qwen3next";
  check_delta(d, where);
  const int64_t interval = g.get_int(k + "full_attention_interval", 4);
  if (interval < 1) throw ModelError("invalid " + k + "full_attention_interval in " + where);
  d.layers.resize(static_cast<size_t>(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) d.layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
}

void qwen35_config_hf(const Json& cfg, const JsonValue* rope, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.rope_style = RopeStyle::Neox;
  double partial = cfg.number("partial_rotary_factor", 0.25);
  if (rope != nullptr && rope->is_object())
    partial = Json{*rope, cfg.path}.number("partial_rotary_factor", partial);
  if (!(partial > 0.0 && partial <= 1.0))
    throw ModelError("invalid partial_rotary_factor in " + where);
  c.rope_dim = rotated_dims(static_cast<int64_t>(c.head_dim * partial), c, where);
  c.qk_norm = true;
  c.attn_gate = true;
  if (cfg.boolean("attention_bias", false))
    throw ModelError("attention_bias=true in " + where + " is not supported");
  DeltaNetConfig& d = c.delta;
  auto dim = [&](const char* key, int64_t dflt) {
    return static_cast<int>(std::clamp<int64_t>(cfg.integer(key, dflt), -1, int64_t{1} << 20));
  };
  d.conv_kernel = dim("linear_conv_kernel_dim", 4);
  d.k_dim = dim("linear_key_head_dim", 128);
  d.v_dim = dim("linear_value_head_dim", 128);
  d.n_k_heads = dim("linear_num_key_heads", 16);
  d.n_v_heads = dim("linear_num_value_heads", 32);
  check_delta(d, where);
  d.layers.resize(static_cast<size_t>(c.n_layer));
  if (!layer_type_flags(cfg, c.n_layer, "linear_attention", "full_attention", d.layers)) {
    // (transformers' default: every full_attention_interval-th layer full)
    const int64_t interval = cfg.integer("full_attention_interval", 4);
    if (interval < 1) throw ModelError("invalid full_attention_interval in " + where);
    for (int i = 0; i < c.n_layer; ++i) d.layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  }
}

void lfm2_config_gguf(const GGUFFile& g, ModelConfig& c, const std::vector<int64_t>& kv_per_layer,
                      const std::string& path) {
  const std::string where = "'" + path + "'";
  c.rope_style = RopeStyle::Neox;
  c.qk_norm = true;
  c.conv.kernel =
      static_cast<int>(std::clamp<int64_t>(g.get_int(c.arch + ".shortconv.l_cache", 3), 0, 65));
  if (c.conv.kernel < 2 || c.conv.kernel > 64)
    throw ModelError("invalid " + c.arch + ".shortconv.l_cache in " + where);
  c.conv.layers.assign(static_cast<size_t>(c.n_layer), 0);
  if (kv_per_layer.empty()) return;  // (one count for all: every layer attention)
  if (kv_per_layer.size() != static_cast<size_t>(c.n_layer))
    throw ModelError(c.arch + ".attention.head_count_kv in " + where + " must hold " +
                     std::to_string(c.n_layer) + " counts");
  for (int i = 0; i < c.n_layer; ++i) {
    const int64_t kv = kv_per_layer[static_cast<size_t>(i)];
    if (kv != 0 && kv != c.n_head_kv)
      throw ModelError("differing KV head counts across layers in " + where + " (not supported)");
    c.conv.layers[static_cast<size_t>(i)] = kv == 0;
  }
}

void lfm2_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  c.rope_style = RopeStyle::Neox;
  c.qk_norm = true;
  c.rms_eps = static_cast<float>(cfg.number("norm_eps", 1e-5));
  if (cfg.boolean("conv_bias", false))
    throw ModelError("conv_bias=true in " + where + " is not supported");
  c.conv.kernel = static_cast<int>(std::clamp<int64_t>(cfg.integer("conv_L_cache", 3), 0, 65));
  if (c.conv.kernel < 2 || c.conv.kernel > 64) throw ModelError("invalid conv_L_cache in " + where);
  c.conv.layers.assign(static_cast<size_t>(c.n_layer), 0);
  const JsonValue* full = cfg.get("full_attn_idxs");
  const bool typed = layer_type_flags(cfg, c.n_layer, "conv", "full_attention", c.conv.layers);
  if (!typed && full != nullptr && !full->is_null()) {  // (Lfm2Config: the others are convolutions)
    if (!full->is_array())
      throw ModelError("config 'full_attn_idxs' in " + where + " must be a list");
    c.conv.layers.assign(static_cast<size_t>(c.n_layer), 1);
    for (const JsonValue& e : full->array) {
      if (!e.is_number() || !e.is_integer || e.integer < 0 || e.integer >= c.n_layer)
        throw ModelError("config 'full_attn_idxs' in " + where + " must hold layer indices");
      c.conv.layers[static_cast<size_t>(e.integer)] = 0;
    }
  }
  // Lfm2MLP's size: block_ff_dim (the Hub's files; Lfm2Config takes it over intermediate_size) or
  // intermediate_size, adjusted (LFM2-MoE's dense layers: intermediate_size as it is).
  const bool moe = c.arch == "lfm2moe";
  int64_t ff = cfg.integer("block_ff_dim", cfg.integer("intermediate_size", moe ? 7168 : 12288));
  if (!moe && cfg.boolean("block_auto_adjust_ff_dim", true)) {
    ff = 2 * ff / 3;
    const JsonValue* mult = cfg.get("block_ffn_dim_multiplier");  // (default 1.0; null: none)
    if (mult == nullptr || !mult->is_null()) {
      ff = static_cast<int64_t>(cfg.number("block_ffn_dim_multiplier", 1.0) *
                                static_cast<double>(ff));
      const int64_t of = cfg.integer("block_multiple_of", 256);
      if (of < 1) throw ModelError("invalid block_multiple_of in " + where);
      ff = of * ((ff + of - 1) / of);
    }
  }
  if (ff < 1 || ff > (int64_t{1} << 30)) throw ModelError("invalid feed-forward size in " + where);
  c.n_ff = static_cast<int>(ff);
}

void deepseek2_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  const JsonValue* q_lora = cfg.get("q_lora_rank");
  const JsonValue* interleave = cfg.get("rope_interleave");
  c.rope_style =
      interleave != nullptr && interleave->kind == JsonValue::Kind::Bool && !interleave->boolean
          ? RopeStyle::Neox
          : RopeStyle::Interleaved;
  // YaRN's mscale_all_dim scales the scores (transformers' yarn_apply_mscale); the cos/sin factor
  // (mscale / mscale_all_dim) came with the rope scaling.
  double coef = 0.0;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const JsonValue* s = cfg.get(key);
    if (s != nullptr && s->is_object() && coef == 0.0)
      coef = 0.1 * Json{*s, cfg.path}.number("mscale_all_dim", 0.0);
  }
  mla_config(c, q_lora != nullptr && !q_lora->is_null() ? cfg.integer("q_lora_rank", 0) : 0,
             cfg.integer("kv_lora_rank", 512), cfg.integer("qk_nope_head_dim", 128),
             cfg.integer("qk_rope_head_dim", 64), cfg.integer("v_head_dim", 128), coef, where);
}

namespace {

void check_mamba2(const Mamba2Config& m, const std::string& where) {
  const auto bad = [&](const std::string& what) {
    throw ModelError("invalid Mamba-2 " + what + " in " + where);
  };
  if (m.n_heads < 1 || m.n_groups < 1 || m.n_heads % m.n_groups != 0)
    bad("head / group counts (" + std::to_string(m.n_heads) + " heads, " +
        std::to_string(m.n_groups) + " groups)");
  if (m.d_inner < 1 || m.d_inner % m.n_heads != 0 || m.d_inner / m.n_heads > 4096)
    bad("inner size " + std::to_string(m.d_inner) + " for " + std::to_string(m.n_heads) + " heads");
  if (m.d_inner % m.n_groups != 0) bad("inner size for the norm's groups");
  if (m.d_state < 1 || m.d_state > 4096) bad("state size");
  if (m.conv_kernel < 1 || m.conv_kernel > 64) bad("convolution size");
}

}  // namespace

namespace {

// The Mamba-2 sizes of a GGUF file: ssm.conv_kernel / inner_size / state_size / time_step_rank (the
// head count) / group_count.
void mamba2_sizes_gguf(const GGUFFile& g, ModelConfig& c, const std::string& where) {
  const std::string k = c.arch + ".";
  Mamba2Config& m = c.ssm;
  auto dim = [&](const char* key) {
    return static_cast<int>(std::clamp<int64_t>(g.get_int(k + key, 0), -1, int64_t{1} << 24));
  };
  m.conv_kernel = dim("ssm.conv_kernel");
  m.d_inner = dim("ssm.inner_size");
  m.d_state = dim("ssm.state_size");
  m.n_heads = dim("ssm.time_step_rank");
  m.n_groups = dim("ssm.group_count");
  check_mamba2(m, where);
}

}  // namespace

void granitehybrid_config_gguf(const GGUFFile& g, ModelConfig& c,
                               const std::vector<int64_t>& kv_per_layer, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  granite_config_gguf(g, c);
  Mamba2Config& m = c.ssm;
  mamba2_sizes_gguf(g, c, where);
  // A layer is a Mamba-2 layer where its KV head count is 0 (llama.cpp's rule; one count for all:
  // every layer attention).
  m.layers.assign(static_cast<size_t>(c.n_layer), 0);
  if (!kv_per_layer.empty()) {
    if (kv_per_layer.size() != static_cast<size_t>(c.n_layer))
      throw ModelError(k + "attention.head_count_kv in " + where + " must hold " +
                       std::to_string(c.n_layer) + " counts");
    for (int i = 0; i < c.n_layer; ++i) {
      const int64_t kv = kv_per_layer[static_cast<size_t>(i)];
      if (kv != 0 && kv != c.n_head_kv)
        throw ModelError("differing KV head counts across layers in " + where + " (not supported)");
      m.layers[static_cast<size_t>(i)] = kv == 0;
    }
  }
  // rope.scaling.finetuned is Granite's switch for RoPE (absent: on); llama.cpp's converter writes
  // it false for every Granite 4.0-H file (NoPE attention), true for Bamba's.
  if (!g.get_bool(k + "rope.scaling.finetuned", true))
    c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);
}

namespace {

// BambaConfig's layout: attn_layer_indices lists the attention layers (none: every layer Mamba-2),
// the rest as GraniteMoeHybrid's mamba_* keys; partial_rotary_factor of the rotated head.
void bamba_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  Mamba2Config& m = c.ssm;
  const JsonValue* d_head = cfg.get("mamba_d_head");  // ("auto": d_inner / n_heads)
  if (d_head != nullptr && !(d_head->is_string() && d_head->string == "auto") &&
      (!d_head->is_number() || !d_head->is_integer || d_head->integer != m.head_dim()))
    throw ModelError("config 'mamba_d_head' in " + where + " must be d_inner / mamba_n_heads (" +
                     std::to_string(m.head_dim()) + ")");
  if (cfg.string("hidden_act", "silu") != "silu")
    throw ModelError("hidden_act '" + cfg.string("hidden_act", "silu") + "' in " + where +
                     " is not supported (silu)");
  m.layers.assign(static_cast<size_t>(c.n_layer), 1);
  if (const JsonValue* idx = cfg.get("attn_layer_indices"); idx != nullptr && !idx->is_null()) {
    if (!idx->is_array())
      throw ModelError("config 'attn_layer_indices' in " + where + " must be a list");
    for (const JsonValue& v : idx->array) {
      if (!v.is_number() || !v.is_integer || v.integer < 0 || v.integer >= c.n_layer)
        throw ModelError("config 'attn_layer_indices' in " + where + " must hold layer indices");
      m.layers[static_cast<size_t>(v.integer)] = 0;
    }
  }
  double partial = cfg.number("partial_rotary_factor", 1.0);
  if (const JsonValue* rope = cfg.get("rope_parameters"); rope != nullptr && rope->is_object())
    partial = Json{*rope, cfg.path}.number("partial_rotary_factor", partial);
  if (!(partial > 0.0 && partial <= 1.0))
    throw ModelError("invalid partial_rotary_factor in " + where);
  c.rope_dim = rotated_dims(static_cast<int64_t>(c.head_dim * partial), c, where);
}

}  // namespace

void granitehybrid_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  // Bamba (BambaForCausalLM): the same blocks without Granite's multipliers, RoPE on (partial
  // where rope_parameters / the top level says), the attention layers listed by index.
  const bool bamba = c.hf_bamba;
  if (!bamba) granite_config_hf(cfg, c);
  if (cfg.boolean("attention_bias", false))
    throw ModelError("attention_bias=true in " + where + " is not supported");
  if (cfg.boolean("mamba_proj_bias", false))
    throw ModelError("mamba_proj_bias=true in " + where + " is not supported");
  if (cfg.string("hidden_act", "silu") != "silu")
    throw ModelError("hidden_act '" + cfg.string("hidden_act", "silu") + "' in " + where +
                     " is not supported (silu)");
  Mamba2Config& m = c.ssm;
  auto dim = [&](const char* key, int64_t dflt) {
    return static_cast<int>(std::clamp<int64_t>(cfg.integer(key, dflt), -1, int64_t{1} << 24));
  };
  m.conv_kernel = dim("mamba_d_conv", 4);
  m.d_state = dim("mamba_d_state", 256);
  m.n_heads = dim("mamba_n_heads", 128);
  m.n_groups = dim("mamba_n_groups", 1);
  m.d_inner = static_cast<int>(
      std::clamp<int64_t>(cfg.integer("mamba_expand", 2) * c.n_embd, -1, int64_t{1} << 24));
  m.conv_bias = cfg.boolean("mamba_conv_bias", true);
  check_mamba2(m, where);
  if (bamba) {
    bamba_config_hf(cfg, c);
    return;
  }
  const JsonValue* d_head = cfg.get("mamba_d_head");  // ("auto": d_inner / n_heads)
  if (d_head != nullptr && !(d_head->is_string() && d_head->string == "auto") &&
      (!d_head->is_number() || !d_head->is_integer || d_head->integer != m.head_dim()))
    throw ModelError("config 'mamba_d_head' in " + where + " must be d_inner / mamba_n_heads (" +
                     std::to_string(m.head_dim()) + ")");
  // layer_types: "mamba" / "attention" on the Hub, transformers 5's "linear_attention" /
  // "full_attention" in folders it writes; none: every layer Mamba-2 (GraniteMoeHybridConfig).
  if (!layer_type_flags(cfg, c.n_layer, "linear_attention", "full_attention", m.layers, "mamba",
                        "attention"))
    m.layers.assign(static_cast<size_t>(c.n_layer), 1);
  // RoPE only with position_embedding_type "rope" (Granite 4.0-H: "nope").
  if (cfg.string("position_embedding_type", "nope") != "rope")
    c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);
  // The feed-forward: the shared MLP alone (shared_intermediate_size) without experts; with them,
  // the experts (intermediate_size, moe_loader.cpp) plus that shared MLP.
  if (cfg.integer("num_local_experts", 8) == 0)
    c.n_ff = static_cast<int>(
        std::clamp<int64_t>(cfg.integer("shared_intermediate_size", 1024), -1, int64_t{1} << 30));
}

std::string nemotronh_layer_kinds(const Json& cfg, int n_layer) {
  const std::string where = "'" + cfg.path + "'";
  std::string kinds;
  const JsonValue* types = cfg.get("layers_block_type");
  if (types == nullptr) types = cfg.get("layer_types");
  const JsonValue* pattern = cfg.get("hybrid_override_pattern");
  if (types != nullptr) {
    if (!types->is_array())
      throw ModelError("config 'layers_block_type' in " + where + " must be a list");
    for (const JsonValue& t : types->array) {
      const std::string name = t.is_string() ? t.string : "";
      const char kind = name == "mamba" || name == "linear_attention"     ? 'M'
                        : name == "attention" || name == "full_attention" ? '*'
                        : name == "mlp"                                   ? '-'
                        : name == "moe"                                   ? 'E'
                                                                          : '?';
      if (kind == '?')
        throw ModelError("config 'layers_block_type' in " + where +
                         " must hold \"mamba\", \"attention\", \"mlp\" or \"moe\" (or "
                         "\"linear_attention\" / \"full_attention\")");
      kinds += kind;
    }
  } else if (pattern != nullptr) {
    if (!pattern->is_string())
      throw ModelError("config 'hybrid_override_pattern' in " + where + " must be a string");
    kinds = pattern->string;
    if (kinds.find_first_not_of("M*-E") != std::string::npos)
      throw ModelError("config 'hybrid_override_pattern' in " + where +
                       " must hold only M, *, - and E");
  } else {
    throw ModelError("config in " + where +
                     " has neither layers_block_type nor hybrid_override_pattern");
  }
  if (n_layer > 0 && kinds.size() != static_cast<size_t>(n_layer))
    throw ModelError("the layer pattern in " + where + " lists " + std::to_string(kinds.size()) +
                     " layers, num_hidden_layers " + std::to_string(n_layer));
  return kinds;
}

namespace {

// Nemotron-H's blocks from one kind per layer: M a Mamba-2 mixer, * attention (both without a
// feed-forward), - and E a feed-forward alone (dense, or experts).
void nemotronh_blocks(const std::string& kinds, ModelConfig& c) {
  const size_t n = static_cast<size_t>(c.n_layer);
  c.ssm.layers.assign(n, 0);
  c.layer_no_ffn.assign(n, 0);
  c.layer_no_mixer.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    c.ssm.layers[i] = kinds[i] == 'M';
    c.layer_no_ffn[i] = kinds[i] == 'M' || kinds[i] == '*';
    c.layer_no_mixer[i] = kinds[i] == '-' || kinds[i] == 'E';
  }
  c.layer_nope.assign(n, 1);  // (no RoPE: the Mamba-2 layers carry the positions)
  c.ffn_relu2 = true;
}

}  // namespace

void nemotronh_config_gguf(const GGUFFile& g, ModelConfig& c,
                           const std::vector<int64_t>& kv_per_layer,
                           const std::vector<int64_t>& ff_per_layer, const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  mamba2_sizes_gguf(g, c, where);
  if (kv_per_layer.size() != static_cast<size_t>(c.n_layer) ||
      ff_per_layer.size() != static_cast<size_t>(c.n_layer))
    throw ModelError(k + "attention.head_count_kv and " + k + "feed_forward_length in " + where +
                     " must hold one count per layer (" + std::to_string(c.n_layer) + ")");
  // (llama.cpp's rule: a layer with KV heads is attention, one with a feed-forward size a
  // feed-forward, one with neither Mamba-2)
  std::string kinds;
  for (int i = 0; i < c.n_layer; ++i) {
    const int64_t kv = kv_per_layer[static_cast<size_t>(i)],
                  ff = ff_per_layer[static_cast<size_t>(i)];
    if (kv != 0 && kv != c.n_head_kv)
      throw ModelError("differing KV head counts across layers in " + where + " (not supported)");
    if (kv != 0 && ff != 0)
      throw ModelError("layer " + std::to_string(i) + " of " + where +
                       " has both attention and a feed-forward (not a Nemotron-H block)");
    if (ff != 0 && ff != c.n_ff)
      throw ModelError("differing feed-forward sizes across layers in " + where +
                       " (not supported)");
    kinds += kv != 0 ? '*' : ff != 0 ? '-' : 'M';
  }
  nemotronh_blocks(kinds, c);
}

void nemotronh_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  for (const char* key : {"use_bias", "mamba_proj_bias", "mlp_bias", "attention_bias"})
    if (cfg.boolean(key, false))
      throw ModelError(std::string(key) + "=true in " + where + " is not supported");
  if (cfg.string("mlp_hidden_act", "relu2") != "relu2")
    throw ModelError("mlp_hidden_act '" + cfg.string("mlp_hidden_act", "") + "' in " + where +
                     " is not supported (relu2)");
  if (cfg.string("mamba_hidden_act", "silu") != "silu")
    throw ModelError("mamba_hidden_act '" + cfg.string("mamba_hidden_act", "") + "' in " + where +
                     " is not supported (silu)");
  if (cfg.get("moe_latent_size") != nullptr)
    throw ModelError("moe_latent_size in " + where +
                     " (latent expert projections) is not supported");
  c.rms_eps = static_cast<float>(cfg.number("layer_norm_epsilon", 1e-5));
  Mamba2Config& m = c.ssm;
  auto dim = [&](const char* key, const char* alias, int64_t dflt) {
    const int64_t v = cfg.integer(key, cfg.integer(alias, dflt));
    return static_cast<int>(std::clamp<int64_t>(v, -1, int64_t{1} << 24));
  };
  m.n_heads = dim("mamba_num_heads", "mamba_num_heads", 128);
  m.d_inner = static_cast<int>(std::clamp<int64_t>(
      int64_t{m.n_heads} * dim("mamba_head_dim", "mamba_head_dim", 64), -1, int64_t{1} << 24));
  m.d_state = dim("ssm_state_size", "mamba_d_state", 128);
  m.n_groups = dim("n_groups", "mamba_n_groups", 8);
  m.conv_kernel = dim("conv_kernel", "mamba_d_conv", 4);
  m.conv_bias = cfg.boolean("use_conv_bias", cfg.boolean("mamba_conv_bias", true));
  check_mamba2(m, where);
  nemotronh_blocks(nemotronh_layer_kinds(cfg, c.n_layer), c);
}

namespace {

// Mamba-2 alone: every layer a mixer after its norm, no attention, no feed-forward.
void mamba2_blocks(ModelConfig& c) {
  const size_t n = static_cast<size_t>(c.n_layer);
  c.ssm.layers.assign(n, 1);
  c.layer_no_ffn.assign(n, 1);
  c.layer_nope.assign(n, 1);
}

}  // namespace

namespace {

void check_mamba1(const Mamba1Config& m, const std::string& where) {
  auto bad = [&](const std::string& what) {
    throw ModelError("invalid Mamba-1 " + what + " in " + where);
  };
  if (m.d_inner < 1 || m.d_inner > (1 << 20)) bad("inner size");
  if (m.d_state < 1 || m.d_state > 4096) bad("state size");
  if (m.dt_rank < 1 || m.dt_rank > m.d_inner) bad("time step rank");
  if (m.conv_kernel < 1 || m.conv_kernel > 64) bad("convolution size");
}

// The Mamba-1 sizes of a GGUF file (ssm.conv_kernel / inner_size / state_size / time_step_rank:
// dt's rank), the norms' epsilon the model's (llama.cpp's), unchecked.
Mamba1Config& mamba1_sizes_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string k = c.arch + ".";
  Mamba1Config& m = c.mamba1;
  auto dim = [&](const char* key) {
    return static_cast<int>(std::clamp<int64_t>(g.get_int(k + key, 0), -1, int64_t{1} << 24));
  };
  m.conv_kernel = dim("ssm.conv_kernel");
  m.d_inner = dim("ssm.inner_size");
  m.d_state = dim("ssm.state_size");
  m.dt_rank = dim("ssm.time_step_rank");
  m.bc_eps = c.rms_eps;
  return m;
}

void mamba1_blocks(ModelConfig& c) {
  const size_t n = static_cast<size_t>(c.n_layer);
  c.mamba1.layers.assign(n, 1);
  c.layer_no_ffn.assign(n, 1);
  c.layer_nope.assign(n, 1);
}

}  // namespace

void mamba1_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  mamba1_sizes_gguf(g, c);
  c.mamba1.dt_b_c_rms = g.get_bool(c.arch + ".ssm.dt_b_c_rms", false);
  check_mamba1(c.mamba1, "'" + path + "'");
  mamba1_blocks(c);
}

void mamba1_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  if (cfg.boolean("use_bias", false))
    throw ModelError("use_bias=true in " + where + " is not supported");
  if (cfg.string("hidden_act", "silu") != "silu")
    throw ModelError("hidden_act '" + cfg.string("hidden_act", "") + "' in " + where +
                     " is not supported (silu)");
  c.rms_eps = static_cast<float>(cfg.number("layer_norm_epsilon", 1e-5));
  Mamba1Config& m = c.mamba1;
  m.d_inner = c.n_ff;  // (expand x hidden_size)
  if (cfg.integer("intermediate_size", m.d_inner) != m.d_inner)
    throw ModelError("config 'intermediate_size' in " + where + " must be expand x hidden_size (" +
                     std::to_string(m.d_inner) + ")");
  m.d_state = static_cast<int>(std::clamp<int64_t>(cfg.integer("state_size", 16), -1, 1 << 20));
  m.conv_kernel = static_cast<int>(std::clamp<int64_t>(cfg.integer("conv_kernel", 4), -1, 1 << 20));
  m.conv_bias = cfg.boolean("use_conv_bias", true);
  // (time_step_rank "auto": ceil(hidden_size / 16), MambaConfig's rule)
  const JsonValue* rank = cfg.get("time_step_rank");
  const int64_t auto_rank = (int64_t{c.n_embd} + 15) / 16;
  if (rank != nullptr && !rank->is_null() && !(rank->is_string() && rank->string == "auto") &&
      !(rank->is_number() && rank->is_integer))
    throw ModelError("config 'time_step_rank' in " + where + " must be an integer or \"auto\"");
  m.dt_rank = static_cast<int>(std::clamp<int64_t>(
      rank != nullptr && rank->is_number() ? rank->integer : auto_rank, -1, 1 << 20));
  m.dt_b_c_rms = cfg.string("model_type", "") == "falcon_mamba";
  m.bc_eps = static_cast<float>(cfg.number("mixer_rms_eps", 1e-6));
  check_mamba1(m, where);
  mamba1_blocks(c);
}

void jamba_config_gguf(const GGUFFile& g, ModelConfig& c, const std::vector<int64_t>& kv_per_layer,
                       const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  Mamba1Config& m = mamba1_sizes_gguf(g, c);
  m.dt_b_c_rms = m.dt_b_c_weights = true;
  check_mamba1(m, where);
  // (llama.cpp's rule: a layer without KV heads is a Mamba-1 layer)
  if (kv_per_layer.size() != static_cast<size_t>(c.n_layer))
    throw ModelError(k + "attention.head_count_kv in " + where + " must hold " +
                     std::to_string(c.n_layer) + " counts");
  m.layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int i = 0; i < c.n_layer; ++i) {
    const int64_t kv = kv_per_layer[static_cast<size_t>(i)];
    if (kv != 0 && kv != c.n_head_kv)
      throw ModelError("differing KV head counts across layers in " + where + " (not supported)");
    m.layers[static_cast<size_t>(i)] = kv == 0;
  }
  c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);  // (no RoPE in Jamba's attention)
}

void jamba_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  if (cfg.boolean("mamba_proj_bias", false))
    throw ModelError("mamba_proj_bias=true in " + where + " is not supported");
  if (cfg.string("hidden_act", "silu") != "silu")
    throw ModelError("hidden_act '" + cfg.string("hidden_act", "") + "' in " + where +
                     " is not supported (silu)");
  Mamba1Config& m = c.mamba1;
  auto dim = [&](const char* key, int64_t dflt) {
    return static_cast<int>(std::clamp<int64_t>(cfg.integer(key, dflt), -1, int64_t{1} << 24));
  };
  m.d_inner = static_cast<int>(
      std::clamp<int64_t>(cfg.integer("mamba_expand", 2) * c.n_embd, -1, int64_t{1} << 24));
  m.d_state = dim("mamba_d_state", 16);
  m.conv_kernel = dim("mamba_d_conv", 4);
  m.conv_bias = cfg.boolean("mamba_conv_bias", true);
  const JsonValue* rank = cfg.get("mamba_dt_rank");  // ("auto": ceil(hidden_size / 16))
  if (rank != nullptr && !rank->is_null() && !(rank->is_string() && rank->string == "auto") &&
      !(rank->is_number() && rank->is_integer))
    throw ModelError("config 'mamba_dt_rank' in " + where + " must be an integer or \"auto\"");
  m.dt_rank = static_cast<int>(std::clamp<int64_t>(
      rank != nullptr && rank->is_number() ? rank->integer : (int64_t{c.n_embd} + 15) / 16, -1,
      1 << 20));
  m.dt_b_c_rms = m.dt_b_c_weights = true;
  m.bc_eps = c.rms_eps;
  check_mamba1(m, where);
  const int64_t period = cfg.integer("attn_layer_period", 8),
                offset = cfg.integer("attn_layer_offset", 4);
  if (period < 1 || offset < 0)
    throw ModelError("config 'attn_layer_period' / 'attn_layer_offset' in " + where +
                     " must be >= 1 / >= 0");
  m.layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int i = 0; i < c.n_layer; ++i) m.layers[static_cast<size_t>(i)] = i % period != offset;
  c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);  // (no RoPE in Jamba's attention)
}

void falconh1_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  mamba2_sizes_gguf(g, c, "'" + path + "'");
  c.ssm.layers.assign(static_cast<size_t>(c.n_layer), 1);
  c.parallel_ssm = true;
}

void falconh1_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  for (const char* key : {"mamba_proj_bias", "projectors_bias", "attention_bias", "mlp_bias"})
    if (cfg.boolean(key, false))
      throw ModelError(std::string(key) + "=true in " + where + " is not supported");
  if (cfg.string("hidden_act", "silu") != "silu")
    throw ModelError("hidden_act '" + cfg.string("hidden_act", "") + "' in " + where +
                     " is not supported (silu)");
  Mamba2Config& m = c.ssm;
  auto dim = [&](const char* key, int64_t dflt) {
    return static_cast<int>(std::clamp<int64_t>(cfg.integer(key, dflt), -1, int64_t{1} << 24));
  };
  m.d_inner = dim("mamba_d_ssm", cfg.integer("mamba_expand", 2) * c.n_embd);
  m.n_heads = dim("mamba_n_heads", 128);
  m.n_groups = dim("mamba_n_groups", 1);
  m.d_state = dim("mamba_d_state", 256);
  m.conv_kernel = dim("mamba_d_conv", 4);
  m.conv_bias = cfg.boolean("mamba_conv_bias", true);
  m.gated_norm = cfg.boolean("mamba_rms_norm", false);
  check_mamba2(m, where);
  const JsonValue* d_head = cfg.get("mamba_d_head");  // ("auto": d_inner / n_heads)
  if (d_head != nullptr && !d_head->is_null() &&
      !(d_head->is_string() && d_head->string == "auto") &&
      (!d_head->is_number() || !d_head->is_integer || d_head->integer != m.head_dim()))
    throw ModelError("config 'mamba_d_head' in " + where + " must be d_ssm / mamba_n_heads (" +
                     std::to_string(m.head_dim()) + ")");
  // (transformers' torch path normalises before the gate where its kernels gate first: refused
  // rather than guessed; the released models have no mixer norm)
  if (m.gated_norm && cfg.boolean("mamba_norm_before_gate", true))
    throw ModelError("mamba_rms_norm with mamba_norm_before_gate in " + where +
                     " is not supported (mamba_norm_before_gate=false is)");
  m.layers.assign(static_cast<size_t>(c.n_layer), 1);
  c.parallel_ssm = true;
  MupScales& u = c.mup;
  u.active = true;
  auto num = [&](const char* key) {
    const double v = cfg.number(key, 1.0);
    if (!std::isfinite(v)) throw ModelError("invalid " + std::string(key) + " in " + where);
    return static_cast<float>(v);
  };
  u.attn_in = num("attention_in_multiplier");
  u.key = num("key_multiplier");
  u.attn_out = num("attention_out_multiplier");
  u.ssm_in = num("ssm_in_multiplier");
  u.ssm_out = num("ssm_out_multiplier");
  auto list = [&](const char* key, float* out, size_t n) {
    const JsonValue* v = cfg.get(key);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_array() || v->array.size() != n)
      throw ModelError("config '" + std::string(key) + "' in " + where + " must list " +
                       std::to_string(n) + " numbers");
    for (size_t i = 0; i < n; ++i) {
      if (!v->array[i].is_number() || !std::isfinite(v->array[i].number))
        throw ModelError("config '" + std::string(key) + "' in " + where + " must list numbers");
      out[i] = static_cast<float>(v->array[i].number);
    }
  };
  list("ssm_multipliers", u.zxbcdt, 5);
  float mlp[2] = {1.0f, 1.0f};
  list("mlp_multipliers", mlp, 2);
  u.mlp_gate = mlp[0];
  u.mlp_down = mlp[1];
  const float emb = num("embedding_multiplier"), head = num("lm_head_multiplier");
  if (emb != 1.0f) c.embd_scale = emb;
  if (head != 1.0f) {
    if (!(head > 0.0f)) throw ModelError("lm_head_multiplier in " + where + " must be > 0");
    c.logit_scale = 1.0f / head;  // (logits divided by it: times the multiplier)
  }
}

void mamba2_config_gguf(const GGUFFile& g, ModelConfig& c, const std::string& path) {
  mamba2_sizes_gguf(g, c, "'" + path + "'");
  mamba2_blocks(c);
}

void mamba2_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  if (cfg.boolean("use_bias", false))
    throw ModelError("use_bias=true in " + where + " is not supported");
  if (!cfg.boolean("rms_norm", true))
    throw ModelError("rms_norm=false in " + where + " (no gated norm) is not supported");
  if (cfg.string("hidden_act", "silu") != "silu")
    throw ModelError("hidden_act '" + cfg.string("hidden_act", "") + "' in " + where +
                     " is not supported (silu)");
  c.rms_eps = static_cast<float>(cfg.number("layer_norm_epsilon", 1e-5));
  Mamba2Config& m = c.ssm;
  auto dim = [&](const char* key, int64_t dflt) {
    return static_cast<int>(std::clamp<int64_t>(cfg.integer(key, dflt), -1, int64_t{1} << 24));
  };
  const double expand = cfg.number("expand", 2.0);
  m.d_inner = std::isfinite(expand) && expand > 0.0 && expand <= 64.0
                  ? static_cast<int>(expand * c.n_embd)
                  : -1;
  m.n_heads = dim("num_heads", 128);
  m.d_state = dim("state_size", 128);
  m.n_groups = dim("n_groups", 8);
  m.conv_kernel = dim("conv_kernel", 4);
  m.conv_bias = cfg.boolean("use_conv_bias", true);
  check_mamba2(m, where);
  if (cfg.integer("head_dim", m.head_dim()) != m.head_dim())
    throw ModelError("config 'head_dim' in " + where +
                     " must be expand x hidden_size / num_heads (" + std::to_string(m.head_dim()) +
                     ")");
  mamba2_blocks(c);
}

}  // namespace ossa

namespace ossa {

namespace {

// Gemma 4's kv_source: each of the last `shared` layers attends to the last earlier layer of its
// kind (sliding or global) that keeps its own K/V (transformers' kv_sharing_modes).
std::vector<int> gemma4_kv_source(const ModelConfig& c, int64_t shared, const std::string& where) {
  std::vector<int> src;
  if (shared <= 0) return src;
  if (shared >= c.n_layer)
    throw ModelError("num_kv_shared_layers " + std::to_string(shared) +
                     " leaves no layer with its " + "own K/V in " + where);
  const int first = c.n_layer - static_cast<int>(shared);
  src.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    src[static_cast<size_t>(l)] = l;
    if (l < first) continue;
    int from = first - 1;
    while (from >= 0 && c.sliding(from) != c.sliding(l)) --from;
    if (from < 0)
      throw ModelError("a shared-K/V layer of " + where + " has no earlier layer of its kind");
    src[static_cast<size_t>(l)] = from;
  }
  return src;
}

// The checks both readers share: the global layers agree on one head size (their RoPE table), the
// heads divide into KV groups, and the feed-forward sizes are positive.
void gemma4_check(ModelConfig& c, const std::string& where) {
  int global_hd = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const int hd = c.head_dim_of(l), kv = c.n_head_kv_of(l);
    if (hd <= 0 || hd > 65536 || hd % 2 != 0 || kv <= 0 || kv > 65536 || c.n_head % kv != 0)
      throw ModelError("invalid head size or KV head count of layer " + std::to_string(l) + " in " +
                       where);
    if (c.sliding(l) && hd != c.head_dim)
      throw ModelError("the sliding layers' head sizes differ in " + where + " (not supported)");
    if (!c.sliding(l) && global_hd != 0 && hd != global_hd)
      throw ModelError("the global layers' head sizes differ in " + where + " (not supported)");
    if (!c.sliding(l)) global_hd = hd;
    if (c.n_ff_of(l) <= 0 || c.n_ff_of(l) > (1 << 30))
      throw ModelError("invalid feed-forward size of layer " + std::to_string(l) + " in " + where);
  }
  if (c.rope_pairs < 0 || (global_hd > 0 && c.rope_pairs > global_hd / 2))
    throw ModelError("invalid rotated share of the global layers' RoPE in " + where);
  if (c.ple_dim < 0 || c.ple_dim > (1 << 20))
    throw ModelError("invalid per-layer embedding size in " + where);
  MoeConfig& m = c.moe;
  if (!m.layers.empty()) {  // softmax over the experts, the chosen renormalised (then scaled)
    if (m.n_expert < 1 || m.n_expert > 65536 || m.n_expert_used < 1 ||
        m.n_expert_used > m.n_expert || m.n_ff_expert < 1)
      throw ModelError("invalid expert count, experts per token or expert size in " + where);
    m.norm_topk_prob = true;
  }
  c.qk_norm = true;
  c.v_norm = true;
  c.attn_scale = 1.0f;  // (q and k are normalised: scores unscaled)
  c.rope_style = RopeStyle::Neox;
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  if (c.arch == "gemma3n") {
    if (c.altup < 1 || c.altup > 64)
      throw ModelError("invalid AltUp stream count " + std::to_string(c.altup) + " in " + where);
    if (c.ple_dim <= 0) throw ModelError("a Gemma 3n model needs per-layer inputs (" + where + ")");
    for (float cut : c.layer_sparsity)
      if (std::isnan(cut) || cut == std::numeric_limits<float>::infinity())
        throw ModelError("invalid activation sparsity in " + where);
  }
}

// erf^-1(x) for -1 < x < 1, by Newton's method on erf (double).
double erfinv(double x) {
  double y = 0.0;
  for (int it = 0; it < 200; ++it) {
    const double step = (std::erf(y) - x) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-y * y));
    y -= step;
    if (std::fabs(step) < 1e-15 * std::max(1.0, std::fabs(y))) break;
  }
  return y;
}

// Gemma 3n's cut of a layer's gate (standard deviations above its mean) for the share `s` of its
// values cut: Phi^-1(s) as transformers computes it in float32 (torch's Normal.icdf: erfinv(2s - 1)
// times sqrt(2), each step rounded to float); -inf for none.
float sparsity_cut(double s) {
  if (!(s > 0.0)) return -std::numeric_limits<float>::infinity();
  const float x = 2.0f * static_cast<float>(s) - 1.0f;
  return static_cast<float>(erfinv(x)) * static_cast<float>(std::sqrt(2.0));
}

// Gemma3nTextConfig's default activation sparsity: 0.95 in the first 10 layers of a model of more.
std::vector<float> default_sparsity(int n_layer) {
  std::vector<float> out(static_cast<size_t>(n_layer), sparsity_cut(0.0));
  for (int l = 0; l < n_layer && n_layer > 10 && l < 10; ++l)
    out[static_cast<size_t>(l)] = sparsity_cut(0.95);
  return out;
}

// A positive size of a Gemma 4 / 3n config.json (its class's default where the file leaves it out).
int gemma_hf_dim(const Json& cfg, const char* key, int64_t dflt, int64_t max = int64_t{1} << 30) {
  const int64_t v = cfg.integer(key, dflt);
  if (v <= 0 || v > max)
    throw ModelError(std::string("invalid ") + key + " " + std::to_string(v) + " in '" + cfg.path +
                     "'");
  return static_cast<int>(v);
}

// The defaults of the sizes Gemma4TextConfig and Gemma3nTextConfig differ in.
struct GemmaHfDefaults {
  int64_t vocab, hidden, layers, kv_heads, context;
};

// The sizes, norm epsilon and refusals Gemma 4 and Gemma 3n folders share (8 heads of 256 by
// default in both).
void gemma_hf_shapes(const Json& cfg, ModelConfig& c, const GemmaHfDefaults& d) {
  const std::string where = "'" + cfg.path + "'";
  c.n_vocab = gemma_hf_dim(cfg, "vocab_size", d.vocab);
  c.n_embd = gemma_hf_dim(cfg, "hidden_size", d.hidden);
  c.n_layer = gemma_hf_dim(cfg, "num_hidden_layers", d.layers, 4096);
  c.n_head = gemma_hf_dim(cfg, "num_attention_heads", 8, 65536);
  c.n_head_kv = gemma_hf_dim(cfg, "num_key_value_heads", d.kv_heads, 65536);
  c.head_dim = gemma_hf_dim(cfg, "head_dim", 256, 65536);
  c.n_ctx_train = gemma_hf_dim(cfg, "max_position_embeddings", d.context);
  c.rms_eps = static_cast<float>(cfg.number("rms_norm_eps", 1e-6));
  if (cfg.string("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh")
    throw ModelError("hidden_activation '" + cfg.string("hidden_activation", "") + "' in " + where +
                     " is not supported (gelu_pytorch_tanh is)");
  if (cfg.boolean("attention_bias", false))
    throw ModelError("attention_bias=true in " + where + " is not supported");
}

// A per-layer integer key of a GGUF file (an array of n_layer values, or one for every layer).
std::vector<int> gguf_per_layer(const GGUFFile& g, const std::string& key, int n_layer,
                                int64_t dflt, const std::string& path) {
  const GGUFValue* v = g.find(key);
  std::vector<int> out(static_cast<size_t>(n_layer));
  if (v != nullptr && std::holds_alternative<std::shared_ptr<GGUFArray>>(v->value)) {
    const std::vector<int64_t> a = g.get_int_array(key);
    if (a.size() != static_cast<size_t>(n_layer))
      throw ModelError(key + " in '" + path + "' must hold one value per layer");
    for (int l = 0; l < n_layer; ++l) {
      if (a[static_cast<size_t>(l)] <= 0 || a[static_cast<size_t>(l)] > (int64_t{1} << 30))
        throw ModelError("invalid " + key + " of layer " + std::to_string(l) + " in '" + path +
                         "'");
      out[static_cast<size_t>(l)] = static_cast<int>(a[static_cast<size_t>(l)]);
    }
    return out;
  }
  const int64_t one = g.get_int(key, dflt);
  if (one <= 0 || one > (int64_t{1} << 30))
    throw ModelError("invalid " + key + " " + std::to_string(one) + " in '" + path + "'");
  std::fill(out.begin(), out.end(), static_cast<int>(one));
  return out;
}

}  // namespace

void gemma4_config_gguf(const GGUFFile& g, ModelConfig& c, const std::vector<float>& rope_freqs,
                        const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  const bool g3n = c.arch == "gemma3n";
  if (g.get_int(k + "attention.key_length", 0) != g.get_int(k + "attention.value_length", 0) ||
      g.get_int(k + "attention.key_length_swa", 0) !=
          g.get_int(k + "attention.value_length_swa", 0))
    throw ModelError("attention.value_length differs from key_length in " + where +
                     " (Gemma 4 needs them equal)");
  const int64_t hd_full = g.get_int(k + "attention.key_length", 0);
  const int64_t hd_swa = g.get_int(k + "attention.key_length_swa", hd_full);
  if (hd_full <= 0 || hd_full > 65536 || hd_swa <= 0 || hd_swa > 65536)
    throw ModelError("invalid attention.key_length in " + where);
  c.sliding_window = window_of(g.get_int(k + "attention.sliding_window", 0), where);
  c.layer_sliding = gguf_layer_pattern(g, k + "attention.sliding_window_pattern", c.n_layer);
  if (g3n && c.layer_sliding.empty())  // (llama.cpp's default: every fifth layer global)
    c.layer_sliding = pattern_layers(c.n_layer, 5);
  if (c.layer_sliding.empty() || c.sliding_window == 0)
    throw ModelError(
        "a Gemma 4 file needs attention.sliding_window and a per-layer "
        "attention.sliding_window_pattern (" +
        where + ")");
  c.head_dim = static_cast<int>(hd_swa);
  c.layer_head_dim.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l)
    c.layer_head_dim[static_cast<size_t>(l)] = static_cast<int>(c.sliding(l) ? hd_swa : hd_full);
  c.layer_n_head_kv = gguf_per_layer(g, k + "attention.head_count_kv", c.n_layer, c.n_head, path);
  c.layer_n_ff = gguf_per_layer(g, k + "feed_forward_length", c.n_layer, 0, path);
  c.n_head_kv = 0;
  c.n_ff = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.sliding(l)) c.n_head_kv = c.layer_n_head_kv[static_cast<size_t>(l)];
    c.n_ff = std::max(c.n_ff, c.layer_n_ff[static_cast<size_t>(l)]);
  }
  if (c.n_head_kv == 0) c.n_head_kv = c.layer_n_head_kv[0];
  // RoPE: the global layers over their whole head with rope_freqs' factors (1: turns, 1e30: held),
  // the sliding ones over theirs with their own base.
  if (g.get_int(k + "rope.dimension_count", hd_full) != hd_full ||
      g.get_int(k + "rope.dimension_count_swa", hd_swa) != hd_swa)
    throw ModelError("partial RoPE (rope.dimension_count below the head size) in " + where +
                     " is not supported");
  c.rope_theta_swa = static_cast<float>(g.get_float(k + "rope.freq_base_swa", 10000.0));
  c.rope_pairs = static_cast<int>(hd_full / 2);
  if (!rope_freqs.empty()) {
    int ones = 0;
    while (ones < static_cast<int>(rope_freqs.size()) &&
           rope_freqs[static_cast<size_t>(ones)] == 1.0f)
      ++ones;
    for (size_t i = static_cast<size_t>(ones); i < rope_freqs.size(); ++i)
      if (!(rope_freqs[i] >= 1e20f))
        throw ModelError("rope_freqs of " + where +
                         " is not Gemma 4's proportional RoPE (factors "
                         "1, then 1e30)");
    c.rope_pairs = ones;
  }
  // (Gemma 3n files without the key: llama.cpp's fixed 20 layers with their own K/V)
  const int64_t shared_dflt = g3n ? std::max(c.n_layer - 20, 0) : 0;
  c.kv_source =
      gemma4_kv_source(c, g.get_int(k + "attention.shared_kv_layers", shared_dflt), where);
  c.ple_dim = static_cast<int>(
      std::clamp<int64_t>(g.get_int(k + "embedding_length_per_layer_input", 0), -1, 1 << 21));
  c.final_softcap = static_cast<float>(g.get_float(k + "final_logit_softcapping", 0.0));
  if (g3n) {
    if (g.get_int(k + "altup.active_idx", 0) != 0)
      throw ModelError("altup.active_idx other than 0 in " + where + " is not supported");
    c.altup =
        static_cast<int>(std::clamp<int64_t>(g.get_int(k + "altup.num_inputs", 4), -1, 1 << 10));
    if (g.find(k + "activation_sparsity_scale") != nullptr) {
      const std::vector<double> cuts = g.get_float_array(k + "activation_sparsity_scale");
      if (cuts.size() != static_cast<size_t>(c.n_layer))
        throw ModelError("activation_sparsity_scale in " + where +
                         " must hold one value per layer");
      c.layer_sparsity.assign(cuts.begin(), cuts.end());
    } else {
      c.layer_sparsity = default_sparsity(c.n_layer);
    }
  }
  gemma4_check(c, where);
}

void gemma4_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string& path = cfg.path;
  const std::string where = "'" + path + "'";
  // (Gemma4TextConfig's defaults for what a file leaves out)
  gemma_hf_shapes(cfg, c, {262144, 2304, 30, 4, 131072});
  c.n_ff = gemma_hf_dim(cfg, "intermediate_size", 9216);
  if (cfg.string("use_bidirectional_attention", "vision") == "all")
    throw ModelError("use_bidirectional_attention='all' in " + where +
                     " (an encoder) is not supported");
  c.sliding_window = window_of(cfg.integer("sliding_window", 512), where);
  c.layer_sliding = hf_layer_types(cfg, c.n_layer);
  if (c.layer_sliding.empty()) c.layer_sliding = pattern_layers(c.n_layer, 6);
  c.layer_sliding.back() = 0;  // (transformers forces the last layer global)
  if (c.sliding_window == 0) throw ModelError("sliding_window 0 in " + where);

  // Per-layer attention shapes: transformers 5.25 writes per_layer_config {layer: {head_dim,
  // num_key_value_heads}}; the released configs global_head_dim (default 512) and
  // num_global_key_value_heads (the global layers' KV heads where attention_k_eq_v).
  const bool k_eq_v = cfg.boolean("attention_k_eq_v", false);
  c.layer_head_dim.assign(static_cast<size_t>(c.n_layer), c.head_dim);
  c.layer_n_head_kv.assign(static_cast<size_t>(c.n_layer), c.n_head_kv);
  if (const JsonValue* per = cfg.get("per_layer_config"); per != nullptr) {
    if (!per->is_object())
      throw ModelError("config 'per_layer_config' in " + where + " must be an object");
    for (const auto& [key, over] : per->object) {
      int64_t l = -1;
      try {
        size_t used = 0;
        l = std::stoll(key, &used);
        if (used != key.size()) l = -1;
      } catch (const std::exception&) {
        l = -1;
      }
      if (l < 0 || l >= c.n_layer || !over.is_object())
        throw ModelError("config 'per_layer_config' in " + where + " names an unknown layer '" +
                         key + "'");
      const Json o{over, path};
      for (const auto& [field, value] : over.object)
        if (field != "head_dim" && field != "num_key_value_heads")
          throw ModelError("config 'per_layer_config' in " + where + " overrides '" + field +
                           "' (not supported)");
      c.layer_head_dim[static_cast<size_t>(l)] =
          static_cast<int>(o.integer("head_dim", c.head_dim));
      c.layer_n_head_kv[static_cast<size_t>(l)] =
          static_cast<int>(o.integer("num_key_value_heads", c.n_head_kv));
    }
  } else {
    const int64_t global_hd = cfg.integer("global_head_dim", 512);
    const JsonValue* gkv = cfg.get("num_global_key_value_heads");
    for (int l = 0; l < c.n_layer; ++l) {
      if (c.sliding(l)) continue;
      c.layer_head_dim[static_cast<size_t>(l)] = static_cast<int>(global_hd);
      if (k_eq_v && gkv != nullptr)
        c.layer_n_head_kv[static_cast<size_t>(l)] =
            static_cast<int>(cfg.integer("num_global_key_value_heads", c.n_head_kv));
    }
  }
  // RoPE per layer type: the sliding layers' default (their base), the global layers'
  // proportional (or default: every frequency turns).
  const JsonValue* params = cfg.get("rope_parameters");
  double theta_full = 1e6, theta_swa = 1e4, prf = 0.25;
  std::string full_type = "proportional";
  if (params != nullptr) {
    if (!params->is_object()) throw ModelError("config 'rope_parameters' must be an object");
    const JsonValue* full = params->get("full_attention");
    const JsonValue* local = params->get("sliding_attention");
    if (full == nullptr || local == nullptr || !full->is_object() || !local->is_object())
      throw ModelError("config 'rope_parameters' in " + where +
                       " needs full_attention and sliding_attention");
    const Json f{*full, path}, s{*local, path};
    full_type = f.string("rope_type", "default");
    theta_full = f.number("rope_theta", 1e6);
    prf = f.number("partial_rotary_factor", 1.0);
    theta_swa = s.number("rope_theta", 1e4);
    if (s.string("rope_type", "default") != "default" ||
        s.number("partial_rotary_factor", 1.0) != 1.0)
      throw ModelError("RoPE scaling or partial rotation of the sliding layers in " + where +
                       " is not supported");
    if ((full_type != "proportional" && full_type != "default") || f.number("factor", 1.0) != 1.0)
      throw ModelError("RoPE type '" + full_type +
                       "' (or a scaling factor) of the global layers in " + where +
                       " is not supported");
  }
  if (!(prf > 0.0 && prf <= 1.0))
    throw ModelError("invalid partial_rotary_factor of the global layers in " + where);
  c.rope_theta = static_cast<float>(theta_full);
  c.rope_theta_swa = static_cast<float>(theta_swa);
  int global_hd = c.head_dim;
  for (int l = 0; l < c.n_layer; ++l)
    if (!c.sliding(l)) global_hd = c.layer_head_dim[static_cast<size_t>(l)];
  // (transformers: int(partial_rotary_factor * head_dim // 2); default RoPE: all)
  c.rope_pairs = full_type == "default"
                     ? global_hd / 2
                     : static_cast<int>(std::floor(prf * static_cast<double>(global_hd) / 2.0));
  const int64_t shared = cfg.integer("num_kv_shared_layers", 0);
  c.kv_source = gemma4_kv_source(c, shared, where);
  c.layer_n_ff.assign(static_cast<size_t>(c.n_layer), c.n_ff);
  if (cfg.boolean("use_double_wide_mlp", false))
    for (int l = c.n_layer - static_cast<int>(std::max<int64_t>(shared, 0)); l < c.n_layer; ++l)
      c.layer_n_ff[static_cast<size_t>(l)] = 2 * c.n_ff;
  c.n_ff = c.max_n_ff();  // (as a GGUF file's: the widest)
  // (null or 0: none; absent: Gemma4TextConfig's 256)
  const JsonValue* ple = cfg.v.get("hidden_size_per_layer_input");
  c.ple_dim = ple != nullptr && ple->is_null()
                  ? 0
                  : static_cast<int>(std::clamp<int64_t>(
                        cfg.integer("hidden_size_per_layer_input", 256), -1, 1 << 21));
  const JsonValue* cap = cfg.v.get("final_logit_softcapping");
  c.final_softcap = static_cast<float>(
      cap != nullptr && cap->is_null() ? 0.0 : cfg.number("final_logit_softcapping", 0.0));
  c.tied_embeddings = cfg.boolean("tie_word_embeddings", true);
  if (cfg.boolean("enable_moe_block", false)) {  // (26B-A4B: experts beside every layer's MLP)
    MoeConfig& m = c.moe;
    m.n_expert = static_cast<int>(std::clamp<int64_t>(cfg.integer("num_experts", 0), -1, 1 << 20));
    m.n_expert_used =
        static_cast<int>(std::clamp<int64_t>(cfg.integer("top_k_experts", 0), -1, 1 << 20));
    m.n_ff_expert = static_cast<int>(
        std::clamp<int64_t>(cfg.integer("moe_intermediate_size", 0), -1, int64_t{1} << 30));
    for (int l = 0; l < c.n_layer; ++l) m.layers.push_back(l);
  }
  gemma4_check(c, where);
}

void gemma3n_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string& path = cfg.path;
  const std::string where = "'" + path + "'";
  // (Gemma3nTextConfig's defaults for what a file leaves out)
  gemma_hf_shapes(cfg, c, {262400, 2048, 35, 2, 32768});
  c.sliding_window = window_of(cfg.integer("sliding_window", 512), where);
  if (c.sliding_window == 0) throw ModelError("sliding_window 0 in " + where);
  c.layer_sliding = hf_layer_types(cfg, c.n_layer);
  if (c.layer_sliding.empty()) c.layer_sliding = pattern_layers(c.n_layer, 5);
  c.layer_head_dim.assign(static_cast<size_t>(c.n_layer), c.head_dim);
  c.layer_n_head_kv.assign(static_cast<size_t>(c.n_layer), c.n_head_kv);
  // intermediate_size: one for every layer, or a list of one per layer
  c.layer_n_ff.assign(static_cast<size_t>(c.n_layer), 0);
  if (const JsonValue* ff = cfg.get("intermediate_size"); ff != nullptr && ff->is_array()) {
    if (ff->array.size() != static_cast<size_t>(c.n_layer))
      throw ModelError("intermediate_size in " + where + " must hold one size per layer");
    for (int l = 0; l < c.n_layer; ++l) {
      const JsonValue& v = ff->array[static_cast<size_t>(l)];
      if (!v.is_number() || !v.is_integer || v.integer <= 0 || v.integer > (int64_t{1} << 30))
        throw ModelError("invalid intermediate_size of layer " + std::to_string(l) + " in " +
                         where);
      c.layer_n_ff[static_cast<size_t>(l)] = static_cast<int>(v.integer);
    }
  } else {
    std::fill(c.layer_n_ff.begin(), c.layer_n_ff.end(),
              gemma_hf_dim(cfg, "intermediate_size", 16384));
  }
  c.n_ff = c.max_n_ff();
  // RoPE: plain on both kinds of layer, each with its base (rope_parameters, or the older
  // rope_theta / rope_local_base_freq)
  double theta_full = cfg.number("rope_theta", 1e6),
         theta_swa = cfg.number("rope_local_base_freq", 1e4);
  if (const JsonValue* params = cfg.get("rope_parameters");
      params != nullptr && !params->is_null()) {
    if (!params->is_object()) throw ModelError("config 'rope_parameters' must be an object");
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      const JsonValue* p = params->get(kind);
      if (p == nullptr || p->is_null()) continue;
      if (!p->is_object()) throw ModelError("config 'rope_parameters' in " + where + " is invalid");
      const Json r{*p, path};
      if (r.string("rope_type", "default") != "default" || r.number("factor", 1.0) != 1.0 ||
          r.number("partial_rotary_factor", 1.0) != 1.0)
        throw ModelError("RoPE type '" + r.string("rope_type", "default") +
                         "' (or a scaling or partial rotation) in " + where + " is not supported");
      (std::string(kind) == "full_attention" ? theta_full : theta_swa) =
          r.number("rope_theta", std::string(kind) == "full_attention" ? theta_full : theta_swa);
    }
  }
  if (const JsonValue* scaling = cfg.get("rope_scaling"); scaling != nullptr && !scaling->is_null())
    throw ModelError("rope_scaling in " + where + " is not supported");
  c.rope_theta = static_cast<float>(theta_full);
  c.rope_theta_swa = static_cast<float>(theta_swa);
  c.rope_pairs = c.head_dim / 2;
  c.kv_source = gemma4_kv_source(c, cfg.integer("num_kv_shared_layers", 15), where);
  c.ple_dim = static_cast<int>(
      std::clamp<int64_t>(cfg.integer("hidden_size_per_layer_input", 256), -1, 1 << 21));
  const JsonValue* cap = cfg.v.get("final_logit_softcapping");
  c.final_softcap = static_cast<float>(
      cap != nullptr && cap->is_null() ? 0.0 : cfg.number("final_logit_softcapping", 30.0));
  c.tied_embeddings = cfg.boolean("tie_word_embeddings", true);
  if (cfg.integer("altup_active_idx", 0) != 0)
    throw ModelError("altup_active_idx other than 0 in " + where + " is not supported");
  c.altup = static_cast<int>(std::clamp<int64_t>(cfg.integer("altup_num_inputs", 4), -1, 1 << 10));
  c.altup_correct_scale = cfg.boolean("altup_correct_scale", true);
  c.laurel_rank = gemma_hf_dim(cfg, "laurel_rank", 64);
  // activation_sparsity_pattern: the share of each layer's gate cut (null: the default; one number:
  // every layer)
  const JsonValue* sp = cfg.get("activation_sparsity_pattern");
  if (sp == nullptr || sp->is_null()) {
    c.layer_sparsity = default_sparsity(c.n_layer);
  } else {
    std::vector<double> shares;
    if (sp->is_number()) {
      shares.assign(static_cast<size_t>(c.n_layer), sp->number);
    } else if (sp->is_array() && sp->array.size() == static_cast<size_t>(c.n_layer)) {
      for (const JsonValue& v : sp->array) shares.push_back(v.is_number() ? v.number : -1.0);
    } else {
      throw ModelError("activation_sparsity_pattern in " + where +
                       " must hold one value per layer");
    }
    for (double s : shares) {
      if (!(s >= 0.0 && s < 1.0))
        throw ModelError("invalid activation sparsity in " + where + " (0 <= s < 1)");
      c.layer_sparsity.push_back(sparsity_cut(s));
    }
  }
  gemma4_check(c, where);
}

namespace {

// AFMoE's layers: `types` (1: sliding) decide RoPE (sliding layers only) and, with a window, where
// it applies.
void afmoe_layers(ModelConfig& c, const std::vector<uint8_t>& types, int64_t window,
                  const std::string& where) {
  c.attn_gate = c.attn_gate_proj = true;
  c.layer_nope.assign(static_cast<size_t>(c.n_layer), 0);
  for (int i = 0; i < c.n_layer; ++i)
    c.layer_nope[static_cast<size_t>(i)] = types[static_cast<size_t>(i)] == 0;
  all_sliding(c, window, where);
  if (c.sliding_window == 0) return;
  c.layer_sliding = types;
  if (std::find(types.begin(), types.end(), 1) == types.end()) all_sliding(c, 0, where);
}

}  // namespace

void afmoe_config_gguf(const GGUFFile& g, ModelConfig& c) {
  const std::string key = c.arch + ".attention.sliding_window";
  std::vector<uint8_t> types = gguf_layer_pattern(g, key + "_pattern", c.n_layer);
  if (types.empty()) types = sliding_but_every(c.n_layer, 4);  // (llama.cpp's, hard-coded)
  afmoe_layers(c, types, g.get_int(key, 0), key);
  c.embd_scale = static_cast<float>(std::sqrt(static_cast<double>(c.n_embd)));
}

void afmoe_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  std::vector<uint8_t> types = hf_layer_types(cfg, c.n_layer);
  if (types.empty()) {
    const int64_t every = cfg.integer("global_attn_every_n_layers", 4);
    if (every < 1)
      throw ModelError("config 'global_attn_every_n_layers' in " + where + " must be >= 1");
    types = sliding_but_every(c.n_layer, every);
  }
  const JsonValue* raw = cfg.v.get("sliding_window");  // (AfmoeConfig's 1024 when absent)
  afmoe_layers(c, types, raw == nullptr ? 1024 : cfg.integer("sliding_window", 0), where);
  if (cfg.boolean("mup_enabled", false))
    c.embd_scale = static_cast<float>(std::sqrt(static_cast<double>(c.n_embd)));
}

bool gelu_is_exact(const Json& cfg, const char* key, const char* dflt) {
  const std::string act = cfg.string(key, dflt);
  if (act != "gelu" && act != "gelu_new" && act != "gelu_fast" && act != "gelu_pytorch_tanh")
    throw ModelError(std::string(key) + " '" + act + "' in '" + cfg.path +
                     "' is not supported (gelu or a tanh GELU is)");
  return act == "gelu";
}

std::vector<float> alibi_slopes(int n_head, double max_bias) {
  int n2 = 1;
  while (n2 * 2 <= n_head) n2 *= 2;
  std::vector<float> s(static_cast<size_t>(std::max(n_head, 0)));
  for (int h = 0; h < n_head; ++h) {
    const double e = h < n2 ? -max_bias * (h + 1) / n2 : -max_bias * (2 * (h - n2) + 1) / (2 * n2);
    s[static_cast<size_t>(h)] = static_cast<float>(std::exp2(e));
  }
  return s;
}

namespace {

// ALiBi in every layer (no RoPE anywhere), slopes for the bound max_bias.
void set_alibi(ModelConfig& c, double max_bias, const std::string& where) {
  if (!(max_bias > 0.0 && max_bias <= 64.0))
    throw ModelError("invalid ALiBi bias bound " + std::to_string(max_bias) + " in " + where);
  c.alibi = alibi_slopes(c.n_head, max_bias);
  c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);
}

}  // namespace

void gpt_classic_config_gguf(const GGUFFile& g, ModelConfig& c,
                             const std::function<bool(const std::string&)>& has,
                             const std::string& path) {
  const std::string k = c.arch + ".", where = "'" + path + "'";
  c.layer_norm = c.ffn_gelu = true;
  c.norm_bias = has("blk.0.attn_norm.bias");
  c.ffn_bias = has("blk.0.ffn_up.bias");
  c.qkv_bias = has("blk.0.attn_qkv.bias");
  c.o_bias = has("blk.0.attn_output.bias");
  c.rms_eps = static_cast<float>(g.get_float(k + "attention.layer_norm_epsilon", 1e-5));
  // (MPT's GELU is the exact one, as transformers runs it; llama.cpp's files cannot say, and
  // llama.cpp runs its tanh table; the others' are tanh approximations)
  c.gelu_erf = c.arch == "mpt";
  c.embd_norm = c.arch == "bloom";
  c.pos_embd = has("position_embd.weight");
  if ((c.arch == "gpt2" || c.arch == "starcoder") && !c.pos_embd)
    throw ModelError("missing tensor 'position_embd.weight' in " + where);
  if (c.arch == "mpt" && has("blk.0.attn_q_norm.weight"))
    throw ModelError("MPT's q / k LayerNorms (qk_ln: attn_q_norm) in " + where +
                     " are not supported");
  if (c.arch == "bloom" || c.arch == "mpt")  // (llama.cpp: 8 for BLOOM, MPT's key otherwise)
    set_alibi(c, g.get_float(k + "attention.max_alibi_bias", 8.0), where);
  else
    c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);
}

void gpt_classic_config_hf(const Json& cfg, ModelConfig& c) {
  const std::string where = "'" + cfg.path + "'";
  const std::string type = cfg.string("model_type", "");
  c.layer_norm = c.ffn_gelu = c.norm_bias = c.ffn_bias = c.qkv_bias = c.o_bias = true;
  c.rms_eps = static_cast<float>(cfg.number("layer_norm_epsilon", 1e-5));
  if (c.arch == "bloom") {  // (BLOOM's tanh GELU; the embeddings' LayerNorm)
    if (cfg.boolean("apply_residual_connection_post_layernorm", false))
      throw ModelError("apply_residual_connection_post_layernorm=true in " + where +
                       " is not supported");
    c.embd_norm = true;
    set_alibi(c, 8.0, where);
    return;
  }
  if (c.arch == "mpt") {  // (as transformers' MptForCausalLM runs it: no biases, exact GELU)
    c.norm_bias = c.ffn_bias = c.qkv_bias = c.o_bias = false;
    c.gelu_erf = true;
    const JsonValue* attn = cfg.get("attn_config");
    const JsonValue empty = parse_json("{}", where);
    const Json a{attn != nullptr && attn->is_object() ? *attn : empty, cfg.path};
    if (cfg.integer("expansion_ratio", 4) != 4)
      throw ModelError("expansion_ratio other than 4 in " + where + " is not supported");
    if (!cfg.boolean("no_bias", true))
      throw ModelError("no_bias=false (MPT with biases) in " + where + " is not supported");
    if (cfg.get("logit_scale") != nullptr)
      throw ModelError("logit_scale in " + where + " is not supported");
    if (a.boolean("qk_ln", false))
      throw ModelError("attn_config.qk_ln=true in " + where + " is not supported");
    if (!a.boolean("alibi", true))
      throw ModelError("attn_config.alibi=false (learned positions) in " + where +
                       " is not supported");
    if (a.string("attn_type", "multihead_attention") != "multihead_attention")
      throw ModelError("attn_config.attn_type '" + a.string("attn_type", "") + "' in " + where +
                       " is not supported (multihead_attention is)");
    if (a.boolean("prefix_lm", false) || a.boolean("attn_uses_sequence_id", false))
      throw ModelError("attn_config.prefix_lm / attn_uses_sequence_id in " + where +
                       " are not supported");
    const double clip = a.number("clip_qkv", 0.0), scale = a.number("softmax_scale", 0.0);
    if (!(clip >= 0.0) || !(scale >= 0.0))
      throw ModelError("invalid attn_config.clip_qkv / softmax_scale in " + where);
    c.clamp_qkv = static_cast<float>(clip);
    c.attn_scale = static_cast<float>(scale);
    set_alibi(c, a.number("alibi_bias_max", 8.0), where);
    return;
  }
  // GPT-2 / GPT-BigCode / OPT / GPT-Neo: learned positions, the GELU of activation_function
  c.pos_embd = true;
  c.layer_nope.assign(static_cast<size_t>(c.n_layer), 1);
  if (type == "opt") {  // OPT: a ReLU MLP, every projection biased where enable_bias says
    if (!cfg.boolean("do_layer_norm_before", true))
      throw ModelError("do_layer_norm_before=false (OPT-350m's post-LayerNorm layers) in " + where +
                       " is not supported");
    if (cfg.integer("word_embed_proj_dim", c.n_embd) != c.n_embd)
      throw ModelError(
          "word_embed_proj_dim other than hidden_size (OPT-350m's project_in / "
          "project_out) in " +
          where + " is not supported");
    if (!cfg.boolean("layer_norm_elementwise_affine", true))
      throw ModelError("layer_norm_elementwise_affine=false in " + where + " is not supported");
    if (cfg.boolean("_remove_final_layer_norm", false))
      throw ModelError("_remove_final_layer_norm=true in " + where + " is not supported");
    c.rms_eps = 1e-5f;  // (torch's LayerNorm default; OPTConfig has no key)
    c.qkv_bias = c.o_bias = c.ffn_bias = cfg.boolean("enable_bias", true);
    if (cfg.string("hidden_act", "relu") == "relu")
      c.ffn_relu = true;
    else
      c.gelu_erf = gelu_is_exact(cfg, "hidden_act", "relu");
    return;
  }
  if (type == "gpt_neo") {  // GPT-Neo: unscaled attention, a window on its "local" layers
    c.qkv_bias = false;
    c.attn_scale = 1.0f;
    c.gelu_erf = gelu_is_exact(cfg, "hidden_act", "gelu_new");
    // (attention_layers: a type per layer; else attention_types' [[types, repeats], ...] expanded,
    // as GPTNeoConfig does)
    std::vector<std::string> types;
    const JsonValue* layers = cfg.get("attention_layers");
    const JsonValue* groups = cfg.get("attention_types");
    if (layers != nullptr && layers->is_array()) {
      for (const JsonValue& t : layers->array) types.push_back(t.is_string() ? t.string : "");
    } else if (groups != nullptr && groups->is_array()) {
      for (const JsonValue& g : groups->array) {
        if (!g.is_array() || g.array.size() != 2 || !g.array[0].is_array() ||
            !g.array[1].is_number() || !g.array[1].is_integer || g.array[1].integer < 0 ||
            g.array[1].integer > 4096)
          throw ModelError("malformed attention_types in " + where);
        for (int64_t r = 0; r < g.array[1].integer; ++r)
          for (const JsonValue& t : g.array[0].array)
            types.push_back(t.is_string() ? t.string : "");
      }
    }
    if (types.size() != static_cast<size_t>(c.n_layer))
      throw ModelError("attention_layers / attention_types in " + where +
                       " must give one type per layer");
    c.layer_sliding.clear();
    for (const std::string& t : types) {
      if (t != "global" && t != "local")
        throw ModelError("attention layer type '" + t + "' in " + where +
                         " is not supported (global, local)");
      c.layer_sliding.push_back(t == "local");
    }
    c.sliding_window = window_of(cfg.integer("window_size", 256), "window_size in " + where);
    if (std::find(c.layer_sliding.begin(), c.layer_sliding.end(), 1) == c.layer_sliding.end()) {
      c.sliding_window = 0;
      c.layer_sliding.clear();
    } else if (c.sliding_window == 0) {  // (transformers' mask would leave nothing to attend to)
      throw ModelError("window_size 0 with local attention layers in " + where);
    }
    return;
  }
  c.gelu_erf = gelu_is_exact(cfg, "hidden_act", type == "gpt2" ? "gelu_new" : "gelu_pytorch_tanh");
  if (!cfg.boolean("scale_attn_weights", true)) c.attn_scale = 1.0f;
  if (cfg.boolean("scale_attn_by_inverse_layer_idx", false))
    throw ModelError("scale_attn_by_inverse_layer_idx=true in " + where + " is not supported");
  if (cfg.boolean("add_cross_attention", false))
    throw ModelError("add_cross_attention=true in " + where + " is not supported");
}

}  // namespace ossa
