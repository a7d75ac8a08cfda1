// HandshakeBudget: how many connections may be authenticating at once, in all
// and from one source address, and which one gives way when a new one comes
// past a cap (publisher/server.h; PublisherOptions::max_handshakes).
//
// Policy: a new connection is always admitted. If that puts its address over
// `max_per_address`, the connection from the same address that has waited
// longest for its peer is evicted; otherwise, if the total goes over
// `max_total`, the longest-waiting one of all is evicted. "Waiting" counts
// from the connection's last step (accepted, or sent CHALLENGE), so a
// subscriber that answers promptly is the last to go, and a flood of silent
// connections only evicts itself. An empty address (loopback, the local Unix
// socket) has no per-address cap: every local peer shares it.
//
// Threads: not thread-safe; the event loop owns it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace weightsync::detail {

class HandshakeBudget {
 public:
  using Clock = std::chrono::steady_clock;

  HandshakeBudget(std::size_t max_total, std::size_t max_per_address)
      : max_total_(max_total == 0 ? 1 : max_total),
        max_per_address_(max_per_address == 0 ? 1 : max_per_address) {}

  // Admits `id`; returns the id of the connection to evict, if one must go.
  std::optional<std::uint64_t> admit(std::uint64_t id, const std::string& address, Clock::time_point now);
  // `id` made a step (its peer answered): it moves to the back of the queue.
  void touch(std::uint64_t id, Clock::time_point now);
  // `id` authenticated or closed.
  void remove(std::uint64_t id);
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  using Key = std::pair<Clock::time_point, std::uint64_t>;
  struct Entry {
    std::string address;
    Clock::time_point since;
  };

  const std::size_t max_total_;
  const std::size_t max_per_address_;
  std::unordered_map<std::uint64_t, Entry> entries_;
  std::set<Key> by_age_;
  std::map<std::string, std::set<Key>> by_address_;
};

}  // namespace weightsync::detail
