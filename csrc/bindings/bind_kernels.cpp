// Bindings of the forward pass: core.model_logits, core.ModelRunner, and kernel hooks for tests.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/quant.h"
#include "model/runner.h"
#include "util/aligned.h"
#include "util/error.h"

namespace nb = nanobind;

namespace {

using F32Array = nb::ndarray<nb::numpy, float, nb::ndim<2>>;

F32Array new_f32(size_t rows, size_t cols) {
  float* data = new float[rows * cols > 0 ? rows * cols : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return F32Array(data, {rows, cols}, owner);
}

// A weight given as raw stored bytes of ggml type `ggml_type`, checked and (as the loader does, when
// AMX is on) repacked, and the activations x [n, cols] (8-bit blocks too when `q8`).
struct KernelMatmul {
  ossa::TensorView w;
  ossa::MatmulInput in;
  ossa::AlignedVector<uint8_t> packed;
  std::vector<ossa::BlockQ8> q8s;

  KernelMatmul(const nb::ndarray<const uint8_t, nb::c_contig>& weight, uint32_t ggml_type, int64_t rows,
               int64_t cols, const nb::ndarray<float, nb::ndim<2>, nb::c_contig>& x, bool q8,
               const std::string& dtype, bool amx) {
    if (dtype != "float32" && dtype != "bfloat16")
      throw ossa::InputError("kernel_matmul: dtype must be 'float32' or 'bfloat16'");
    if (!ossa::dtype_supported(ggml_type)) throw ossa::InputError("unsupported type " + ossa::ggml_type_name(ggml_type));
    const ossa::DType t = static_cast<ossa::DType>(ggml_type);
    const ossa::DTypeTraits tr = ossa::dtype_traits(t);
    if (rows < 1 || cols < 1 || cols % tr.block_elems != 0 || static_cast<int64_t>(x.shape(1)) != cols)
      throw ossa::InputError("kernel_matmul: bad shape");
    w.type = t;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = static_cast<size_t>(cols / tr.block_elems) * tr.block_bytes;
    if (weight.size() != w.nbytes()) throw ossa::InputError("kernel_matmul: weight has the wrong size");
    w.data = weight.data();
    const int64_t n = static_cast<int64_t>(x.shape(0));
    in = ossa::MatmulInput{x.data(), nullptr, n, cols};
    if (dtype == "bfloat16") {  // as load_model(dtype="bfloat16") converts each matrix
      packed.assign(ossa::bf16_compute_bytes(w), 0);
      w = ossa::make_bf16_compute(w, packed.data(), amx && ossa::amx_default());
      return;
    }
    packed.assign(amx && ossa::amx_default() ? ossa::amx_repacked_bytes(w) : 0, 0);
    if (!packed.empty()) {
      ossa::amx_repack_groups(w, packed.data(), 0, (rows + 15) / 16);
      w.packed = packed.data();
    }
    if (q8 && ossa::dtype_quantized(t)) {
      q8s.resize(static_cast<size_t>(n * cols / ossa::k_qblock));
      ossa::quantize_rows_q8(x.data(), n, cols, q8s.data());
      in.q8 = q8s.data();
    }
  }
};

F32Array model_logits(std::shared_ptr<ossa::Model> model, const std::vector<int32_t>& token_ids) {
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
  F32Array out = new_f32(n, model->config.n_vocab);
  {
    nb::gil_scoped_release release;
    ossa::ModelRunner runner(model, n_blocks, block_size, n);
    runner.forward(b, out.data());
  }
  return out;
}

}  // namespace

void bind_kernels(nb::module_& m) {
  m.def("model_logits", &model_logits, nb::arg("model"), nb::arg("token_ids"),
        "Logits [n_tokens, n_vocab] of a fresh forward over one sequence.");

  nb::class_<ossa::ModelRunner>(m, "ModelRunner",
                                "A model with its paged K/V pool and preallocated work buffers.")
      .def(
          "__init__",
          [](ossa::ModelRunner* r, std::shared_ptr<const ossa::Model> model, int num_blocks, int block_size,
             int max_num_batched_tokens, const std::string& kv_cache_dtype) {
            new (r) ossa::ModelRunner(std::move(model), num_blocks, block_size, max_num_batched_tokens,
                                      ossa::parse_kv_type(kv_cache_dtype));
          },
          nb::arg("model"), nb::arg("num_blocks"), nb::arg("block_size"), nb::arg("max_num_batched_tokens"),
          nb::arg("kv_cache_dtype") = "float32")
      .def(
          "forward",
          [](ossa::ModelRunner& r, std::vector<int32_t> token_ids, std::vector<int32_t> positions,
             std::vector<int64_t> slot_mapping, std::vector<int32_t> seq_start,
             std::vector<int32_t> context_len, std::vector<int32_t> block_table_start,
             std::vector<int32_t> block_tables, std::vector<int32_t> logits_rows) {
            ossa::Batch b;
            b.token_ids = std::move(token_ids);
            b.positions = std::move(positions);
            b.slot_mapping = std::move(slot_mapping);
            b.seq_start = std::move(seq_start);
            b.context_len = std::move(context_len);
            b.block_table_start = std::move(block_table_start);
            b.block_tables = std::move(block_tables);
            b.logits_rows = std::move(logits_rows);
            if (b.context_len.size() + 1 != b.seq_start.size())
              throw ossa::InputError("ModelRunner.forward: seq_start needs len(context_len) + 1 entries");
            F32Array out = new_f32(b.logits_rows.size(), r.model().config.n_vocab);
            nb::gil_scoped_release release;
            r.forward(b, out.data());
            return out;
          },
          nb::arg("token_ids"), nb::arg("positions"), nb::arg("slot_mapping"), nb::arg("seq_start"),
          nb::arg("context_len"), nb::arg("block_table_start"), nb::arg("block_tables"),
          nb::arg("logits_rows"), "One batched step; returns logits [len(logits_rows), n_vocab].")
      .def("copy_block", &ossa::ModelRunner::copy_block, nb::arg("src"), nb::arg("dst"))
      .def_prop_ro("num_blocks", &ossa::ModelRunner::num_blocks)
      .def_prop_ro("block_size", &ossa::ModelRunner::block_size)
      .def_prop_ro("max_num_batched_tokens", &ossa::ModelRunner::max_num_batched_tokens)
      .def_prop_ro("kv_cache_dtype", [](const ossa::ModelRunner& r) { return ossa::kv_type_name(r.kv_type()); })
      .def_static(
          "kv_bytes_per_token",
          [](std::shared_ptr<ossa::Model> model, const std::string& kv_cache_dtype) {
            return ossa::ModelRunner::kv_bytes_per_token(model->config, ossa::parse_kv_type(kv_cache_dtype));
          },
          nb::arg("model"), nb::arg("kv_cache_dtype") = "float32");

  // Test hook: y = x @ W^T with W given as raw stored bytes of ggml type `ggml_type`.
  m.def(
      "kernel_matmul",
      [](nb::ndarray<const uint8_t, nb::c_contig> weight, uint32_t ggml_type, int64_t rows, int64_t cols,
         nb::ndarray<float, nb::ndim<2>, nb::c_contig> x, bool q8, const std::string& dtype, bool amx) {
        KernelMatmul k(weight, ggml_type, rows, cols, x, q8, dtype, amx);
        F32Array out = new_f32(static_cast<size_t>(k.in.n_rows), static_cast<size_t>(rows));
        {
          nb::gil_scoped_release release;
          ossa::matmul(k.w, k.in, out.data(), rows);
        }
        return out;
      },
      nb::arg("weight"), nb::arg("ggml_type"), nb::arg("rows"), nb::arg("cols"), nb::arg("x"),
      nb::arg("q8") = false, nb::arg("dtype") = "float32", nb::arg("amx") = true);

  // Benchmark hook (benchmarks/matmul.py): the same product `reps` times into one output buffer,
  // the weight repacked once as the loader does; returns the seconds of each run.
  m.def(
      "kernel_matmul_timed",
      [](nb::ndarray<const uint8_t, nb::c_contig> weight, uint32_t ggml_type, int64_t rows, int64_t cols,
         nb::ndarray<float, nb::ndim<2>, nb::c_contig> x, int reps, const std::string& dtype, bool amx) {
        if (reps < 1) throw ossa::InputError("kernel_matmul_timed: reps must be at least 1");
        KernelMatmul k(weight, ggml_type, rows, cols, x, false, dtype, amx);
        std::vector<float> out(static_cast<size_t>(k.in.n_rows * rows));
        std::vector<double> seconds;
        {
          nb::gil_scoped_release release;
          for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            ossa::matmul(k.w, k.in, out.data(), rows);
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
        }
        return seconds;
      },
      nb::arg("weight"), nb::arg("ggml_type"), nb::arg("rows"), nb::arg("cols"), nb::arg("x"), nb::arg("reps"),
      nb::arg("dtype") = "float32", nb::arg("amx") = true);

  m.def("amx_available", []() { return ossa::amx_available(); },
        "Whether the AMX kernels can run here (compiled in and granted by the OS).");
  m.def("amx_default", []() { return ossa::amx_default(); },
        "load_model's default for amx: amx_available() unless OSSA_AMX=0 is in the environment.");

  // Test hook: the 8-bit activation blocks of x [n, k]: (values [n, k] as float, d [n, k/32]).
  m.def(
      "kernel_quantize_q8",
      [](nb::ndarray<float, nb::ndim<2>, nb::c_contig> x) {
        const int64_t n = static_cast<int64_t>(x.shape(0)), k = static_cast<int64_t>(x.shape(1));
        if (k % ossa::k_qblock != 0) throw ossa::InputError("kernel_quantize_q8: k must be a multiple of 32");
        std::vector<ossa::BlockQ8> q8(static_cast<size_t>(n * k / ossa::k_qblock));
        ossa::quantize_rows_q8(x.data(), n, k, q8.data());
        F32Array qs = new_f32(n, k), d = new_f32(n, k / ossa::k_qblock);
        for (size_t b = 0; b < q8.size(); ++b) {
          d.data()[b] = q8[b].d;
          for (int i = 0; i < ossa::k_qblock; ++i) qs.data()[b * ossa::k_qblock + i] = q8[b].qs[i];
        }
        return nb::make_tuple(qs, d);
      },
      nb::arg("x"));
}
