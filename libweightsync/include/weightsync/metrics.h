// weightsync/metrics.h: a Prometheus /metrics endpoint over the stats of a
// process's publishers, subscribers, relays and staged updates.
//
// Contract
// - MetricsEndpoint::start() serves GET /metrics (Prometheus text format
//   0.0.4, prometheus-cpp's serializer) on `options.address`, over
//   libmicrohttpd (not prometheus-cpp's civetweb server: its 100 KiB thread
//   stacks cannot start in a process with libtorch's static TLS). It is
//   off unless a program starts one; an address without a host binds
//   127.0.0.1 (loopback), so exposing it beyond the host is an explicit
//   choice ("0.0.0.0:9464"). An empty address serves nothing: scrape() only.
// - Nothing is counted for the endpoint on the publish path: every value is
//   read from the sources' stats() when a scrape arrives. A Subscriber is
//   read through stats_snapshot() (as of its last successful pull); its pull
//   latency buckets (SubscriberStats) and that snapshot are the only work on
//   the pull path, done by the Subscriber whether or not an endpoint exists:
//   a scan of 15 bounds and a copy under an uncontended mutex per pull.
// - Unauthenticated by design (the Prometheus convention), so it exposes no
//   secret, key, host address, memory address or error text: counters,
//   gauges, the pull latency histogram, and label values the program chose
//   (`source`) or the library names (`transport`). `options.threads`
//   event-driven threads serve every connection (an idle one holds none);
//   at most `options.threads + options.queue` connections are open at once
//   (more are accepted and closed); a silent connection is closed after
//   `options.request_timeout`, rounded up to whole seconds. The server's
//   threads are not the publisher's: a held endpoint delays scrapes, never
//   pulls.
// - The destructor stops the server and joins its threads (promptly).
// - Sources: add_*() registers an object by reference under a `source` label
//   value (e.g. "trainer", "relay"). The object must outlive the endpoint, or
//   be removed with remove() first; remove() returns once no scrape reads it.
//   Two sources of one kind should have different labels.
// - Threads: every method may be called from any thread. A scrape holds the
//   endpoint's mutex while it reads the sources' stats() (each takes its own
//   short lock, as stats() always does).
// - Errors: start() returns kInvalidArgument for an address it cannot parse
//   (a host must be a numeric IP or "localhost") or out-of-range options;
//   kInvalidConfig when the address cannot be bound (in use: pick another)
//   or the library was built without prometheus-cpp
//   (WEIGHTSYNC_WITH_METRICS=OFF, or prometheus-cpp-dev was absent:
//   metrics_available() says so). Nothing here throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "weightsync/status.h"

namespace weightsync {

class Publisher;
class Subscriber;
class SubscriberGroup;
class Relay;
class StagedUpdates;

struct MetricsOptions {
  // "HOST:PORT", ":PORT" or "PORT" (host 127.0.0.1); port 0 picks a free one.
  // Empty: no HTTP server, scrape() only.
  std::string address;
  std::size_t threads = 2;                          // scrapes served at once
  std::size_t queue = 8;                            // accepted connections waiting for a thread
  std::chrono::milliseconds request_timeout{5000};  // a silent or slow scraper is dropped after this
};

// Whether this build of the library has the endpoint (prometheus-cpp).
bool metrics_available() noexcept;

using MetricsSourceId = std::uint64_t;

class MetricsEndpoint {
 public:
  static Result<std::unique_ptr<MetricsEndpoint>> start(MetricsOptions options);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // "HOST:PORT" actually bound (the port resolved when 0 was asked); "" when
  // serving nothing.
  std::string address() const;

  // Each add_*() returns the id remove() takes, or 0 when out of memory.
  MetricsSourceId add_publisher(const Publisher& publisher, const std::string& source = "publisher");
  MetricsSourceId add_subscriber(const Subscriber& subscriber, const std::string& source = "subscriber");
  // Each member as weightsync_subscriber_* with a `rank` label.
  MetricsSourceId add_subscriber_group(SubscriberGroup& group, const std::string& source = "group");
  // The relay's forwarding, and its downstream publisher as weightsync_publisher_*.
  MetricsSourceId add_relay(const Relay& relay, const std::string& source = "relay");
  // Generation-blocked time (installs), the background pulls and their
  // subscriber as weightsync_subscriber_*.
  MetricsSourceId add_staged_updates(const StagedUpdates& staged, const std::string& source = "staged");
  void remove(MetricsSourceId id);

  // Time a generator spent blocked on weights outside StagedUpdates (a
  // foreground pull between steps): weightsync_generation_blocked_seconds_total.
  void count_generation_blocked(double seconds, const std::string& source = "generator");

  // The exposition text a scrape of /metrics returns now.
  std::string scrape() const;

  class Impl;

 private:
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
