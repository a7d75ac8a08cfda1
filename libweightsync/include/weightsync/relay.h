// weightsync/relay.h: a subscriber that serves what it holds to others.
//
// A Relay pulls each new version from an upstream (the trainer's Publisher or
// another Relay) straight into a slot of its own ring and commits it there
// under the same version number and the upstream's end-to-end checksum, so a
// tree or a chain of relays takes the fan-out off the trainer's link while
// every leaf still verifies the trainer's bytes (docs/relays.md).
//
// Contract
// - create() connects to the first reachable address of `upstreams` (in
//   order), learns the layout, creates the relay's own Publisher with that
//   layout (checksums: PublisherOptions::checksum if set, else whatever the
//   upstream serves) and starts the forwarding thread. It fails with the
//   reasons of every upstream if none can be connected, or with the
//   Publisher's error.
// - Forwarding: the thread waits for a version newer than the one it holds,
//   reserves a slot, pulls into it (one copy: the transport's), and commits it
//   only once the whole version arrived, its seqlock check passed and, when
//   the upstream serves checksums, the trainer's xxHash3 verified. Versions
//   are forwarded in strictly increasing order; intermediate versions may be
//   skipped (a relay takes the newest). An upstream without checksums gives a
//   relay that serves none (unless PublisherOptions::checksum is set, when the
//   relay hashes the bytes it received itself).
// - Pipelined (RelayOptions::pipelined, the default): the slot being pulled
//   is exposed to streaming subscribers (SubscriberOptions::accept_streaming,
//   tcp) with a watermark advanced every chunk_bytes, and the upstream pull
//   itself streams from a pipelined upstream. A pull that fails abandons the
//   in-progress version (its streaming readers get kVersionRevoked) and is
//   never retried into the same slot. Plain subscribers see only committed
//   versions, as before (docs/relays.md, "The pipelined chain").
// - Failover: after a sticky upstream error (dead, stalled past the I/O
//   timeout, refused) the relay connects to the next address of `upstreams`,
//   round robin, with a backoff from 50 ms doubling to 2 s while none answers,
//   and continues from the version it holds. Meanwhile it keeps serving that
//   version. An upstream whose layout differs is refused and skipped.
//   stats().failovers counts switches, upstream_connected/upstream_error show
//   the state; a warning is logged at most every 5 s while disconnected.
// - Downstream, a Relay is a Publisher: the same leases, full-ring policy and
//   lease bound (PublisherOptions), so slow leaves never stall forwarding.
// - Threads: one forwarding thread of its own plus its Publisher's threads.
//   Every method may be called from any thread. The destructor stops the
//   thread (a pull in progress is cut short at its next chunk), closes the
//   upstream connection and the Publisher, within about the I/O timeout.
// - An upstream that sends what the relay cannot use (a VERSION beyond
//   2^63-1, a version it then does not deliver, an unverified version) is
//   treated as a failed upstream: dropped, and the next address tried.
// - Errors that stop forwarding for good (running == false, `error` says
//   why) are internal ones only. The relay then tells its leaves: every
//   QUERY_VERSION or ACQUIRE, waiting ones included, is answered
//   ERROR(kConnectionLost) with that reason, so a leaf goes to another source
//   instead of taking the held version as current.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weightsync/options.h"
#include "weightsync/publisher.h"
#include "weightsync/status.h"

namespace weightsync {

struct RelayOptions {
  std::vector<std::string> upstreams;  // "host:port" sources in order of preference (trainer or other relays)
  SubscriberOptions subscriber;        // for the upstream connection (verify_checksum is forced on)
  PublisherOptions publisher;          // the relay's own ring: bind address, port, secret, slots, ...
  // Pipelined chain (docs/relays.md): serve a version's first bytes to
  // streaming subscribers (SubscriberOptions::accept_streaming, tcp) while
  // later ones arrive, and pull from the upstream the same way. The upstream
  // pull is then never retried into a slot being streamed: a failed pull
  // abandons the in-progress version (its readers get kVersionRevoked).
  bool pipelined = true;
  std::size_t chunk_bytes = 4u << 20;  // watermark step of the pipelined mode (>= 64 KiB)
  // Map every page of the relay's slots at create() (slots x total_bytes, the
  // ring's size anyway once `slots` versions went through), so that
  // forwarding never takes a page fault per 4 KiB: without it the first
  // `slots` versions cost about twice the CPU per byte (docs/perf/relay_cpu.md).
  // create() then takes about 0.5 s per GiB of slots. false: pages on first use.
  bool prefault_slots = true;
  // Instrumentation for tests: called on the forwarding thread with each
  // version's slot after it was received and verified, just before commit.
  std::function<void(std::uint64_t version, void* slot, std::size_t bytes)> before_commit;
  // Instrumentation for tests: called on the forwarding thread as upstream
  // bytes arrive (version, bytes so far, total). It may sleep (throttling
  // the relay's link) or throw, which cuts the pull short like a dead
  // upstream: the relay abandons the version and fails over.
  std::function<void(std::uint64_t version, std::uint64_t received, std::uint64_t total)> on_upstream_progress;
};

struct RelayStats {
  std::uint64_t versions_forwarded = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t failovers = 0;         // switches to another upstream
  std::string upstream;                // the source in use now ("" while none is connected)
  std::uint64_t latest_version = 0;
  bool running = true;                 // false after a fatal error; `error` says why
  std::string error;
  PublisherStats publisher;
  // Added: the upstream connection's state.
  bool upstream_connected = true;      // false while every upstream is being retried
  std::string upstream_error;          // the last upstream error ("" if none yet)
  std::uint64_t versions_skipped = 0;  // versions the relay's ring could not take (FullRingPolicy::kSkip)
  // Lag: the newest version the upstream announced, and for the version
  // forwarded last the time from its announcement to its commit here.
  std::uint64_t upstream_latest_version = 0;
  double forward_lag_seconds = 0.0;
};

class Relay {
 public:
  static Result<std::unique_ptr<Relay>> create(RelayOptions options);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // What downstream subscribers connect to ("host:port").
  std::string address() const;
  // Newest version it holds and serves; 0 before the first.
  std::uint64_t latest_version() const;
  // Waits until the relay holds a version newer than `newer_than`; returns
  // it, kTimeout, or at once kConnectionLost (stats().error) when forwarding
  // has stopped for good and nothing newer is held.
  Result<std::uint64_t> wait_for_version(std::uint64_t newer_than, std::chrono::milliseconds timeout);
  RelayStats stats() const;

  class Impl;

 private:
  explicit Relay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
