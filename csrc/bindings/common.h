#pragma once
// Shared helpers for the binding files: exception translation.
#include <nanobind/nanobind.h>

#include "util/error.h"

namespace ossa {

// ossa::ModelError  -> ossa.ModelError (a ValueError)
// ossa::InputError  -> ValueError
// std::invalid_argument -> ValueError, std::runtime_error -> RuntimeError (nanobind's defaults)
inline void bind_exceptions(nanobind::module_& m) {
  static nanobind::exception<ModelError> model_error(m, "ModelError", PyExc_ValueError);
  nanobind::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace ossa
