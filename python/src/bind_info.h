// weightsync.version(), transports(), settings(), cuda_info(): what this
// build can do on this machine (the data behind `python -m weightsync.info`,
// as `weightsync-info` prints it for C++).
#pragma once

#include <pybind11/pybind11.h>

namespace wspy {

void bind_info(pybind11::module_& m);

}  // namespace wspy
