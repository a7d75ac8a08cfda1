// weightsync._StagedUpdates and InstallResult: staged updates for Python
// (weightsync/staged_updates.h). A background thread pulls the next version
// into buffers the library owns; install() makes it live between engine steps.
//
// Contract
// - Made from a _Subscriber, whose C++ Subscriber it takes over (the
//   background thread must be its only caller): that _Subscriber is closed
//   from then on, also when creation fails.
// - One mutex serialises install(), the live-buffer accessors and close()
//   (the C++ object allows one such caller at a time); staged_version,
//   live_version, wait_staged(), status(), last_failure() and stats() may run
//   on any thread (they hold the object, not the mutex, while they run). The
//   GIL is released around every library call, and the mutex is never held
//   while the GIL is taken (python/src/locked_call.h).
// - wait_staged() waits in slices of 20 ms: between them it sees close() and
//   cancel() (Cancelled) from other threads, and on the main thread runs
//   Python's signal handlers (Ctrl-C raises KeyboardInterrupt).
// - kSwap host buffers are exported as writable memoryviews (buffer(i)); each
//   keeps the C++ object alive, so memory a tensor views is never freed under
//   it. close() drops the core's reference at once: the object (its buffers,
//   and its background thread, which stops then) goes when the last view of
//   its buffers goes. Whoever drops the last reference with the GIL held
//   releases the GIL while the destructor joins the thread.
#pragma once

#include <pybind11/pybind11.h>

namespace wspy {

// Call after bind_subscriber (InstallResult.pull is a PullResult).
void bind_staged(pybind11::module_& m);

}  // namespace wspy
