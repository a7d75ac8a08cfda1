// Publisher::Impl, the publisher itself (detail::PublisherCore): the ring,
// its transports, the server and the threads that work from commits, behind
// the public Publisher (publisher.cc: the publish paths and SlotWriter) and
// the relay (relay/relay.cc), which holds a core of its own and forwards
// versions into it through a ForwardingWriter. This header is the library's
// published interface for that: no friend of the public classes is needed.
//
// Threads: create() on the caller's thread. The publish paths (reserve,
// finish, abandon and ForwardingWriter) on the publishing thread only, one
// version at a time; stats(), latest_version() and retire() from any thread.
// The destructor stops the server first, then releases in declaration order
// (reversed) what the server and the commit threads use.
// Errors: Status values; create() reports the first setting, transport,
// ring or server failure.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "auth/integrity.h"
#include "cuda/device_backend.h"
#include "delta/delta_store.h"
#include "publisher/device_publish.h"
#include "publisher/served_transports.h"
#include "publisher/server.h"
#include "publisher/version_signer.h"
#include "publisher/view_registry.h"
#include "ring/slot_ring.h"
#include "weightsync/publisher.h"

namespace weightsync {

namespace detail {
class ForwardingWriter;
struct PublisherSettings;
}  // namespace detail

class Publisher::Impl {
 public:
  // Where a core is served from: its own server (the default), which may
  // also serve up to `max_streams` named streams (adapters), or, with
  // `shared_server`, none of its own: that server serves `served` as a named
  // stream (weightsync/adapter_publisher.h) and must outlive every use of
  // stats().
  struct Serving {
    std::size_t max_streams = 0;
    const detail::PublisherServer* shared_server = nullptr;
  };
  static Result<std::unique_ptr<Impl>> create(WeightLayout layout, const PublisherOptions& options,
                                              Serving serving);
  static Result<std::unique_ptr<Impl>> create(WeightLayout layout, const PublisherOptions& options);
  explicit Impl(WeightLayout l) : layout(std::move(l)) {}
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  WeightLayout layout;
  std::string bind_host;
  std::uint16_t port = 0;
  bool checksums = false;
  std::vector<SettingReport> settings;  // what create() resolved (settings())
  // The integrity layer: the key of the version tags (checksums are then tags).
  std::shared_ptr<const detail::VersionKey> version_key;
  std::unique_ptr<detail::SlotRing> ring;
  std::unique_ptr<detail::ServedTransports> transports;  // after ring: unregistered before the slots go
  std::unique_ptr<detail::ViewRegistry> views;           // before server: outlives it
  std::unique_ptr<detail::DeltaStore> deltas;            // likewise; after ring: stops before the slots go
  std::unique_ptr<detail::VersionSigner> signer;  // likewise: signs (a key) or forwards (a relay) blocks
  std::unique_ptr<detail::PublisherServer> server;
  const detail::PublisherServer* shared_server = nullptr;  // serves this core when `server` is null
  detail::ServedState served;                              // what a server serves from this core
  bool writer_open = false;
  int io_timeout_ms = 10000;
  // Device publishes: host slots page-locked on first use, then the commit
  // queue. Declared after `ring`: destroyed first (the queue waits for its
  // copy in flight, then the pins go, then the slots).
  std::vector<std::unique_ptr<detail::HostPin>> slot_pins;
  std::unique_ptr<detail::DevicePublishQueue> device_queue;

  std::string address() const;
  std::uint64_t latest_version() const noexcept { return ring->latest_version(); }
  PublisherStats stats() const;
  bool device_slots() const { return ring->slot_memory_kind() == MemoryKind::kCuda; }

  // Host-to-slot copy: memcpy into host slots, cudaMemcpy into device slots.
  Status copy_into_slot(void* dest, const void* source, std::size_t bytes) const;
  // Every publish path starts here: a device publish in flight must commit
  // first (versions commit in order), and its failure is reported once.
  Status settle_device_publish();
  // Creates the commit queue and page-locks the host slots, once.
  Status prepare_device_publish();
  // A free slot for `version`; kInvalidArgument while another writer is open.
  Result<detail::Reservation> reserve(std::uint64_t version);
  // Commits a reserved slot as `version`. `checksum`: a value to serve as is
  // (forwarded, or hashed while copying); nullopt hashes the slot when this
  // publisher serves checksums. Ignored when it serves none.
  Result<PublishResult> finish(const detail::Reservation& r, std::uint64_t version,
                               std::chrono::steady_clock::time_point start,
                               std::optional<std::uint64_t> checksum);
  // Gives a reserved slot back uncommitted.
  void abandon(std::uint32_t slot);

  // ---- forwarding (relays) ----
  // A slot for the version a relay was told of (see ForwardingWriter).
  Result<detail::ForwardingWriter> begin_forwarding(std::uint64_t version);
  // A relay whose forwarding stopped for good: leases asking for a version
  // are refused with kConnectionLost and `why` from now on (SlotRing::retire).
  void retire(const std::string& why) { ring->retire(why); }
  // Marks this publisher as one that forwards signatures, so it offers
  // FETCH_SIGNATURE in SLOT_TABLE. Call right after create().
  void enable_signature_forwarding() { signer->enable_forwarding(); }
  // Serves the trainer's signature block of `version` as the upstream served
  // it (nullopt: the upstream served none for it). Call it before committing
  // `version`, so a leaf never finds the version without its block.
  void forward_signature(std::uint64_t version, std::optional<std::vector<std::uint8_t>> block);

 private:
  // create()'s steps.
  Status make_ring(const detail::PublisherSettings& resolved, const PublisherOptions& options);
  Status make_services(const detail::PublisherSettings& resolved, const PublisherOptions& options);
  Status start_server(const detail::PublisherSettings& resolved, const PublisherOptions& options,
                      std::size_t max_streams);
  // The hash of a committed slot's tensors in layout order (padding excluded).
  std::uint64_t checksum_of_slot(std::uint32_t slot) const;
  // The threads that work from committed versions: view pre-hashing, deltas, signing.
  void announce_commit(std::uint32_t slot, std::uint64_t version);
};

namespace detail {

using PublisherCore = Publisher::Impl;

// The server configuration a publisher's resolved settings give.
ServerConfig server_config(const PublisherSettings& resolved, const PublisherOptions& options);

// A relay's slot writer. A relay learns the version number it forwards from
// its upstream's lease, and the end-to-end checksum with it, only once the
// pull is done. So it reserves a slot for the version it was told of, pulls
// straight into the slot, and commits the slot as the version actually
// delivered (never below the reserved one) with the upstream's checksum, not
// a hash of its own. A pipelined relay also exposes the slot to streaming
// readers while it fills (begin_streaming, advance_watermark).
//
// Threads: the publishing thread only (like SlotWriter). Move-only; the
// destructor abandons an uncommitted slot (revoking its streaming leases).
// Errors: kInvalidArgument for a spent writer or a version below the
// reserved one (the slot is then abandoned).
class ForwardingWriter {
 public:
  ForwardingWriter(PublisherCore* core, std::uint64_t version, Reservation reservation);
  ForwardingWriter(ForwardingWriter&& other) noexcept;
  ForwardingWriter& operator=(ForwardingWriter&& other) noexcept;
  ForwardingWriter(const ForwardingWriter&) = delete;
  ForwardingWriter& operator=(const ForwardingWriter&) = delete;
  ~ForwardingWriter();

  std::uint64_t version() const noexcept { return version_; }
  void* data() const noexcept { return reservation_.data; }
  std::size_t size() const noexcept;
  // Exposes the slot to streaming readers as `version` (the upstream's, >
  // the latest committed; it may differ from the reserved one, and
  // commit_as must then use it). Write the slot once, in order, and advance
  // the watermark as bytes land.
  Status begin_streaming(std::uint64_t version);
  void advance_watermark(std::uint64_t bytes);
  // Commits the slot as `version` (>= version()). `checksum`: the upstream's
  // end-to-end value, stored as is when this publisher serves checksums
  // (unless it tags versions under its own integrity key); nullopt makes a
  // publisher that serves checksums hash the slot itself.
  Result<PublishResult> commit_as(std::uint64_t version, std::optional<std::uint64_t> checksum);
  void abandon() noexcept;

 private:
  PublisherCore* core_ = nullptr;  // null once spent
  std::uint64_t version_ = 0;
  Reservation reservation_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace detail
}  // namespace weightsync
