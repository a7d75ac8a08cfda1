// weightsync._weightsync: the C++ core of the Python package. Thin: every
// class here is wrapped by the Python modules of weightsync/ (which add the
// torch conventions, docstrings and asyncio), and nothing here links
// libtorch: tensors arrive as (name, address, nbytes).
#include <pybind11/pybind11.h>

#include "bind_adapters.h"
#include "bind_info.h"
#include "bind_layout.h"
#include "bind_publisher.h"
#include "bind_staged.h"
#include "bind_subscriber.h"
#include "errors.h"
#include "log_bridge.h"

PYBIND11_MODULE(_weightsync, m) {
  m.doc() = "The C++ core of weightsync (libweightsync bindings). Use the weightsync package, not this module.";
  wspy::load_error_classes();
  wspy::bind_info(m);
  wspy::bind_log_bridge(m);
  wspy::bind_layout(m);
  wspy::bind_publisher(m);
  wspy::bind_adapters(m);  // after bind_publisher: hands out _Publisher objects
  wspy::bind_subscriber(m);
  wspy::bind_staged(m);  // after bind_subscriber: InstallResult.pull is a PullResult
}
