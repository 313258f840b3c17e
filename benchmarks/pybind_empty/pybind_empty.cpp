// The pybind11 counterpart of core.bench.empty, built only by benchmarks/layers.py to show what the
// choice of binding library costs per call.
#include <pybind11/pybind11.h>

__attribute__((noinline)) void empty() { asm volatile(""); }

PYBIND11_MODULE(pybind_empty, m) {
  m.doc() = "An empty function bound with pybind11 (benchmarks/layers.py)";
  m.def("empty", &empty, "Does nothing.");
}
