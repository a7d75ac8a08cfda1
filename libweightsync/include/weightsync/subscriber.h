// weightsync/subscriber.h: the generator's side: pull the newest version.
//
// Contract
// - connect() opens an authenticated control connection to a Publisher,
//   learns its layout and slot table, and opens the data transport chosen by
//   negotiation (see transports.h). It fails with a clear error if the publisher is
//   unreachable, does not authenticate, or speaks another protocol version:
//   each of its two connections is bounded by the connect timeout and each
//   request after the handshake by the I/O timeout.
// - pull() delivers the newest committed version newer than
//   PullOptions::newer_than (default: held_version()) into the destination,
//   bit-exact, or fails. On failure the destination's bytes are undefined; it
//   never returns success with bytes from two versions (docs/consistency.md).
//   kVersionRevoked and kChecksumMismatch are retried automatically up to
//   SubscriberOptions::max_retries times; PullResult::retries counts them.
// - Streaming (SubscriberOptions::accept_streaming, tcp, a pipelined relay):
//   pull() may read a version the publisher is still receiving, as its bytes
//   are written, but returns it only once it was committed whole in the same
//   slot, its lease never revoked, and its checksum verified; an abandoned
//   in-progress version is kVersionRevoked (retried), never delivered.
// - The first connection-level error (kConnectionLost, kProtocolError,
//   kTimeout on the wire, kAuthFailed, kInternal, or any refusal that makes the
//   publisher close a connection) is sticky: every later call returns it.
//   Create a new Subscriber to reconnect. kNotReady, kVersionRevoked,
//   kChecksumMismatch and argument errors are not sticky.
// - Destinations: RDMA-capable transports (verbs, ucx) register a destination
//   the first time it is used and keep it registered for the Subscriber's
//   lifetime, so the steady pull loop registers nothing. Keep a destination's
//   memory allocated while the Subscriber lives (a model's parameter buffer
//   is the intended use); memory freed and reallocated at the same address
//   would be written through the stale registration.
// - CUDA destinations (MemoryKind::kCuda, current device): a transport that
//   can write device memory (cuda_ipc) copies straight into it; any other
//   goes through the staging ring (SubscriberOptions::staging_*), never a
//   whole-model staging copy. Either way the bytes are in device memory when
//   pull() returns (the library's stream is synchronized). The pointer is
//   checked to be device memory of the current device (cudaPointerGetAttributes).
// - Threads: a Subscriber has no threads of its own; every call runs on the
//   caller's thread and blocks at most for its timeout. Use one Subscriber from
//   one thread at a time. The progress callback runs on the caller's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/memory.h"
#include "weightsync/options.h"
#include "weightsync/status.h"

namespace weightsync {

struct ScatterEntry {
  std::string name;  // tensor name in the layout
  void* data = nullptr;
  std::size_t bytes = 0;  // must equal the tensor's bytes
};

// Where a pull lands: one region laid out like the publisher's slots, or one
// pointer per tensor (every tensor of the layout exactly once), e.g. straight
// into a model's parameters.
class Destination {
 public:
  static Destination contiguous(void* data, std::size_t bytes, MemoryKind kind = MemoryKind::kHost);
  static Destination scatter(std::vector<ScatterEntry> entries, MemoryKind kind = MemoryKind::kHost);

  bool is_contiguous() const noexcept { return contiguous_; }
  MemoryKind memory_kind() const noexcept { return kind_; }
  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  const std::vector<ScatterEntry>& entries() const noexcept { return entries_; }

 private:
  Destination() = default;
  bool contiguous_ = true;
  MemoryKind kind_ = MemoryKind::kHost;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<ScatterEntry> entries_;
};

struct PullOptions {
  // Deliver only a version newer than this. nullopt: held_version().
  std::optional<std::uint64_t> newer_than;
  // How long to wait for such a version to be published; 0: do not wait
  // (kNotReady if there is none now).
  std::chrono::milliseconds wait{0};
  // Called on the caller's thread as bytes arrive: (bytes so far, total).
  // If it throws, the pull fails with kInternal and, since the transfer was
  // cut short, the connection becomes unusable (sticky).
  std::function<void(std::uint64_t, std::uint64_t)> on_progress;
  // Called on the caller's thread when an attempt was granted a version,
  // before its first byte: (version, streaming: it is still being written,
  // SubscriberOptions::accept_streaming). Throwing is as for on_progress.
  std::function<void(std::uint64_t, bool)> on_start;
};

struct PullResult {
  std::uint64_t version = 0;
  std::uint64_t bytes = 0;         // payload bytes delivered
  std::uint32_t retries = 0;       // revoked or corrupt attempts retried
  double seconds = 0.0;            // transfer wall time, retries included, waiting excluded
  double wait_seconds = 0.0;       // time spent waiting for a newer version to be published
  bool checksum_verified = false;  // the publisher's xxHash3 matched
  std::uint64_t checksum = 0;      // that xxHash3 (the one the trainer computed, also through relays); 0 unless verified
  bool staged = false;             // went through the page-locked staging ring
};

struct SubscriberStats {
  std::uint64_t pulls = 0;          // successful pulls
  std::uint64_t retries = 0;        // discarded attempts (revoked, torn, corrupt) of successful pulls
  std::uint64_t bytes = 0;          // payload bytes delivered by successful pulls
  std::uint64_t registrations = 0;  // memory registrations made by the transport (first use of a destination)
  std::uint64_t staged_pulls = 0;   // successful pulls through the staging ring
  std::uint64_t streamed_pulls = 0;  // successful pulls of a version read while still being written
};

class Subscriber {
 public:
  // address: "host:port" as given by Publisher::address().
  static Result<std::unique_ptr<Subscriber>> connect(const std::string& address,
                                                     SubscriberOptions options = {});
  // Tries each address in order (a trainer and its relays, say) and returns
  // the first connection that succeeds; each try is bounded by the connect
  // timeout. If none does, the last address's error, its message listing
  // every address's reason. kInvalidArgument for an empty list. The
  // Subscriber stays with the source it got: after a sticky error, call
  // connect_any() again to fail over (docs/relays.md).
  static Result<std::unique_ptr<Subscriber>> connect_any(const std::vector<std::string>& addresses,
                                                         SubscriberOptions options = {});
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  const WeightLayout& layout() const noexcept;
  std::size_t slot_count() const noexcept;
  // The negotiated data transport ("verbs", "ucx", "cuda_ipc", "shm" or "tcp").
  std::string transport() const;
  // Whether the publisher computes checksums.
  bool publisher_checksums() const noexcept;

  // Newest committed version on the publisher; 0 if none yet.
  Result<std::uint64_t> latest_version();
  // Waits until a version newer than `newer_than` is committed; returns it,
  // or kTimeout.
  Result<std::uint64_t> wait_for_version(std::uint64_t newer_than, std::chrono::milliseconds timeout);
  Result<PullResult> pull(const Destination& destination, const PullOptions& options = {});

  // The version last delivered by pull(); 0 before the first.
  std::uint64_t held_version() const noexcept;
  // OK, or the sticky connection error.
  Status status() const;
  SubscriberStats stats() const;

  class Impl;

 private:
  explicit Subscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
