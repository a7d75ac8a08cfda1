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
//   raises. take_subscriber() closes it the same way, handing the
//   Subscriber to its caller instead of dropping it.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "weightsync/subscriber.h"

namespace wspy {

void bind_subscriber(pybind11::module_& m);

// Takes the C++ Subscriber out of a _Subscriber (for a _StagedUpdates, whose
// background thread must be its only caller): cancels what is in flight on
// it, waits for it, and leaves the _Subscriber closed. Raises InvalidArgument
// if `core` is not a _Subscriber or is closed. Call with the GIL held.
std::unique_ptr<weightsync::Subscriber> take_subscriber(pybind11::handle core);

// SubscriberStats as the dict _Subscriber.stats() returns. GIL held.
pybind11::dict subscriber_stats_dict(const weightsync::SubscriberStats& stats);

}  // namespace wspy
