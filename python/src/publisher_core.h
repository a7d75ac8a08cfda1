// The C++ state behind weightsync._Publisher, shared by bind_publisher.cc
// (plain publishers) and bind_adapters.cc (an AdapterPublisher's adapters and
// base model, which it owns and hands out as _Publisher objects).
//
// Contract
// - `mutex` serialises every call into `pub`; `pub` is null once closed
//   (close(), or the adapter removed / its AdapterPublisher closed: detach()).
// - `owned` is set for a plain publisher (close() destroys it); an adapter's
//   Publisher belongs to its AdapterPublisher, so `owned` stays null and
//   detach() only stops this handle.
// - Lock order: the GIL is never taken while `mutex` is held; an
//   AdapterPublisher's mutex is taken before its adapters' (never after).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "weightsync/publisher.h"

namespace wspy {

struct WriterCore;

struct PublisherCore {
  std::mutex mutex;
  std::unique_ptr<weightsync::Publisher> owned;  // a plain publisher's; null for an adapter's
  weightsync::Publisher* pub = nullptr;          // null once closed or detached
  std::set<WriterCore*> writers;

  // With `mutex` held: abandons every open writer, then forgets `pub`
  // (destroying it when owned: stops serving, joins its threads).
  void close_locked();
};

weightsync::PublisherOptions publisher_options_from(
    std::optional<std::string> bind, std::uint16_t port, std::optional<std::string> secret, std::size_t slots,
    std::optional<bool> checksum, bool skip_when_full, std::optional<int> io_timeout_ms,
    std::optional<int> lease_timeout_ms, std::optional<int> idle_timeout_ms, std::size_t max_connections,
    std::optional<std::string> slot_allocator, bool lock_memory, const std::string& slot_memory,
    std::optional<bool> deltas, std::optional<bool> integrity, std::optional<bool> encryption,
    std::optional<std::string> signing_key);

}  // namespace wspy
