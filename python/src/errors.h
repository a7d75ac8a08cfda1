// Status -> Python exception: every non-OK weightsync::Status becomes an
// instance of the class in weightsync.errors for its ErrorCode (grouped by
// what to do: retry, reconnect, fix configuration, fix the call), carrying
// .code, .action and the library's message.
// Thread: call with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include "weightsync/status.h"

namespace wspy {

// Imports weightsync.errors once (at module init).
void load_error_classes();
// Throws pybind11::error_already_set with the mapped exception.
[[noreturn]] void raise_status(const weightsync::Status& status);
// The mapped exception, not raised (None for an OK status).
pybind11::object status_exception(const weightsync::Status& status);

template <typename T>
T unwrap(weightsync::Result<T>&& result) {
  if (!result.ok()) raise_status(result.status());
  return std::move(result).value();
}

inline void check(const weightsync::Status& status) {
  if (!status.ok()) raise_status(status);
}

}  // namespace wspy
