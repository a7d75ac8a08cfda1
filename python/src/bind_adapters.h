// weightsync._AdapterPublisher: LoRA adapters as their own versions, many
// behind one address (weightsync/adapter_publisher.h), for Python.
//
// Contract
// - One mutex serialises every call into the C++ AdapterPublisher and
//   close(); the GIL is released while a call waits or joins threads.
// - add_adapter(), adapter() and base() hand out _Publisher objects over the
//   adapter's (or base model's) Publisher, which the AdapterPublisher owns.
//   One handle per name: asking again returns the same object while it lives.
// - remove_adapter() and close() detach every handle they invalidate first
//   (its open slot writers abandoned, every later call raising "this
//   Publisher is closed"), so no Python call reaches a freed Publisher.
//   Closing an adapter's _Publisher detaches that handle only; the adapter
//   is served until remove_adapter().
// - Lock order: this mutex, then a handle's (never the other way round), and
//   never the GIL under either.
#pragma once

#include <pybind11/pybind11.h>

namespace wspy {

void bind_adapters(pybind11::module_& m);  // after bind_publisher: returns _Publisher objects

}  // namespace wspy
