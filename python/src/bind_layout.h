// weightsync.Layout's core: a WeightLayout built from (name, dtype, shape)
// triples, and the dtype names Python uses (torch's: "float32", "bfloat16",
// "float8_e4m3fn", ...).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "weightsync/layout.h"

namespace wspy {

// Throws ValueError for a name that is not a weightsync dtype.
weightsync::DType dtype_from_name(const std::string& name);
const char* dtype_name(weightsync::DType dtype);

void bind_layout(pybind11::module_& m);

}  // namespace wspy
