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
//   the first time it is used (or once per region: register_memory) and keep
//   it registered until release_memory() or the Subscriber's end, so the
//   steady pull loop registers nothing. Release memory before freeing,
//   reusing or unmapping it: memory reallocated at the same address would
//   otherwise be written through the stale registration.
// - Partial pulls (Destination::slices) keep every guarantee: one version,
//   never torn, and with checksums verified against the publisher's hash of
//   exactly the bytes pulled (the view's checksum; docs/sharding.md). They
//   never stream. With checksums, each distinct set of slices is registered
//   with the publisher once (a view); a publisher keeps at most 16 views per
//   subscriber, so a 17th distinct partial destination is refused
//   (kInvalidArgument): prepare() the few an engine rank needs and reuse them.
// - CUDA destinations (MemoryKind::kCuda, current device): a transport that
//   can write device memory (cuda_ipc) copies straight into it; any other
//   goes through the staging ring (SubscriberOptions::staging_*), never a
//   whole-model staging copy. Either way the bytes are in device memory when
//   pull() returns (the library's stream is synchronized). The pointer is
//   checked to be device memory of the current device (cudaPointerGetAttributes).
// - Threads: a Subscriber has no threads of its own; every call runs on the
//   caller's thread and blocks at most for its timeout. Use one Subscriber from
//   one thread at a time (stats_snapshot() excepted: any thread). The progress
//   callback runs on the caller's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/cancel.h"
#include "weightsync/layout.h"
#include "weightsync/memory.h"
#include "weightsync/options.h"
#include "weightsync/settings.h"
#include "weightsync/status.h"

namespace weightsync {

struct ScatterEntry {
  std::string name;  // tensor name in the layout
  void* data = nullptr;
  std::size_t bytes = 0;  // must equal the tensor's bytes
};

// Part of one tensor of the layout, for a partial pull: `count` ranges of
// `length` bytes; range i starts at byte `offset + i * stride` of the tensor
// and lands at `dest + i * dest_stride`. One range is a dim-0 slice; a column
// slice of a row-major [rows, cols] matrix is count = rows, stride = the row's
// bytes. Ranges must lie inside the tensor; every byte pulled, over all the
// slices of a Destination, must be distinct (no slot byte read twice).
struct TensorSlice {
  std::string tensor;           // name in the publisher's layout
  std::uint64_t offset = 0;     // bytes from the start of the tensor
  std::uint64_t length = 0;     // bytes per range, > 0
  std::uint64_t count = 1;      // ranges, >= 1
  std::uint64_t stride = 0;     // bytes between range starts in the tensor (count > 1: >= length)
  void* dest = nullptr;
  std::uint64_t dest_stride = 0;  // bytes between range starts at dest; 0: `length` (packed)
};

// Where a pull lands: one region laid out like the publisher's slots, one
// pointer per tensor (every tensor of the layout exactly once), e.g. straight
// into a model's parameters, or slices: any subset of the tensors and byte
// ranges within them (a partial pull; docs/sharding.md).
class Destination {
 public:
  static Destination contiguous(void* data, std::size_t bytes, MemoryKind kind = MemoryKind::kHost);
  static Destination scatter(std::vector<ScatterEntry> entries, MemoryKind kind = MemoryKind::kHost);
  static Destination slices(std::vector<TensorSlice> slices, MemoryKind kind = MemoryKind::kHost);

  bool is_contiguous() const noexcept { return shape_ == Shape::kContiguous; }
  bool is_partial() const noexcept { return shape_ == Shape::kSlices; }
  const std::vector<TensorSlice>& tensor_slices() const noexcept { return slices_; }
  MemoryKind memory_kind() const noexcept { return kind_; }
  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  const std::vector<ScatterEntry>& entries() const noexcept { return entries_; }

 private:
  enum class Shape : std::uint8_t { kContiguous, kScatter, kSlices };
  Destination() = default;
  Shape shape_ = Shape::kContiguous;
  MemoryKind kind_ = MemoryKind::kHost;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<ScatterEntry> entries_;
  std::vector<TensorSlice> slices_;
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
  // Deliver exactly this version (newer_than is then ignored): kNotReady if
  // it is not published within `wait`, kVersionRevoked (not retried) if the
  // publisher no longer holds it. How a SubscriberGroup pulls one version
  // from every trainer rank (docs/consistency.md, "Across ranks").
  std::optional<std::uint64_t> version;
  // Stops the pull early with kCancelled (weightsync/cancel.h): while it
  // waits for a version, looked at every kCancelPollInterval, and between
  // attempts, and between the links of a delta chain being applied (the
  // destination then holds neither version: pull it again without
  // delta_base); never in the middle of a transfer. Not sticky.
  Cancellation cancel;
  // Delta versions (docs/slow_links.md): the destination holds exactly this
  // version's bytes (as pulled; every tensor: a contiguous or scatter
  // destination in host memory). When the publisher offers deltas
  // (publisher_deltas()) and holds a chain of them from this version to the
  // newest, smaller than the version, the pull receives that chain and
  // applies it in place; the result is checked against the version's
  // xxHash3, always. Anything else (no chain, too old, not smaller, a
  // partial, device or exact pull, a result that fails the check, a chain
  // longer than the publisher's advertised delta_history or than 16 links,
  // applying that outlasts the I/O timeout) falls back to a full pull,
  // counted in SubscriberStats::delta_fallbacks.
  std::optional<std::uint64_t> delta_base;
};

struct PullResult {
  std::uint64_t version = 0;
  std::uint64_t bytes = 0;         // payload bytes delivered
  std::uint32_t retries = 0;       // revoked or corrupt attempts retried
  double seconds = 0.0;            // transfer wall time, retries included, waiting excluded
  double wait_seconds = 0.0;       // time spent waiting for a newer version to be published
  bool checksum_verified = false;  // the publisher's xxHash3 matched
  bool signature_verified = false;  // the trainer's signature and its digests matched (SubscriberOptions::trusted_key)
  std::uint64_t checksum = 0;      // that xxHash3 (the one the trainer computed, also through relays); 0 unless verified
  bool staged = false;             // went through the page-locked staging ring
  bool partial = false;            // a partial pull: `checksum` is that of its view (its bytes, in its order)
  bool delta = false;              // delivered by a chain of deltas (PullOptions::delta_base)
  std::uint64_t wire_bytes = 0;    // bytes received for it: `bytes`, or the compressed deltas
};

// The upper bounds (seconds) of SubscriberStats' pull latency buckets, the
// last bucket being everything above the last bound.
inline constexpr double kPullSecondsBounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
inline constexpr std::size_t kPullSecondsBuckets = sizeof(kPullSecondsBounds) / sizeof(double) + 1;

struct SubscriberStats {
  std::uint64_t pulls = 0;          // successful pulls
  std::uint64_t retries = 0;        // discarded attempts (revoked, torn, corrupt) of successful pulls
  std::uint64_t bytes = 0;          // payload bytes delivered by successful pulls
  std::uint64_t registrations = 0;  // memory registrations made by the transport (first use of a destination)
  std::uint64_t staged_pulls = 0;   // successful pulls through the staging ring
  std::uint64_t streamed_pulls = 0;  // successful pulls of a version read while still being written
  std::uint64_t registrations_released = 0;  // registrations dropped by release_memory()
  std::uint64_t views = 0;                   // partial-pull views registered with the publisher
  std::uint64_t delta_pulls = 0;             // successful pulls delivered by deltas
  std::uint64_t delta_fallbacks = 0;         // pulls that asked for deltas and pulled in full instead
  std::uint64_t delta_bytes = 0;             // compressed delta bytes received by successful delta pulls
  std::uint64_t signatures_verified = 0;     // pulls whose bytes matched the trainer's signature
  std::uint64_t signatures_refused = 0;      // versions refused: no, a wrong, or a foreign signature, or bytes that differ
  double verify_seconds = 0.0;               // time spent fetching and checking signatures (all pulls)
  // PullResult::seconds of successful pulls: pull_seconds_counts[i] counts
  // those in (kPullSecondsBounds[i-1], kPullSecondsBounds[i]], the last one
  // those above every bound (a Prometheus histogram's buckets, not cumulative).
  std::array<std::uint64_t, kPullSecondsBuckets> pull_seconds_counts{};
  double pull_seconds_sum = 0.0;
  std::uint64_t held_version = 0;  // held_version() when the stats were taken
};

// A Destination checked, expanded into its list of reads and, for a partial
// one with checksums, registered with the publisher as a view: once, by
// Subscriber::prepare(), then replayed by every pull(plan) with no new
// validation, allocation of read lists, view or memory registration.
// Copyable and cheap to copy; valid only with the Subscriber that made it,
// while it lives, and only while the destination memory stays allocated.
class PullPlan {
 public:
  PullPlan() = default;
  bool valid() const noexcept { return state_ != nullptr; }
  std::uint64_t bytes() const noexcept;   // payload bytes a pull moves
  std::size_t pieces() const noexcept;    // contiguous ranges a pull reads
  bool partial() const noexcept;

  struct State;

 private:
  friend class Subscriber;
  std::shared_ptr<State> state_;
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
  // Whether the publisher serves delta versions (PublisherOptions::deltas).
  bool publisher_deltas() const noexcept;
  // Whether this session is encrypted (SubscriberOptions::encryption): the
  // control connection, and the data connection when it is tcp, carry
  // AES-GCM records; a same-host shm data path has no link to encrypt.
  bool encrypted() const noexcept;
  // What connect() resolved: every subscriber setting with where it came
  // from, as describe_settings() reports it (weightsync/settings.h).
  std::vector<SettingReport> settings() const;

  // Newest committed version on the publisher; 0 if none yet.
  Result<std::uint64_t> latest_version();
  // Waits until a version newer than `newer_than` is committed; returns it,
  // kTimeout, or kCancelled (within about kCancelPollInterval of `cancel`
  // being requested; not sticky).
  Result<std::uint64_t> wait_for_version(std::uint64_t newer_than, std::chrono::milliseconds timeout,
                                         const Cancellation& cancel = {});
  Result<PullResult> pull(const Destination& destination, const PullOptions& options = {});
  // Checks and expands `destination` once (see PullPlan); kInvalidArgument
  // for a destination that does not fit the layout, or a connection error if
  // registering its view failed.
  Result<PullPlan> prepare(const Destination& destination);
  Result<PullResult> pull(const PullPlan& plan, const PullOptions& options = {});

  // Registration lifecycle (RDMA-capable transports; a no-op for shm, tcp
  // and UCX's direct shared-memory path). register_memory registers
  // [base, base + bytes) once, so every destination inside it (the many small
  // tensors of one arena) uses that one registration. release_memory drops
  // every registration overlapping [base, base + bytes), explicit or made on
  // first use: call it before that memory is freed, reused by an allocator,
  // or unmapped (an engine going to sleep). A later pull into it registers
  // again (prepared plans re-register their spans on their next pull).
  Status register_memory(void* base, std::size_t bytes);
  Status release_memory(void* base, std::size_t bytes);

  // The version last delivered by pull(); 0 before the first.
  std::uint64_t held_version() const noexcept;
  // The trainer's signature block of `version` as this publisher serves it
  // (docs/protocol.md, "Signatures"), unchecked: what a relay forwards. Waits
  // while the publisher answers that it is not signed yet, up to the I/O
  // timeout (kTimeout). kInvalidConfig: this publisher serves no signatures;
  // kVersionRevoked: it has none for this version and never will.
  Result<std::vector<std::uint8_t>> signature_block(std::uint64_t version);
  // OK, or the sticky connection error.
  Status status() const;
  SubscriberStats stats() const;
  // The one method callable from any thread, concurrently with the others:
  // stats() as of the end of the last successful pull (a metrics scrape
  // reads this; the pulling thread copies its stats under a mutex once per
  // pull).
  SubscriberStats stats_snapshot() const;

  class Impl;

 private:
  explicit Subscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
