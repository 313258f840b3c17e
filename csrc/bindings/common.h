#pragma once
// Shared helpers for the binding files: exception translation, float32 arrays handed to NumPy.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstring>

#include "util/error.h"

namespace ossa {

// ossa::ModelError  -> ossa.ModelError (a ValueError)
// ossa::InputError  -> ValueError
// std::invalid_argument -> ValueError, std::runtime_error -> RuntimeError (nanobind's defaults)
// Messages may quote bytes from a file or a request that are not UTF-8: those become U+FFFD, so
// the error itself never fails to convert.
inline void set_error_text(PyObject* type, const char* what) {
  PyObject* msg = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "replace");
  if (msg == nullptr) {
    PyErr_Clear();
    PyErr_SetString(type, "(unprintable error message)");
    return;
  }
  PyErr_SetObject(type, msg);
  Py_DECREF(msg);
}

inline void bind_exceptions(nanobind::module_& m) {
  static nanobind::exception<ModelError> model_error(m, "ModelError", PyExc_ValueError);
  // Registered after model_error's own translator, so tried first.
  nanobind::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ModelError& e) {
      set_error_text(model_error.ptr(), e.what());
    } catch (const InputError& e) {
      set_error_text(PyExc_ValueError, e.what());
    }
  });
}

// A new float32 [rows, cols] NumPy array (owning its memory) to fill and return.
using F32Array = nanobind::ndarray<nanobind::numpy, float, nanobind::ndim<2>>;
inline F32Array new_f32(size_t rows, size_t cols) {
  float* data = new float[rows * cols > 0 ? rows * cols : 1];
  nanobind::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return F32Array(data, {rows, cols}, owner);
}

}  // namespace ossa
