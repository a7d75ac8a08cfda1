// weightsync/adapter_publisher.h: LoRA adapters as their own versions, many
// behind one address.
//
// Contract
// - An AdapterPublisher listens on one address (PublisherOptions::bind_address
//   and port, as a Publisher) and serves any number of named adapters, up to
//   AdapterPublisherOptions::max_adapters, beside an optional base model. Each
//   adapter has its own layout, its own ring of slots (PublisherOptions::slots
//   of layout.total_bytes() each, at most max_adapter_bytes) and its own
//   version stream: add_adapter() hands back a Publisher for it, with every
//   guarantee of a Publisher (publish, begin_publish, never torn, leases,
//   the full-ring policy, checksums). A version of one adapter never waits for
//   another adapter or its readers. Its stats() count its own ring (versions,
//   leases); the connection counters in them are the one server's, all
//   adapters together.
// - A subscriber names the adapter it serves (SubscriberOptions::adapter) and
//   is bound to that adapter's ring for the whole session: it can lease, read
//   and learn the layout of no other. Naming none gets the base model (an
//   AdapterPublisher without one refuses such a subscriber with
//   kInvalidConfig). An unknown name is refused with kInvalidConfig, and the
//   error lists the adapters served: only authenticated peers get that far
//   (docs/protocol.md, "Named streams").
// - Bounds: adapters are created only by this object's owner, never by a
//   peer; a name is 1..64 bytes of [A-Za-z0-9._-]; add_adapter() refuses a
//   name in use or invalid, a layout over max_adapter_bytes
//   (kInvalidArgument) and an adapter past max_adapters (kBusy).
// - remove_adapter() stops offering it at once: new subscribers naming it are
//   refused, its sessions' next requests fail with kConnectionLost (its ring
//   is retired), and its memory is freed when the last of them closes. The
//   Publisher it handed out must not be used after remove_adapter() returns.
// - Threads: add_adapter, adapter, remove_adapter and adapter_names from any
//   thread (one mutex); each adapter's Publisher from one thread at a time, as
//   any Publisher, and different adapters from different threads. The
//   destructor stops serving (as Publisher's) before freeing any adapter;
//   every Publisher it handed out is then invalid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/options.h"
#include "weightsync/publisher.h"
#include "weightsync/status.h"

namespace weightsync {

struct AdapterPublisherOptions {
  // The address, secret, timeouts and connection budgets of the one server,
  // and each adapter's ring (slots, full_ring_policy, checksum, ...).
  PublisherOptions publisher;
  // Adapters served at once, 1..1024.
  std::size_t max_adapters = 64;
  // Largest adapter (layout.total_bytes()), > 0.
  std::uint64_t max_adapter_bytes = std::uint64_t{1} << 30;
};

class AdapterPublisher {
 public:
  // `base`: the base model, served to subscribers that name no adapter;
  // nullopt: adapters only.
  static Result<std::unique_ptr<AdapterPublisher>> create(AdapterPublisherOptions options = {},
                                                          std::optional<WeightLayout> base = std::nullopt);
  ~AdapterPublisher();
  AdapterPublisher(const AdapterPublisher&) = delete;
  AdapterPublisher& operator=(const AdapterPublisher&) = delete;

  // "host:port" for Subscriber::connect(), with SubscriberOptions::adapter.
  std::string address() const;
  std::uint16_t port() const noexcept;
  // The base model's publisher; null without one.
  Publisher* base() noexcept;

  // Serves a new adapter: its own ring, empty until its first publish.
  Result<Publisher*> add_adapter(const std::string& name, WeightLayout layout);
  // Null when no adapter has that name.
  Publisher* adapter(const std::string& name) const;
  Status remove_adapter(const std::string& name);
  std::vector<std::string> adapter_names() const;  // sorted

  struct State;

 private:
  explicit AdapterPublisher(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weightsync
