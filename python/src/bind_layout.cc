#include "bind_layout.h"

#include <pybind11/stl.h>

#include <tuple>
#include <vector>

#include "errors.h"

namespace py = pybind11;
using weightsync::DType;

namespace wspy {
namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {
    {DType::kFloat32, "float32"},   {DType::kFloat16, "float16"},        {DType::kBFloat16, "bfloat16"},
    {DType::kFloat64, "float64"},   {DType::kInt8, "int8"},              {DType::kUInt8, "uint8"},
    {DType::kInt16, "int16"},       {DType::kInt32, "int32"},            {DType::kInt64, "int64"},
    {DType::kBool, "bool"},         {DType::kFloat8E4M3, "float8_e4m3fn"}, {DType::kFloat8E5M2, "float8_e5m2"},
};

using SpecTuple = std::tuple<std::string, std::string, std::vector<std::int64_t>>;

weightsync::WeightLayout build(const std::vector<SpecTuple>& specs, std::size_t alignment) {
  std::vector<weightsync::TensorSpec> out;
  out.reserve(specs.size());
  for (const auto& [name, dtype, shape] : specs) out.push_back({name, dtype_from_name(dtype), shape});
  return unwrap(weightsync::WeightLayout::build(std::move(out), alignment));
}

}  // namespace

DType dtype_from_name(const std::string& name) {
  for (const auto& n : kNames) {
    if (name == n.name) return n.dtype;
  }
  std::string known;
  for (const auto& n : kNames) known += std::string(known.empty() ? "" : ", ") + n.name;
  throw py::value_error("dtype '" + name + "' is not one weightsync carries (" + known + ")");
}

const char* dtype_name(DType dtype) {
  for (const auto& n : kNames) {
    if (dtype == n.dtype) return n.name;
  }
  return "unknown";
}

void bind_layout(py::module_& m) {
  py::class_<weightsync::WeightLayout>(m, "_Layout",
                                       "An immutable layout of named tensors packed into one region (C++ core).")
      .def(py::init(&build), py::arg("specs"), py::arg("alignment") = weightsync::WeightLayout::kDefaultAlignment)
      .def_property_readonly("entries",
                             [](const weightsync::WeightLayout& l) {
                               py::list out;
                               for (const auto& t : l.tensors()) {
                                 out.append(py::make_tuple(t.spec.name, dtype_name(t.spec.dtype),
                                                           py::tuple(py::cast(t.spec.shape)), t.offset, t.bytes));
                               }
                               return out;
                             },
                             "(name, dtype, shape, offset, nbytes) per tensor, in layout order.")
      .def_property_readonly("total_bytes", &weightsync::WeightLayout::total_bytes)
      .def_property_readonly("payload_bytes", &weightsync::WeightLayout::payload_bytes)
      .def_property_readonly("alignment", &weightsync::WeightLayout::alignment)
      .def("__eq__", [](const weightsync::WeightLayout& a, const weightsync::WeightLayout& b) { return a == b; })
      .def("__len__", [](const weightsync::WeightLayout& l) { return l.tensors().size(); });
}

}  // namespace wspy
