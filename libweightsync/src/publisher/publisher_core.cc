// Publisher::Impl (publisher_core.h): creation in named steps (settings,
// transports and ring, server), commits, device-publish set-up, stats, and
// the forwarding hooks relays use.
#include "publisher/publisher_core.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "common/host_identity.h"
#include "common/log.h"
#include "common/settings_table.h"
#include "cuda/cuda_runtime.h"
#include "cuda/device_slot_memory.h"
#include "net/socket.h"
#include "publisher/publisher_settings.h"
#include "wire/frame.h"

namespace weightsync {

using Clock = std::chrono::steady_clock;

Result<std::unique_ptr<Publisher::Impl>> Publisher::Impl::create(WeightLayout layout,
                                                                 const PublisherOptions& options) {
  return create(std::move(layout), options, Serving{});
}

Result<std::unique_ptr<Publisher::Impl>> Publisher::Impl::create(WeightLayout layout,
                                                                 const PublisherOptions& options,
                                                                 Serving serving) try {
  auto resolution = detail::resolve_publisher_settings(options);
  if (!resolution.ok()) return resolution.status();
  const detail::PublisherSettings& resolved = *resolution;
  // Subscribers receive the layout in one reply frame; it must fit.
  if (layout.serialize().size() + 64 > detail::kMaxReplyPayload) {
    return Status(ErrorCode::kInvalidArgument, "the layout's encoding exceeds the protocol's " +
                                                   std::to_string(detail::kMaxReplyPayload) +
                                                   "-byte reply limit; use fewer tensors or shorter names");
  }
  auto impl = std::make_unique<Impl>(std::move(layout));
  impl->checksums = resolved.checksum.value;
  impl->settings = resolved.reports();
  impl->io_timeout_ms = resolved.io_timeout_ms.value;
  if (resolved.integrity.value) {
    auto key = detail::derive_version_key(resolved.secret.value);
    if (!key.ok()) return key.status();
    impl->version_key = std::move(*key);
  }
  if (Status s = impl->make_ring(resolved, options); !s.ok()) return s;
  if (Status s = impl->make_services(resolved, options); !s.ok()) return s;
  impl->shared_server = serving.shared_server;
  if (serving.shared_server == nullptr) {
    if (Status s = impl->start_server(resolved, options, serving.max_streams); !s.ok()) return s;
  }
  if (resolved.secret.value.empty() && serving.shared_server == nullptr) {  // said once, by the server's owner
    WS_WARN(
        "publisher: no secret configured (WEIGHTSYNC_SECRET): listening on loopback {} only; "
        "set a secret to serve other hosts",
        impl->bind_host);
  }
  WS_INFO(
      "publisher: {}:{}, {} slots x {} bytes (allocator {}), signatures {}; settings: {}", impl->bind_host,
      impl->port, options.slots, impl->layout.total_bytes(), impl->ring->allocator_name(),
      resolved.signer_key ? "key " + detail::short_hex(resolved.signer_key->key_id()) : std::string("off"),
      detail::settings_log_text(impl->settings));
  return impl;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::create: ") + e.what());
}

// The transports first (one may allocate the slots:
// WEIGHTSYNC_SLOT_ALLOCATOR=ucx), then the ring, then the transports start on it.
Status Publisher::Impl::make_ring(const detail::PublisherSettings& resolved,
                                  const PublisherOptions& options) {
  const bool cuda_slots = resolved.cuda_slots;
  if (auto host = detail::host_identity(); !host.ok())
    return host.status();  // a malformed WEIGHTSYNC_HOST_ID
  auto prepared = detail::ServedTransports::prepare(detail::ServeSettings{
      detail::is_loopback_host(resolved.bind_address.value), resolved.encryption.value, cuda_slots});
  if (!prepared.ok()) return prepared.status();
  transports = std::move(*prepared);
  // Never a transport's allocator by default: UCX's shared-memory transports
  // map UCX-allocated slots read-write into every ucx subscriber.
  const std::string& asked = resolved.slot_allocator.value;
  const std::string choice = cuda_slots ? "cuda" : asked == "auto" ? "memfd" : asked;
  const detail::SlotAllocator stamps_allocator = detail::memfd_slot_allocator(options.lock_memory);
  Result<detail::SlotAllocator> slot_allocator = stamps_allocator;
  if (choice == "cuda") {
    slot_allocator = detail::cuda_slot_allocator();
  } else if (choice != "memfd") {
    slot_allocator = transports->slot_allocator(choice, options.lock_memory);
    if (!slot_allocator.ok()) {
      return Status(ErrorCode::kInvalidConfig, "slot allocator '" + choice + "' (from " +
                                                   detail::to_string(resolved.slot_allocator.source) +
                                                   "): " + slot_allocator.status().message());
    }
  }
  auto made = detail::SlotRing::create(options.slots, layout.total_bytes(), options.full_ring_policy,
                                       std::chrono::milliseconds(resolved.lease_timeout_ms.value),
                                       *slot_allocator, cuda_slots ? &stamps_allocator : nullptr);
  if (!made.ok()) return made.status();
  ring = std::move(*made);
  return transports->start(*ring);
}

namespace detail {
ServerConfig server_config(const PublisherSettings& resolved, const PublisherOptions& options) {
  ServerConfig config;
  config.secret = resolved.secret.value;
  config.integrity = resolved.integrity.value;
  config.encryption = resolved.encryption.value;
  config.io_timeout_ms = resolved.io_timeout_ms.value;
  config.max_connections = options.max_connections;
  config.max_handshakes = options.max_handshakes;
  config.max_handshakes_per_address = options.max_handshakes_per_address;
  // A peer never gets longer to authenticate than to answer any other message.
  config.handshake_timeout_ms = std::min(resolved.handshake_timeout_ms.value, resolved.io_timeout_ms.value);
  config.idle_timeout_ms = resolved.idle_timeout_ms.value;
  return config;
}
}  // namespace detail

// The commit threads (view pre-hashing, signing, deltas) and what a server
// answers from: `served`.
Status Publisher::Impl::make_services(const detail::PublisherSettings& resolved,
                                      const PublisherOptions& options) {
  detail::ServedState& state = served;
  state.layout = &layout;
  state.ring = ring.get();
  state.checksums = checksums;
  state.transports = transports.get();
  views = std::make_unique<detail::ViewRegistry>(ring->slot_bytes(), version_key);
  if (checksums) views->start_prehashing(ring.get());
  state.views = views.get();
  signer = std::make_unique<detail::VersionSigner>(layout, resolved.signer_key, options.slots + 2);
  signer->start(ring.get());
  state.signatures = signer.get();
  if (resolved.deltas.value) {
    auto store =
        detail::DeltaStore::create(layout, *ring, options.delta_history, options.delta_level, version_key);
    if (!store.ok()) {
      return Status(store.status().code(), "deltas (from " +
                                               std::string(detail::to_string(resolved.deltas.source)) +
                                               "): " + store.status().message());
    }
    deltas = std::move(*store);
    state.deltas = deltas.get();
  }
  return Status();
}

// The listener and the server that answers from `served`.
Status Publisher::Impl::start_server(const detail::PublisherSettings& resolved,
                                     const PublisherOptions& options, std::size_t max_streams) {
  auto listener = detail::listen_tcp(resolved.bind_address.value, options.port);
  if (!listener.ok()) return listener.status();
  auto bound = detail::local_port(*listener);
  if (!bound.ok()) return bound.status();
  bind_host = resolved.bind_address.value;
  port = *bound;
  detail::ServerConfig config = detail::server_config(resolved, options);
  config.max_streams = max_streams;
  auto started = detail::PublisherServer::start(std::move(*listener), std::move(config), served);
  if (!started.ok()) return started.status();
  server = std::move(*started);
  return Status();
}

Publisher::Impl::~Impl() {
  if (server) server->stop();
}

std::string Publisher::Impl::address() const {
  return detail::HostPort{bind_host, port}.to_string();
}

Status Publisher::Impl::copy_into_slot(void* dest, const void* source, std::size_t bytes) const {
  if (device_slots()) return detail::copy_sync(dest, source, bytes);
  std::memcpy(dest, source, bytes);
  return Status();
}

Status Publisher::Impl::settle_device_publish() {
  if (!device_queue) return Status();
  return device_queue->wait_idle(std::chrono::milliseconds(io_timeout_ms));
}

std::uint64_t Publisher::Impl::checksum_of_slot(std::uint32_t slot) const {
  return detail::version_checksum(layout, ring->slot_data(slot), version_key);
}

void Publisher::Impl::announce_commit(std::uint32_t slot, std::uint64_t version) {
  if (views) views->committed(slot, version << 1);
  if (deltas) deltas->committed(slot, version << 1);
  if (signer) signer->committed(slot, version << 1);
}

Result<PublishResult> Publisher::Impl::finish(const detail::Reservation& r, std::uint64_t version,
                                              Clock::time_point start,
                                              std::optional<std::uint64_t> checksum) {
  if (!checksums) checksum.reset();  // a forwarded checksum is served only when checksums are on
  if (checksums && !checksum) checksum = checksum_of_slot(r.slot);
  ring->commit(r.slot, version, checksum);
  announce_commit(r.slot, version);
  writer_open = false;
  PublishResult out;
  out.version = version;
  out.slot = r.slot;
  out.revoked_leases = r.revoked;
  out.copy_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

Result<detail::Reservation> Publisher::Impl::reserve(std::uint64_t version) {
  if (writer_open) {
    return Status(ErrorCode::kInvalidArgument,
                  "a SlotWriter is still open; commit or destroy it before publishing again");
  }
  if (Status settled = settle_device_publish(); !settled.ok()) return settled;
  auto r = ring->reserve(version);
  if (r.ok()) writer_open = true;
  return r;
}

void Publisher::Impl::abandon(std::uint32_t slot) {
  ring->abandon(slot);
  writer_open = false;
}

Status Publisher::Impl::prepare_device_publish() {
  if (device_queue) return Status();
  const detail::DeviceBackend backend = detail::device_backend();
  if (!device_slots()) {
    const auto start = Clock::now();
    for (std::uint32_t i = 0; i < ring->slot_count(); ++i) {
      auto pinned = backend.pin_host(ring->slot_data(i), ring->slot_region(i).mapped_size());
      if (!pinned.ok()) {
        slot_pins.clear();
        return pinned.status();
      }
      slot_pins.push_back(std::move(*pinned));
    }
    WS_INFO("publisher: page-locked {} slots x {} bytes for device publishes in {:.3f} s", ring->slot_count(),
            ring->slot_bytes(), std::chrono::duration<double>(Clock::now() - start).count());
  }
  auto copier = backend.make_copier();
  if (!copier.ok()) {
    slot_pins.clear();
    return copier.status();
  }
  auto queue = detail::DevicePublishQueue::create(
      std::move(*copier),
      [this](const detail::DeviceCopyJob& job) -> Result<PublishResult> {
        std::optional<std::uint64_t> checksum;
        if (checksums) checksum = checksum_of_slot(job.slot);
        ring->commit(job.slot, job.version, checksum);
        announce_commit(job.slot, job.version);
        PublishResult out;
        out.version = job.version;
        out.slot = job.slot;
        out.revoked_leases = job.revoked;
        out.copy_seconds = std::chrono::duration<double>(Clock::now() - job.started).count();
        return out;
      },
      [this](const detail::DeviceCopyJob& job) { ring->abandon(job.slot); },
      std::chrono::milliseconds(io_timeout_ms));
  if (!queue.ok()) {
    slot_pins.clear();
    return queue.status();
  }
  device_queue = std::move(*queue);
  // The queue keeps the pins while a copy may still write the slots (even
  // past its bounded destructor; device_publish.h).
  device_queue->hold_until_copies_end(std::move(slot_pins));
  slot_pins.clear();
  return Status();
}

PublisherStats Publisher::Impl::stats() const {
  PublisherStats stats;
  const detail::RingStats counted = ring->stats();
  stats.versions_published = counted.published;
  stats.versions_skipped = counted.skipped;
  stats.leases_revoked = counted.revoked;
  stats.leases_expired = counted.expired;
  stats.leases_granted = counted.granted;
  stats.leases_active = counted.active;
  stats.slowest_reader_version = counted.slowest_release_version;
  stats.slowest_reader_seconds = counted.slowest_release_seconds;
  const detail::PublisherServer* serving = server ? server.get() : shared_server;
  const auto& c = serving->counters();
  stats.connections_active = c.connections_active.load();
  stats.connections_accepted = c.connections_accepted.load();
  stats.auth_failures = c.auth_failures.load();
  stats.protocol_errors = c.protocol_errors.load();
  stats.bytes_served = c.bytes_served.load();
  stats.connections_refused = c.connections_refused.load();
  stats.handshakes_active = c.handshakes_active.load();
  stats.handshakes_timed_out = c.handshakes_timed_out.load();
  stats.sessions_idle_closed = c.sessions_idle_closed.load();
  const detail::ServerHealth health = serving->health();
  if (deltas) {
    const detail::DeltaStoreStats d = deltas->stats();
    stats.deltas_computed = d.computed;
    stats.deltas_served = d.served;
    stats.delta_last_bytes = d.last_bytes;
    stats.delta_last_seconds = d.last_seconds;
  }
  const detail::VersionSigner::Counters signing = signer->counters();
  stats.versions_signed = signing.signed_versions;
  stats.versions_unsigned = signing.superseded;
  stats.sign_last_seconds = signing.last_sign_seconds;
  stats.serving = health.serving;
  stats.server_error = health.error;
  return stats;
}

// ---- forwarding ----

Result<detail::ForwardingWriter> Publisher::Impl::begin_forwarding(std::uint64_t version) {
  auto r = reserve(version);
  if (!r.ok()) return r.status();
  return detail::ForwardingWriter(this, version, *r);
}

void Publisher::Impl::forward_signature(std::uint64_t version,
                                        std::optional<std::vector<std::uint8_t>> block) {
  if (block) {
    signer->attach(version, std::move(*block));
  } else {
    signer->give_up(version);
  }
}

namespace detail {

ForwardingWriter::ForwardingWriter(PublisherCore* core, std::uint64_t version, Reservation reservation)
    : core_(core), version_(version), reservation_(reservation), started_(Clock::now()) {}

ForwardingWriter::ForwardingWriter(ForwardingWriter&& other) noexcept
    : core_(other.core_),
      version_(other.version_),
      reservation_(other.reservation_),
      started_(other.started_) {
  other.core_ = nullptr;
}

ForwardingWriter& ForwardingWriter::operator=(ForwardingWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = other.core_;
    version_ = other.version_;
    reservation_ = other.reservation_;
    started_ = other.started_;
    other.core_ = nullptr;
  }
  return *this;
}

ForwardingWriter::~ForwardingWriter() {
  abandon();
}

std::size_t ForwardingWriter::size() const noexcept {
  return core_ != nullptr ? core_->layout.total_bytes() : 0;
}

void ForwardingWriter::abandon() noexcept {
  if (core_ == nullptr) return;
  core_->abandon(reservation_.slot);
  core_ = nullptr;
}

Status ForwardingWriter::begin_streaming(std::uint64_t version) {
  if (core_ == nullptr) return Status(ErrorCode::kInvalidArgument, "ForwardingWriter already committed");
  Status s = core_->ring->begin_streaming(reservation_.slot, version);
  if (s.ok()) version_ = version;
  return s;
}

void ForwardingWriter::advance_watermark(std::uint64_t bytes) {
  if (core_ == nullptr) return;
  core_->ring->advance_watermark(reservation_.slot, bytes);
}

Result<PublishResult> ForwardingWriter::commit_as(std::uint64_t version,
                                                  std::optional<std::uint64_t> checksum) {
  if (core_ == nullptr) return Status(ErrorCode::kInvalidArgument, "ForwardingWriter already committed");
  if (version < version_) {
    const std::uint64_t reserved = version_;
    abandon();
    return Status(ErrorCode::kInvalidArgument, "cannot commit version " + std::to_string(version) +
                                                   " into a slot reserved for version " +
                                                   std::to_string(reserved) + " (versions must increase)");
  }
  PublisherCore* core = core_;
  core_ = nullptr;
  try {
    // With the integrity layer a forwarded checksum (a relay's upstream tag,
    // keyed by the upstream's secret) is not served: this publisher tags the
    // version itself, under its own key.
    if (core->version_key) checksum.reset();
    return core->finish(reservation_, version, started_, checksum);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("ForwardingWriter::commit_as: ") + e.what());
  }
}

}  // namespace detail
}  // namespace weightsync
