// weightsync._Publisher and _SlotWriter: the trainer's side for Python.
//
// Contract
// - One mutex serialises every call into the C++ Publisher and close(); the
//   GIL is released while a call copies, waits or joins threads, so other
//   Python threads run and the library's threads never wait for the GIL.
// - A _SlotWriter keeps its publisher's core alive; close() abandons every
//   writer still open first (a SlotWriter never outlives its Publisher), and
//   a writer used after that raises.
// - Pointers handed in (data_ptr of tensors) must stay valid for the call.
#pragma once

#include <pybind11/pybind11.h>

namespace wspy {

void bind_publisher(pybind11::module_& m);

}  // namespace wspy
