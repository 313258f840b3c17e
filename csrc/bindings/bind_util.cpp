// Process-wide settings: threads and build facts.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <omp.h>

#include "util/error.h"

namespace nb = nanobind;

void bind_util(nb::module_& m) {
  m.def(
      "set_num_threads",
      [](int n) {
        if (n < 1) throw ossa::InputError("num_threads must be >= 1, got " + std::to_string(n));
        omp_set_num_threads(n);
      },
      nb::arg("n"), "Set the number of OpenMP threads the kernels use.");
  m.def("get_num_threads", []() { return omp_get_max_threads(); });
  m.def(
      "build_info",
      []() {
        std::string s;
#if defined(__AVX512F__)
        s += "avx512f ";
#endif
#if defined(__AVX512BF16__)
        s += "avx512bf16 ";
#endif
#if defined(__AVX512VNNI__)
        s += "avx512vnni ";
#endif
#if defined(__AVX2__)
        s += "avx2 ";
#endif
#if defined(__FMA__)
        s += "fma ";
#endif
#if defined(__F16C__)
        s += "f16c ";
#endif
        if (!s.empty()) s.pop_back();
        return s;
      },
      "CPU features the core was compiled for.");
}
