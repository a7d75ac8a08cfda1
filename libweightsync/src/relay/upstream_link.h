// UpstreamLink: a relay's connection to one of its upstreams, and failover
// between them (docs/relays.md, "Failover").
//
// Holds at most one Subscriber. connect_next() tries the addresses round
// robin, one per call, starting after the one that failed last; a source
// whose layout differs from the relay's is refused. drop() forgets a
// connection that reported a sticky error. The caller backs off between
// rounds (backoff()), bounded by 2 s, and interruptible through `stop`.
//
// Threads: used by the relay's forwarding thread only, except address()/
// snapshot values, which the relay copies into its stats under its own mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/options.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"

namespace weightsync::detail {

class UpstreamLink {
 public:
  UpstreamLink(std::vector<std::string> addresses, SubscriberOptions options);

  // create(): the first address that connects, in order; the error lists
  // every address's reason if none does.
  Status connect_first();
  // One connection attempt to the next address (round robin). `layout`: the
  // layout every upstream must have. On success the link is connected.
  Status connect_next(const WeightLayout& layout);
  // Forgets the current connection (after a sticky error).
  void drop();

  bool connected() const noexcept { return subscriber_ != nullptr; }
  Subscriber* subscriber() noexcept { return subscriber_.get(); }
  // The address in use ("" when disconnected).
  std::string address() const { return connected() ? addresses_[index_] : std::string(); }
  // True after a failed attempt on the last address of a round: back off.
  bool round_failed() const noexcept { return failed_in_round_ >= addresses_.size(); }
  // The next backoff: 50 ms, doubling up to 2 s; reset by a successful connect.
  std::chrono::milliseconds next_backoff();

 private:
  std::vector<std::string> addresses_;
  SubscriberOptions options_;
  std::unique_ptr<Subscriber> subscriber_;
  std::size_t index_ = 0;  // the connected (or last tried) address
  std::size_t failed_in_round_ = 0;
  std::chrono::milliseconds backoff_{0};
};

}  // namespace weightsync::detail
