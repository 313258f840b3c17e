// ossa_layers: the layering experiments' own small module (benchmarks/layers.py builds it on first
// use; never part of the ossa package). Arrays are checked here (shape, dtype, contiguity) so the
// kernels can take plain pointers.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstring>
#include <string>

#include "layers.h"
#include "util/error.h"

namespace nb = nanobind;

namespace {

using F64Vec = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using F64VecOut = nb::ndarray<double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Mat = nb::ndarray<const T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
template <typename T>
using OutMat = nb::ndarray<nb::numpy, T, nb::ndim<2>>;

template <typename T>
OutMat<T> new_mat(size_t rows, size_t cols) {
  T* data = new T[rows * cols > 0 ? rows * cols : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return OutMat<T>(data, {rows, cols}, owner);
}

void check_affine(const F64Vec& x, const F64VecOut& y) {
  if (x.shape(0) != y.shape(0))
    throw ossa::InputError("affine: x has " + std::to_string(x.shape(0)) + " values but y has " +
                           std::to_string(y.shape(0)));
}

template <typename T>
void check_qkv(const Mat<T>& q, const Mat<T>& k, const Mat<T>& v) {
  if (q.shape(0) == 0 || q.shape(1) == 0) throw ossa::InputError("attention: q is empty");
  for (const Mat<T>* m : {&k, &v})
    if (m->shape(0) != q.shape(0) || m->shape(1) != q.shape(1))
      throw ossa::InputError("attention: q, k and v must all be [seq, d] of the same shape");
}

}  // namespace

NB_MODULE(ossa_layers, b) {
  b.doc() = "Kernels of benchmarks/layers.py (not part of the engine)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ossa::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  b.def(
      "affine_serial",
      [](F64Vec x, F64VecOut y) {
        check_affine(x, y);
        nb::gil_scoped_release release;
        ossa::bench_affine_serial(x.data(), y.data(), static_cast<int64_t>(x.shape(0)));
      },
      nb::arg("x"), nb::arg("y").noconvert(),
      "y = 2x + 1 in one C++ thread (y is written in place).");
  b.def(
      "affine_parallel",
      [](F64Vec x, F64VecOut y, int threads) {
        check_affine(x, y);
        nb::gil_scoped_release release;
        ossa::bench_affine_parallel(x.data(), y.data(), static_cast<int64_t>(x.shape(0)), threads);
      },
      nb::arg("x"), nb::arg("y").noconvert(), nb::arg("threads") = 0,
      "y = 2x + 1 over OpenMP threads (0: all cores).");
  b.def("empty", &ossa::bench_empty, "Does nothing: the cost of one call is the crossing.");
  b.def(
      "naive_attention",
      [](Mat<double> q, Mat<double> k, Mat<double> v) {
        check_qkv(q, k, v);
        const size_t seq = q.shape(0), d = q.shape(1);
        OutMat<double> out = new_mat<double>(seq, d);
        {
          nb::gil_scoped_release release;
          ossa::bench_naive_attention(q.data(), k.data(), v.data(), static_cast<int64_t>(seq),
                                      static_cast<int64_t>(d), out.data());
        }
        return out;
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"),
      "softmax(q k^T / sqrt(d)) v, float64, as a plain triple loop.");
  b.def(
      "paged_attention",
      [](Mat<float> q, Mat<float> k, Mat<float> v, int threads) {
        check_qkv(q, k, v);
        const size_t seq = q.shape(0), d = q.shape(1);
        OutMat<float> out = new_mat<float>(seq, d);
        {
          nb::gil_scoped_release release;
          ossa::bench_paged_attention(q.data(), k.data(), v.data(), static_cast<int64_t>(seq),
                                      static_cast<int64_t>(d), threads, out.data());
        }
        return out;
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("threads") = 0,
      "softmax(q k^T / sqrt(d)) v, float32, through ossa's production paged-attention kernel.");
}
