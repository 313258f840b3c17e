// The one Python extension module, ossa._core. Each component binds itself in
// bindings/bind_<component>.cpp; a component left out of OSSA_COMPONENTS is simply absent.
#include <nanobind/nanobind.h>

#include "bindings/common.h"

namespace nb = nanobind;

#define OSSA_DECLARE(name) void bind_##name(nb::module_& m);
#ifdef OSSA_WITH_UTIL
OSSA_DECLARE(util)
#endif
#ifdef OSSA_WITH_MODEL
OSSA_DECLARE(model)
#endif
#ifdef OSSA_WITH_KERNELS
OSSA_DECLARE(kernels)
#endif
#ifdef OSSA_WITH_TOKENIZER
OSSA_DECLARE(tokenizer)
#endif
#ifdef OSSA_WITH_SAMPLING
OSSA_DECLARE(sampling)
#endif
#ifdef OSSA_WITH_CACHE
OSSA_DECLARE(cache)
#endif
#ifdef OSSA_WITH_SCHEDULER
OSSA_DECLARE(scheduler)
#endif
#ifdef OSSA_WITH_ENGINE
OSSA_DECLARE(engine)
#endif
#ifdef OSSA_WITH_BENCH
OSSA_DECLARE(bench)
#endif

NB_MODULE(_core, m) {
  m.doc() = "ossa's C++ core (private; use the ossa package)";
  ossa::bind_exceptions(m);
#ifdef OSSA_WITH_UTIL
  bind_util(m);
#endif
#ifdef OSSA_WITH_MODEL
  bind_model(m);
#endif
#ifdef OSSA_WITH_KERNELS
  bind_kernels(m);
#endif
#ifdef OSSA_WITH_TOKENIZER
  bind_tokenizer(m);
#endif
#ifdef OSSA_WITH_SAMPLING
  bind_sampling(m);
#endif
#ifdef OSSA_WITH_CACHE
  bind_cache(m);
#endif
#ifdef OSSA_WITH_SCHEDULER
  bind_scheduler(m);
#endif
#ifdef OSSA_WITH_ENGINE
  bind_engine(m);
#endif
#ifdef OSSA_WITH_BENCH
  bind_bench(m);
#endif
}
