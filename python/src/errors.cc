#include "errors.h"

#include <array>

namespace py = pybind11;

namespace wspy {
namespace {

// Indexed by ErrorCode; filled from weightsync.errors.ERROR_CLASSES.
std::array<PyObject*, 16> g_classes{};
PyObject* g_fallback = nullptr;

}  // namespace

void load_error_classes() {
  py::module_ errors = py::module_::import("weightsync.errors");
  py::dict by_code = errors.attr("ERROR_CLASSES");
  for (auto item : by_code) {
    const auto code = item.first.cast<std::string>();
    for (std::size_t c = 1; c < g_classes.size(); ++c) {
      if (code == weightsync::to_string(static_cast<weightsync::ErrorCode>(c))) {
        g_classes[c] = item.second.ptr();
        Py_INCREF(g_classes[c]);  // kept for the life of the process
      }
    }
  }
  g_fallback = errors.attr("WeightsyncError").ptr();
  Py_INCREF(g_fallback);
}

namespace {

PyObject* class_of(const weightsync::Status& status) {
  const auto code = static_cast<std::size_t>(status.code());
  return code < g_classes.size() && g_classes[code] != nullptr ? g_classes[code] : g_fallback;
}

}  // namespace

py::object status_exception(const weightsync::Status& status) {
  if (status.ok()) return py::none();
  return py::reinterpret_borrow<py::object>(class_of(status))(
      status.message(), weightsync::to_string(status.code()), weightsync::to_string(status.action()));
}

void raise_status(const weightsync::Status& status) {
  py::object instance = status_exception(status);
  PyErr_SetObject(class_of(status), instance.ptr());
  throw py::error_already_set();
}

}  // namespace wspy
