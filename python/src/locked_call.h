// locked_call(): how every binding calls into a library object: the GIL
// released, the object's mutex held, and a clear error if it was closed.
//
// Lock order (docs/thread_model.md, "Python"): the GIL is released *before*
// the mutex is taken, and code that holds the mutex never takes the GIL
// (except a subscriber's signal poll; bind_subscriber.cc). So waiting for the
// mutex cannot deadlock with a thread that waits for the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "errors.h"

namespace wspy {

// f(T&) with `object` (a std::unique_ptr<T> or std::shared_ptr<T>) non-null,
// under `mutex`, GIL released. If `object` is null (closed), raises
// InvalidArgument "this <what> is closed". f must not touch Python objects.
template <typename Pointer, typename F>
auto locked_call(std::mutex& mutex, const Pointer& object, const char* what, F&& f) {
  using R = decltype(f(*object));
  std::optional<R> out;
  {
    pybind11::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex);
    if (object) out.emplace(f(*object));
  }
  if (!out) {
    raise_status(weightsync::Status(weightsync::ErrorCode::kInvalidArgument, std::string("this ") + what + " is closed"));
  }
  return std::move(*out);
}

}  // namespace wspy
