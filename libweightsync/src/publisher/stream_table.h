// ServedStream and StreamTable: the rings one publisher server serves behind
// its one address. The default stream (the base model, name "") is what a
// control session gets; a named stream (an adapter, weightsync/
// adapter_publisher.h) is what a session gets after SELECT_STREAM names it
// (docs/protocol.md, "Named streams").
//
// Ownership: a ServedStream's `owner` keeps alive what `state` points into
// (the adapter's publisher core); the table, the server's sessions and
// connections share it, so a stream removed while sessions still read it
// lives until the last of them closes.
// Threads: StreamTable is guarded by its own mutex; any thread.
// Errors: add() refuses an invalid or duplicate name (kInvalidArgument) and a
// full table (kBusy): the table never holds more than its bound, whatever
// peers ask for; peers can only look names up.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "publisher/served_state.h"
#include "weightsync/status.h"

namespace weightsync::detail {

struct ServedStream {
  std::string name;  // "" for the default stream
  ServedState state;
  std::shared_ptr<void> owner;  // keeps `state`'s targets alive (null for the default stream)
};

class StreamTable {
 public:
  explicit StreamTable(std::size_t max_streams) : max_streams_(max_streams) {}
  Status add(std::shared_ptr<const ServedStream> stream);
  // Null if there is no such stream.
  std::shared_ptr<const ServedStream> find(const std::string& name) const;
  // The removed stream (null if there was none).
  std::shared_ptr<const ServedStream> remove(const std::string& name);
  std::vector<std::shared_ptr<const ServedStream>> all() const;
  std::vector<std::string> names() const;  // sorted
  std::size_t size() const;
  std::size_t capacity() const noexcept { return max_streams_; }

 private:
  const std::size_t max_streams_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const ServedStream>> streams_;
};

}  // namespace weightsync::detail
