// weightsync._Subscriber and _Plan: the generator's side for Python.
//
// Contract
// - One mutex serialises calls into the C++ Subscriber (which is
//   single-threaded) and close(); the GIL is released while a call waits or
//   transfers. cancel() takes no lock: it sets the core's CancelToken, which
//   the pull in progress (or the next one, if none is) sees within
//   weightsync::kCancelPollInterval and turns into weightsync.Cancelled;
//   the token is cleared when a pull or wait consumes it.
// - On the main thread a waiting call also asks Python, every poll
//   interval, whether a signal arrived (PyErr_CheckSignals, with the GIL
//   taken for that moment): Ctrl-C raises KeyboardInterrupt out of pull()
//   within about 10 ms, and the Subscriber stays usable.
// - close() cancels what is in flight, waits for it, and drops the
//   connection. A _Plan keeps its core alive; using a plan after close()
//   raises.
#pragma once

#include <pybind11/pybind11.h>

namespace wspy {

void bind_subscriber(pybind11::module_& m);

}  // namespace wspy
