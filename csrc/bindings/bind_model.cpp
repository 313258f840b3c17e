// Models: core.Model, core.load_model, core.gguf_metadata, core.dequantize_tensor, and the forward
// pass: core.ModelRunner (a model with its paged K/V pool), core.model_logits.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/common.h"
#include "formats/dequantize.h"
#include "formats/gguf.h"
#include "formats/gguf_split.h"
#include "model/runner.h"
#include "model/weights.h"
#include "util/error.h"

namespace nb = nanobind;

namespace {

// Model files are untrusted: names and strings in them need not be UTF-8.
nb::object str_or_bytes(const std::string& s) {
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
  if (u != nullptr) return nb::steal(u);
  PyErr_Clear();
  return nb::bytes(s.data(), s.size());
}

// Error messages quote names from the file; replace invalid UTF-8 so Python can show them.
std::string printable(const std::string& s) {
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (u == nullptr) {
    PyErr_Clear();
    return "(unprintable)";
  }
  Py_ssize_t n = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(u, &n);
  std::string out = utf8 != nullptr ? std::string(utf8, static_cast<size_t>(n)) : "(unprintable)";
  if (utf8 == nullptr) PyErr_Clear();
  Py_DECREF(u);
  return out;
}

template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ossa::ModelError& e) {
    throw ossa::ModelError(printable(e.what()));
  } catch (const ossa::InputError& e) {
    throw ossa::InputError(printable(e.what()));
  }
}

nb::object gguf_to_python(const ossa::GGUFValue& v) {
  using ossa::GGUFType;
  switch (v.type) {
    case GGUFType::ARRAY: {
      nb::list out;
      for (const ossa::GGUFValue& e : *std::get<std::shared_ptr<ossa::GGUFArray>>(v.value))
        out.append(gguf_to_python(e));
      return out;
    }
    case GGUFType::STRING:
      // Strings are meant to be UTF-8; one that is not comes back as bytes (the twin does the
      // same).
      return str_or_bytes(std::get<std::string>(v.value));
    case GGUFType::BOOL:
      return nb::bool_(std::get<bool>(v.value));
    case GGUFType::FLOAT32:
    case GGUFType::FLOAT64:
      return nb::float_(std::get<double>(v.value));
    default:
      if (const auto* i = std::get_if<int64_t>(&v.value)) return nb::int_(*i);
      return nb::steal(PyLong_FromUnsignedLongLong(std::get<uint64_t>(v.value)));
  }
}

nb::dict config_dict(const ossa::ModelConfig& c) {
  nb::dict d;
  d["arch"] = c.arch;
  d["n_vocab"] = c.n_vocab;
  d["n_embd"] = c.n_embd;
  d["n_layer"] = c.n_layer;
  d["n_head"] = c.n_head;
  d["n_head_kv"] = c.n_head_kv;
  d["head_dim"] = c.head_dim;
  d["n_ff"] = c.n_ff;
  d["n_ctx_train"] = c.n_ctx_train;
  d["rms_eps"] = c.rms_eps;
  d["rope_theta"] = c.rope_theta;
  nb::dict s;
  s["type"] = c.rope_scaling.type;
  s["factor"] = c.rope_scaling.factor;
  s["low_freq_factor"] = c.rope_scaling.low_freq_factor;
  s["high_freq_factor"] = c.rope_scaling.high_freq_factor;
  s["original_max_position"] = c.rope_scaling.original_max_position;
  s["short_factor"] = c.rope_scaling.short_factor;
  s["long_factor"] = c.rope_scaling.long_factor;
  s["attn_factor"] = c.rope_scaling.attn_factor;
  s["beta_fast"] = c.rope_scaling.beta_fast;
  s["beta_slow"] = c.rope_scaling.beta_slow;
  s["truncate"] = c.rope_scaling.truncate;
  d["rope_scaling"] = s;
  d["rope_style"] = c.rope_style == ossa::RopeStyle::Interleaved ? "interleaved" : "neox";
  d["qkv_bias"] = c.qkv_bias;
  d["qk_norm"] = c.qk_norm;
  d["tied_embeddings"] = c.tied_embeddings;
  nb::dict moe;
  moe["n_expert"] = c.moe.n_expert;
  moe["n_expert_used"] = c.moe.n_expert_used;
  moe["n_ff_expert"] = c.moe.n_ff_expert;
  moe["n_ff_shared"] = c.moe.n_ff_shared;
  moe["norm_topk_prob"] = c.moe.norm_topk_prob;
  moe["bias"] = c.moe.bias;
  moe["softmax_topk"] = c.moe.softmax_topk;
  moe["swiglu_alpha"] = c.moe.swiglu_alpha;
  moe["swiglu_limit"] = c.moe.swiglu_limit;
  moe["selection_bias"] = c.moe.selection_bias;
  moe["norm_min"] = c.moe.norm_min;
  moe["deepseek"] = c.moe.deepseek;
  moe["sigmoid_gating"] = c.moe.sigmoid_gating;
  moe["group_top2"] = c.moe.group_top2;
  moe["n_group"] = c.moe.n_group;
  moe["topk_group"] = c.moe.topk_group;
  moe["routed_scale"] = c.moe.routed_scale;
  moe["norm_eps"] = c.moe.norm_eps;
  moe["input_weighted"] = c.moe.input_weighted;
  moe["sparsemixer"] = c.moe.sparsemixer;
  moe["sparsemixer_eps"] = c.moe.sparsemixer_eps;
  nb::list layers;
  for (int l : c.moe.layers) layers.append(l);
  moe["layers"] = layers;
  d["moe"] = moe;
  d["sliding_window"] = c.sliding_window;
  nb::list sliding;
  for (uint8_t v : c.layer_sliding) sliding.append(nb::bool_(v != 0));
  d["layer_sliding"] = sliding;
  d["rope_theta_swa"] = c.rope_theta_swa;
  d["rope_dim"] = c.rope_dim;
  d["rope_freqs"] = c.rope_freqs;
  d["attn_scale"] = c.attn_scale;
  d["final_softcap"] = c.final_softcap;
  d["attn_softcap"] = c.attn_softcap;
  d["embd_scale"] = c.embd_scale;
  nb::list nope;
  for (uint8_t v : c.layer_nope) nope.append(nb::bool_(v != 0));
  d["layer_nope"] = nope;
  nb::list no_ffn, no_mixer;  // (Nemotron-H's one-sublayer blocks)
  for (uint8_t v : c.layer_no_ffn) no_ffn.append(nb::bool_(v != 0));
  for (uint8_t v : c.layer_no_mixer) no_mixer.append(nb::bool_(v != 0));
  d["layer_no_ffn"] = no_ffn;
  d["layer_no_mixer"] = no_mixer;
  nb::list linear_attn;  // (deci's linear-attention layers)
  for (uint8_t v : c.layer_linear_attn) linear_attn.append(nb::bool_(v != 0));
  d["layer_linear_attn"] = linear_attn;
  d["ffn_relu2"] = c.ffn_relu2;
  d["ffn_xielu"] = c.ffn_xielu;
  d["xielu"] = c.xielu;
  d["residual_scale"] = c.residual_scale;
  d["logit_scale"] = c.logit_scale;
  d["o_bias"] = c.o_bias;
  d["attn_sinks"] = c.attn_sinks;
  d["clamp_qkv"] = c.clamp_qkv;
  d["attn_temp_scale"] = c.attn_temp_scale;
  d["attn_temp_length"] = c.attn_temp_length;
  d["attn_temp_offset"] = c.attn_temp_offset;
  d["attn_temp_nope"] = c.attn_temp_nope;
  d["attn_chunked"] = c.attn_chunked;
  d["qk_l2_norm"] = c.qk_l2_norm;
  d["qk_norm_after_rope"] = c.qk_norm_after_rope;
  d["norm_bias"] = c.norm_bias;  // (StarCoder2)
  d["ffn_gelu"] = c.ffn_gelu;
  d["ffn_bias"] = c.ffn_bias;
  d["gelu_erf"] = c.gelu_erf;
  d["ffn_relu"] = c.ffn_relu;            // (OPT)
  d["no_post_norms"] = c.no_post_norms;  // (VaultGemma)
  d["no_pre_norms"] = c.no_pre_norms;    // (FlexOlmo)
  d["sub_norms"] = c.sub_norms;          // (BitNet)
  d["glu_relu2"] = c.glu_relu2;
  d["parallel_norms"] = c.parallel_norms;
  d["alibi"] = c.alibi;  // (BLOOM, MPT: the slopes)
  d["embd_norm"] = c.embd_norm;
  d["pos_embd"] = c.pos_embd;
  d["attn_gate_proj"] = c.attn_gate_proj;  // (AFMoE)
  d["layer_norm"] = c.layer_norm;
  d["parallel_block"] = c.parallel_block;
  d["qk_norm_heads"] = c.qk_norm_heads;
  nb::dict mla;
  mla["q_lora_rank"] = c.mla.q_lora_rank;
  mla["kv_lora_rank"] = c.mla.kv_lora_rank;
  mla["qk_nope"] = c.mla.qk_nope;
  mla["qk_rope"] = c.mla.qk_rope;
  mla["v_head_dim"] = c.mla.v_head_dim;
  d["mla"] = mla;
  nb::dict delta;  // (Qwen3.5's gated delta-net layers)
  delta["n_k_heads"] = c.delta.n_k_heads;
  delta["n_v_heads"] = c.delta.n_v_heads;
  delta["k_dim"] = c.delta.k_dim;
  delta["v_dim"] = c.delta.v_dim;
  delta["conv_kernel"] = c.delta.conv_kernel;
  delta["v_tiled"] = c.delta.v_tiled;
  nb::list delta_layers;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.delta.is_layer(l)) delta_layers.append(l);
  delta["layers"] = delta_layers;
  d["delta"] = delta;
  nb::dict conv;  // (LFM2's short convolutions)
  conv["kernel"] = c.conv.kernel;
  nb::list conv_layers;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.conv.is_layer(l)) conv_layers.append(l);
  conv["layers"] = conv_layers;
  d["conv"] = conv;
  nb::dict ssm;  // (Mamba-2 layers: Granite 4.0-H)
  ssm["d_inner"] = c.ssm.d_inner;
  ssm["d_state"] = c.ssm.d_state;
  ssm["n_heads"] = c.ssm.n_heads;
  ssm["n_groups"] = c.ssm.n_groups;
  ssm["conv_kernel"] = c.ssm.conv_kernel;
  ssm["conv_bias"] = c.ssm.conv_bias;
  ssm["gated_norm"] = c.ssm.gated_norm;
  nb::list ssm_layers;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.ssm.is_layer(l)) ssm_layers.append(l);
  ssm["layers"] = ssm_layers;
  d["ssm"] = ssm;
  nb::dict mamba1;  // (Mamba-1 layers: Mamba, Falcon-Mamba)
  mamba1["d_inner"] = c.mamba1.d_inner;
  mamba1["d_state"] = c.mamba1.d_state;
  mamba1["dt_rank"] = c.mamba1.dt_rank;
  mamba1["conv_kernel"] = c.mamba1.conv_kernel;
  mamba1["conv_bias"] = c.mamba1.conv_bias;
  mamba1["dt_b_c_rms"] = c.mamba1.dt_b_c_rms;
  mamba1["dt_b_c_weights"] = c.mamba1.dt_b_c_weights;
  mamba1["bc_eps"] = c.mamba1.bc_eps;
  nb::list mamba1_layers;
  for (int l = 0; l < c.n_layer; ++l)
    if (c.mamba1.is_layer(l)) mamba1_layers.append(l);
  mamba1["layers"] = mamba1_layers;
  d["mamba1"] = mamba1;
  d["parallel_ssm"] = c.parallel_ssm;
  nb::dict mup;  // (Falcon-H1's multipliers: active only for its folders)
  mup["active"] = c.mup.active;
  mup["attn_in"] = c.mup.attn_in;
  mup["key"] = c.mup.key;
  mup["attn_out"] = c.mup.attn_out;
  mup["ssm_in"] = c.mup.ssm_in;
  mup["ssm_out"] = c.mup.ssm_out;
  nb::list zxbcdt;
  for (float v : c.mup.zxbcdt) zxbcdt.append(v);
  mup["zxbcdt"] = zxbcdt;
  mup["mlp_gate"] = c.mup.mlp_gate;
  mup["mlp_down"] = c.mup.mlp_down;
  d["mup"] = mup;
  d["attn_gate"] = c.attn_gate;
  auto ints = [](const std::vector<int>& v) {
    nb::list out;
    for (int x : v) out.append(x);
    return out;
  };
  d["layer_head_dim"] = ints(c.layer_head_dim);  // (Gemma 4)
  d["layer_n_head_kv"] = ints(c.layer_n_head_kv);
  d["layer_n_ff"] = ints(c.layer_n_ff);
  d["kv_source"] = ints(c.kv_source);
  d["rope_pairs"] = c.rope_pairs;
  d["v_norm"] = c.v_norm;
  d["ple_dim"] = c.ple_dim;
  d["altup"] = c.altup;  // (Gemma 3n)
  d["laurel_rank"] = c.laurel_rank;
  nb::list cuts;
  for (float x : c.layer_sparsity) cuts.append(x);
  d["layer_sparsity"] = cuts;
  d["altup_correct_scale"] = c.altup_correct_scale;
  d["n_kv_layers"] = c.kv_layers();
  d["state_bytes"] = ossa::ModelRunner::state_bytes(c);
  return d;
}

ossa::F32Array model_logits(std::shared_ptr<ossa::Model> model,
                            const std::vector<int32_t>& token_ids) {
  if (token_ids.empty()) throw ossa::InputError("model_logits: token_ids is empty");
  const int n = static_cast<int>(token_ids.size());
  constexpr int block_size = 16;
  const int n_blocks = (n + block_size - 1) / block_size;
  ossa::Batch b;
  b.clear();
  b.token_ids = token_ids;
  for (int t = 0; t < n; ++t) {
    b.positions.push_back(t);
    b.slot_mapping.push_back(t);
    b.logits_rows.push_back(t);
  }
  b.seq_start.push_back(n);
  b.context_len.push_back(n);
  for (int i = 0; i < n_blocks; ++i) b.block_tables.push_back(i);
  b.block_table_start.push_back(n_blocks);
  ossa::F32Array out = ossa::new_f32(n, model->config.n_vocab);
  {
    nb::gil_scoped_release release;
    ossa::ModelRunner runner(model, n_blocks, block_size, n);
    runner.forward(b, out.data());
  }
  return out;
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<ossa::Model>(m, "Model", "A loaded model (opaque); use ossa.load_model.")
      .def_prop_ro("config", [](const ossa::Model& self) { return config_dict(self.config); })
      .def_prop_ro("path", [](const ossa::Model& self) { return self.path; })
      .def_prop_ro("format", [](const ossa::Model& self) { return self.format; })
      .def_prop_ro(
          "compute_dtype", [](const ossa::Model& self) { return self.compute_dtype; },
          "'float32' or 'bfloat16' (load_model's dtype)")
      .def_prop_ro(
          "uses_amx", &ossa::Model::uses_amx,
          "Whether the forward pass multiplies any matrix on the AMX kernels (load_model's amx).")
      .def_prop_ro("int8_matrices", &ossa::Model::int8_matrices,
                   "The matrices the forward pass multiplies with activations split into int8 "
                   "pieces, by ossa.reference's names ('layers.0.wq', 'layers.1.experts.3.w_up', "
                   "'output'), each with the values per split block: 32, or 64 (Q2_K / Q3_K). "
                   "With quantized_activations, 32 marks the matrices whose inputs are rounded "
                   "to 8-bit blocks instead.")
      .def_ro("quantized_activations", &ossa::Model::quantized_activations,
              "Whether quantized weights multiply 8-bit activation blocks (load_model's option).")
      .def(
          "tensors",
          [](const ossa::Model& self) {
            nb::list out;
            for (const ossa::NamedTensor& t : self.tensors)
              out.append(
                  nb::make_tuple(str_or_bytes(t.name), t.type_name, t.rows, t.cols, t.nbytes));
            return out;
          },
          "All tensors of the file(s): (name, type_name, rows, cols, nbytes).");

  m.def(
      "load_model",
      [](const std::string& path, const std::string& dtype, bool amx, bool quantized_activations) {
        return guarded([&] {
          nb::gil_scoped_release release;
          return ossa::load_model(path, ossa::LoadOptions{dtype, amx, quantized_activations});
        });
      },
      nb::arg("path"), nb::arg("dtype") = "auto", nb::arg("amx") = true,
      nb::arg("quantized_activations") = false,
      "Load a GGUF file or a Hugging Face folder; dtype 'auto'/'float32' (default numerics) or "
      "'bfloat16' (matrices and their inputs rounded to bf16). amx: repack matrices for the AMX "
      "kernels "
      "where the CPU allows (and OSSA_AMX=0 is not set); False keeps the exact f32 kernels. "
      "quantized_activations: quantized weights multiply 8-bit activation blocks (faster, less "
      "exact) where that is the faster kernel (with AMX, the types on bf16 tiles keep their "
      "inputs; int8_matrices lists the matrices that round). "
      "Raises ModelError naming the problem.");

  m.def(
      "gguf_metadata",
      [](const std::string& path, const std::optional<std::vector<std::string>>& keys) {
        ossa::GGUFModelFiles f = guarded([&] {
          nb::gil_scoped_release release;
          return ossa::open_gguf_model(path);
        });
        nb::dict d;
        if (keys) {
          for (const std::string& key : *keys)
            if (const ossa::GGUFValue* value = f.metadata().find(key))
              d[str_or_bytes(key)] = gguf_to_python(*value);
          return d;
        }
        for (const auto& [key, value] : f.metadata().metadata())
          d[str_or_bytes(key)] = gguf_to_python(value);
        return d;
      },
      nb::arg("path"), nb::arg("keys") = nb::none(),
      "The metadata of a GGUF file as Python values (arrays as lists); for any shard of a split "
      "model, the model's (its first shard's). keys: only these (those present), e.g. one "
      "string without converting a 100k-entry vocabulary.");
  m.def(
      "gguf_shard_paths",
      [](const std::string& path) {
        return guarded([&] {
          nb::gil_scoped_release release;
          return ossa::open_gguf_model(path).paths;
        });
      },
      nb::arg("path"),
      "Every file of the GGUF model `path` is a file of: [path] for an unsplit file, else its "
      "shards in "
      "order, all opened and checked (a missing or mismatched shard raises ModelError).");

  auto dequantize = [](const ossa::Model& model, const std::string& name) {
    const ossa::TensorView* v = model.find_tensor(name);
    if (v == nullptr)
      throw ossa::InputError("no tensor '" + printable(name) +
                             "' in the model (or of a type ossa cannot read)");
    const size_t n = static_cast<size_t>(v->rows) * static_cast<size_t>(v->cols);
    float* out = new float[n > 0 ? n : 1];
    nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    {
      nb::gil_scoped_release release;
      for (int64_t r = 0; r < v->rows; ++r)
        ossa::dequantize_row_logical(*v, r, out + static_cast<size_t>(r) * v->cols);
    }
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(
        out, {static_cast<size_t>(v->rows), static_cast<size_t>(v->cols)}, owner);
  };
  m.def("dequantize_tensor", dequantize, nb::arg("model"), nb::arg("name"),
        "A tensor (file name or canonical name such as 'layers.0.wq') dequantized to float32 "
        "[rows, cols].");
  m.def(
      "dequantize_tensor",
      [dequantize](const ossa::Model& model, nb::bytes name) {
        return dequantize(model, std::string(name.c_str(), name.size()));
      },
      nb::arg("model"), nb::arg("name"), "The same, for a tensor whose stored name is not UTF-8.");

  m.def(
      "tensor_type",
      [](const ossa::Model& model, const std::string& name) {
        const ossa::TensorView* v = model.find_tensor(name);
        if (v == nullptr)
          throw ossa::InputError("no tensor '" + printable(name) +
                                 "' in the model (or of a type ossa cannot read)");
        return std::string(ossa::dtype_name(v->type));
      },
      nb::arg("model"), nb::arg("name"),
      "The type a tensor is stored as ('Q4_0', 'F32', ...; file name or canonical name), as loaded "
      "(before any AMX repacking): what a quantized folder's matrices became.");
  m.def("model_logits", &model_logits, nb::arg("model"), nb::arg("token_ids"),
        "Logits [n_tokens, n_vocab] of a fresh forward over one sequence.");

  nb::class_<ossa::ModelRunner>(m, "ModelRunner",
                                "A model with its paged K/V pool and preallocated work buffers.")
      .def(
          "__init__",
          [](ossa::ModelRunner* r, std::shared_ptr<const ossa::Model> model, int num_blocks,
             int block_size, int max_num_batched_tokens, const std::string& kv_cache_dtype,
             int num_state_slots) {
            new (r)
                ossa::ModelRunner(std::move(model), num_blocks, block_size, max_num_batched_tokens,
                                  ossa::parse_kv_type(kv_cache_dtype), num_state_slots);
          },
          nb::arg("model"), nb::arg("num_blocks"), nb::arg("block_size"),
          nb::arg("max_num_batched_tokens"), nb::arg("kv_cache_dtype") = "float32",
          nb::arg("num_state_slots") = 1)
      .def(
          "forward",
          [](ossa::ModelRunner& r, std::vector<int32_t> token_ids, std::vector<int32_t> positions,
             std::vector<int64_t> slot_mapping, std::vector<int32_t> seq_start,
             std::vector<int32_t> context_len, std::vector<int32_t> block_table_start,
             std::vector<int32_t> block_tables, std::vector<int32_t> logits_rows,
             std::vector<int32_t> state_slots) {
            ossa::Batch b;
            b.token_ids = std::move(token_ids);
            b.positions = std::move(positions);
            b.slot_mapping = std::move(slot_mapping);
            b.seq_start = std::move(seq_start);
            b.context_len = std::move(context_len);
            b.block_table_start = std::move(block_table_start);
            b.block_tables = std::move(block_tables);
            b.logits_rows = std::move(logits_rows);
            b.state_slots = std::move(state_slots);
            if (b.context_len.size() + 1 != b.seq_start.size())
              throw ossa::InputError(
                  "ModelRunner.forward: seq_start needs len(context_len) + 1 entries");
            ossa::F32Array out = ossa::new_f32(b.logits_rows.size(), r.model().config.n_vocab);
            nb::gil_scoped_release release;
            r.forward(b, out.data());
            return out;
          },
          nb::arg("token_ids"), nb::arg("positions"), nb::arg("slot_mapping"), nb::arg("seq_start"),
          nb::arg("context_len"), nb::arg("block_table_start"), nb::arg("block_tables"),
          nb::arg("logits_rows"), nb::arg("state_slots") = std::vector<int32_t>{},
          "One batched step; returns logits [len(logits_rows), n_vocab]. state_slots: each "
          "sequence's recurrent state slot (models with delta-net layers; empty: slot i for "
          "sequence i).")
      .def("copy_block", &ossa::ModelRunner::copy_block, nb::arg("src"), nb::arg("dst"))
      .def("copy_state", &ossa::ModelRunner::copy_state, nb::arg("src"), nb::arg("dst"),
           "A forked sequence's recurrent state: slot dst gets slot src's.")
      .def_prop_ro("num_state_slots", &ossa::ModelRunner::num_state_slots)
      .def_prop_ro("num_blocks", &ossa::ModelRunner::num_blocks)
      .def_prop_ro("block_size", &ossa::ModelRunner::block_size)
      .def_prop_ro("max_num_batched_tokens", &ossa::ModelRunner::max_num_batched_tokens)
      .def_prop_ro("kv_cache_dtype",
                   [](const ossa::ModelRunner& r) { return ossa::kv_type_name(r.kv_type()); })
      .def_static(
          "kv_bytes_per_token",
          [](std::shared_ptr<ossa::Model> model, const std::string& kv_cache_dtype) {
            return ossa::ModelRunner::kv_bytes_per_token(model->config,
                                                         ossa::parse_kv_type(kv_cache_dtype));
          },
          nb::arg("model"), nb::arg("kv_cache_dtype") = "float32");
}
