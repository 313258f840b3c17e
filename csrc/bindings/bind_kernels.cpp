// Bindings of the kernels: hooks for tests and benchmarks (matmul, 8-bit quantization), AMX
// queries.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "bindings/common.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/prepare_weights.h"
#include "kernels/quant.h"
#include "util/aligned.h"
#include "util/error.h"

namespace nb = nanobind;

namespace {

using ossa::F32Array;
using ossa::new_f32;

// A weight given as raw stored bytes of ggml type `ggml_type`, checked and (as the loader does,
// when AMX is on) repacked, and the activations x [n, cols] (8-bit blocks too when `q8`).
struct KernelMatmul {
  ossa::TensorView w;
  ossa::MatmulInput in;
  ossa::PreparedWeights prepared;
  std::vector<ossa::BlockQ8> q8s;

  KernelMatmul(const nb::ndarray<const uint8_t, nb::c_contig>& weight, uint32_t ggml_type,
               int64_t rows, int64_t cols, const nb::ndarray<float, nb::ndim<2>, nb::c_contig>& x,
               bool q8, const std::string& dtype, bool amx) {
    if (dtype != "float32" && dtype != "bfloat16")
      throw ossa::InputError("kernel_matmul: dtype must be 'float32' or 'bfloat16'");
    // (1001: DType::FP8, a folder's FP8 matrix in the loader's repacked rows)
    if (!ossa::dtype_supported(ggml_type) && ggml_type != static_cast<uint32_t>(ossa::DType::FP8))
      throw ossa::InputError("unsupported type " + ossa::ggml_type_name(ggml_type));
    const ossa::DType t = static_cast<ossa::DType>(ggml_type);
    const ossa::DTypeTraits tr = ossa::dtype_traits(t);
    if (rows < 1 || cols < 1 || cols % tr.block_elems != 0 ||
        static_cast<int64_t>(x.shape(1)) != cols)
      throw ossa::InputError("kernel_matmul: bad shape");
    w.type = t;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = static_cast<size_t>(cols / tr.block_elems) * tr.block_bytes;
    if (weight.size() != w.nbytes())
      throw ossa::InputError("kernel_matmul: weight has the wrong size");
    w.data = weight.data();
    const int64_t n = static_cast<int64_t>(x.shape(0));
    in = ossa::MatmulInput{x.data(), nullptr, n, cols};
    // As load_model prepares each matrix (dtype "bfloat16" copies, AMX repacks).
    ossa::prepare_weights({&w}, dtype == "bfloat16", amx && ossa::repack_default(), prepared, q8);
    if (dtype == "bfloat16") return;
    if (q8 && ossa::takes_q8(w)) {  // (as a model loaded with quantized_activations rounds it)
      in.quantized = true;
      q8s.resize(static_cast<size_t>(n * cols / ossa::k_qblock));
      ossa::quantize_rows_q8(x.data(), n, cols, q8s.data());
      in.q8 = q8s.data();
    }
  }
};

}  // namespace

void bind_kernels(nb::module_& m) {
  // Test hook: y = x @ W^T with W given as raw stored bytes of ggml type `ggml_type`.
  m.def(
      "kernel_matmul",
      [](nb::ndarray<const uint8_t, nb::c_contig> weight, uint32_t ggml_type, int64_t rows,
         int64_t cols, nb::ndarray<float, nb::ndim<2>, nb::c_contig> x, bool q8,
         const std::string& dtype, bool amx) {
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

  // compressed-tensors' activation quantization (kernels/matmul.cpp: act_quantize_rows): mode
  // "int8" or "fp8", scale 0 (per token) or the static one; returns q * s.
  m.def(
      "kernel_act_quantize",
      [](nb::ndarray<float, nb::ndim<2>, nb::c_contig> x, const std::string& mode, float scale) {
        if (mode != "int8" && mode != "fp8")
          throw ossa::InputError("kernel_act_quantize: mode must be 'int8' or 'fp8'");
        if (!(scale >= 0.0f) || !std::isfinite(scale))
          throw ossa::InputError("kernel_act_quantize: scale must be finite and >= 0");
        const size_t n = x.shape(0), cols = x.shape(1);
        F32Array out = new_f32(n, cols);
        ossa::act_quantize_rows(x.data(), static_cast<int64_t>(n), static_cast<int64_t>(cols),
                                mode == "int8" ? ossa::k_act_quant_int8 : ossa::k_act_quant_fp8,
                                scale, out.data());
        return out;
      },
      nb::arg("x"), nb::arg("mode"), nb::arg("scale") = 0.0f);

  // BitNet's BitLinear (kernels/matmul_bitnet.cpp) on ternary values (int8 [rows, cols], -1 / 0 /
  // 1) with their scale, for the kernel tests against the twin and transformers.
  m.def(
      "kernel_bitnet_matmul",
      [](nb::ndarray<const int8_t, nb::ndim<2>, nb::c_contig> ternary, float scale,
         nb::ndarray<float, nb::ndim<2>, nb::c_contig> x, int reps) {
        if (reps < 1) throw ossa::InputError("kernel_bitnet_matmul: reps must be at least 1");
        const int64_t rows = static_cast<int64_t>(ternary.shape(0)),
                      cols = static_cast<int64_t>(ternary.shape(1));
        if (rows < 4 || rows % 4 != 0 || cols < 64 || cols % 64 != 0 ||
            static_cast<int64_t>(x.shape(1)) != cols)
          throw ossa::InputError("kernel_bitnet_matmul: bad shape");
        if (!(scale > 0.0f)) throw ossa::InputError("kernel_bitnet_matmul: scale must be > 0");
        for (size_t i = 0; i < ternary.size(); ++i)
          if (ternary.data()[i] < -1 || ternary.data()[i] > 1)
            throw ossa::InputError("kernel_bitnet_matmul: values must be -1, 0 or 1");
        ossa::AlignedVector<uint8_t> packed(static_cast<size_t>(rows * cols / 4));
        for (int64_t r = 0; r < rows; ++r)
          ossa::bitnet_pack_row(ternary.data() + r * cols, r, cols, packed.data());
        ossa::TensorView w;
        w.type = ossa::DType::BITNET;
        w.rows = rows;
        w.cols = cols;
        w.row_bytes = static_cast<size_t>(cols / 4);
        w.data = packed.data();
        w.scale = scale;
        const int64_t n = static_cast<int64_t>(x.shape(0));
        F32Array out = new_f32(static_cast<size_t>(n), static_cast<size_t>(rows));
        {
          nb::gil_scoped_release release;
          for (int i = 0; i < reps; ++i)  // (reps > 1: benchmarks/bitnet.py's kernel timing)
            ossa::matmul(w, ossa::MatmulInput{x.data(), nullptr, n, cols}, out.data(), rows);
        }
        return out;
      },
      nb::arg("ternary"), nb::arg("scale"), nb::arg("x"), nb::arg("reps") = 1);

  // Benchmark hook (benchmarks/matmul.py, kernel_rows.py): the same product `reps` times into one
  // output buffer, the weight prepared once as the loader does; returns the seconds of each run,
  // wall time or (cpu_time) the calling thread's CPU time, which ignores time the OS gave to other
  // processes (only the caller's share of the work when more than one thread runs).
  m.def(
      "kernel_matmul_timed",
      [](nb::ndarray<const uint8_t, nb::c_contig> weight, uint32_t ggml_type, int64_t rows,
         int64_t cols, nb::ndarray<float, nb::ndim<2>, nb::c_contig> x, int reps,
         const std::string& dtype, bool amx, bool cpu_time, bool q8) {
        if (reps < 1) throw ossa::InputError("kernel_matmul_timed: reps must be at least 1");
        KernelMatmul k(weight, ggml_type, rows, cols, x, q8, dtype, amx);
        std::vector<float> out(static_cast<size_t>(k.in.n_rows * rows));
        std::vector<double> seconds;
        {
          nb::gil_scoped_release release;
          const auto thread_seconds = [] {
            timespec ts{};
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
            return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
          };
          for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            const double c0 = cpu_time ? thread_seconds() : 0.0;
            ossa::matmul(k.w, k.in, out.data(), rows);
            seconds.push_back(
                cpu_time
                    ? thread_seconds() - c0
                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
        }
        return seconds;
      },
      nb::arg("weight"), nb::arg("ggml_type"), nb::arg("rows"), nb::arg("cols"), nb::arg("x"),
      nb::arg("reps"), nb::arg("dtype") = "float32", nb::arg("amx") = true,
      nb::arg("cpu_time") = false, nb::arg("q8") = false);

  m.def(
      "kernel_takes_q8",
      [](uint32_t ggml_type, int64_t rows, int64_t cols, bool amx) {
        if (!ossa::dtype_supported(ggml_type))
          throw ossa::InputError("unsupported type " + ossa::ggml_type_name(ggml_type));
        const ossa::DTypeTraits tr = ossa::dtype_traits(static_cast<ossa::DType>(ggml_type));
        if (rows < 1 || cols < 1 || cols % tr.block_elems != 0)
          throw ossa::InputError("kernel_takes_q8: bad shape");
        std::vector<uint8_t> zeros(static_cast<size_t>(rows * (cols / tr.block_elems)) *
                                   tr.block_bytes);
        std::vector<float> x(static_cast<size_t>(cols));
        const auto w = nb::ndarray<const uint8_t, nb::c_contig>(zeros.data(), {zeros.size()});
        const auto xa =
            nb::ndarray<float, nb::ndim<2>, nb::c_contig>(x.data(), {1, static_cast<size_t>(cols)});
        KernelMatmul k(w, ggml_type, rows, cols, xa, true, "float32", amx);
        return k.in.quantized;
      },
      nb::arg("ggml_type"), nb::arg("rows"), nb::arg("cols"), nb::arg("amx") = true,
      "Whether kernel_matmul(q8=True) rounds the activations to 8-bit blocks for this weight (as "
      "a model loaded with quantized_activations does; kernels/matmul.h takes_q8).");

  m.def(
      "amx_available", []() { return ossa::amx_available(); },
      "Whether the AMX kernels can run here (compiled in and granted by the OS).");
  m.def(
      "amx_default", []() { return ossa::amx_default(); },
      "Whether AMX is used by default: amx_available() unless OSSA_AMX=0 is in the environment.");
  m.def(
      "repack_default", []() { return ossa::repack_default(); },
      "Whether load_model repacks weights by default (amx=True): for AMX, or without AMX the "
      "types of the VNNI / AVX2 int8 kernels (Q8_0, Q4_K, Q6_K, Q5_0, Q5_1, Q5_K; with VNNI also "
      "IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K); OSSA_AMX=0 turns both off.");
  m.def(
      "i8_avx2_available", []() { return ossa::i8_avx2_available(); },
      "Whether this build has the AVX2 int8 kernels (Q8_0, Q4_K, Q6_K, Q5_0, Q5_1, Q5_K; used "
      "where there is no AMX; with VNNI only Q8_0's).");
  m.def(
      "i8_vnni_available", []() { return ossa::i8_vnni_available(); },
      "Whether Q4_K / Q6_K / Q2_K / Q3_K run the AVX-512 VNNI int8 loops: with AMX for few rows, "
      "without AMX for every row count (the same results as the AMX and AVX2 kernels), and then "
      "Q5_0 / Q5_1 / IQ4_NL / Q5_K / IQ4_XS / MXFP4 too.");

  // Test hook: the 8-bit activation blocks of x [n, k]: (values [n, k] as float, d [n, k/32]).
  m.def(
      "kernel_quantize_q8",
      [](nb::ndarray<float, nb::ndim<2>, nb::c_contig> x) {
        const int64_t n = static_cast<int64_t>(x.shape(0)), k = static_cast<int64_t>(x.shape(1));
        if (k % ossa::k_qblock != 0)
          throw ossa::InputError("kernel_quantize_q8: k must be a multiple of 32");
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
