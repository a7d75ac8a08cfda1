// The library's log messages, on their way to Python's `logging`.
//
// The library logs from its own threads, which must never wait for the GIL
// (a thread holding it may be joining them). So the sink only queues: at most
// kMaxQueued messages, counting what it drops; Python's side (weightsync/
// _logbridge.py) drains the queue from a daemon thread that waits here with
// the GIL released, and flush() drains it at once.
// Thread: every function may be called from any thread; next_batch() and
// pending() with the GIL held (they release it while waiting).
#pragma once

#include <pybind11/pybind11.h>

namespace wspy {

void bind_log_bridge(pybind11::module_& m);

}  // namespace wspy
