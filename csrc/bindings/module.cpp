// The one Python extension module, ossa._core. Each component binds itself in
// bindings/bind_<component>.cpp.
#include <nanobind/nanobind.h>

#include "bindings/common.h"

namespace nb = nanobind;

void bind_util(nb::module_& m);
void bind_model(nb::module_& m);
void bind_kernels(nb::module_& m);
void bind_tokenizer(nb::module_& m);
void bind_sampling(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_scheduler(nb::module_& m);
void bind_engine(nb::module_& m);

NB_MODULE(_core, m) {
  m.doc() = "ossa's C++ core (private; use the ossa package)";
  ossa::bind_exceptions(m);
  bind_util(m);
  bind_model(m);
  bind_kernels(m);
  bind_tokenizer(m);
  bind_sampling(m);
  bind_cache(m);
  bind_scheduler(m);
  bind_engine(m);
}
