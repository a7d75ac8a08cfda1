// Publisher: resolves options, owns the SlotRing and the PublisherServer, and
// implements the publish paths (copy, contiguous copy, in-place SlotWriter).
#include "weightsync/publisher.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "auth/crypto.h"
#include "auth/integrity.h"
#include "common/checksum.h"
#include "common/env.h"
#include "common/host_identity.h"
#include "common/log.h"
#include "cuda/cuda_runtime.h"
#include "cuda/device_backend.h"
#include "cuda/device_slot_memory.h"
#include "net/socket.h"
#include "net/unix_socket.h"
#include "publisher/device_publish.h"
#include "publisher/publisher_access.h"
#include "publisher/server.h"
#include "publisher/version_signer.h"
#include "ring/slot_ring.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/verbs/verbs_transport.h"
#include "wire/frame.h"

namespace weightsync {

using detail::SettingSource;

class Publisher::Impl {
 public:
  explicit Impl(WeightLayout l) : layout(std::move(l)) {}

  WeightLayout layout;
  std::string bind_host;
  std::uint16_t port = 0;
  bool checksums = false;
  // The integrity layer: the key of the version tags (checksums are then tags).
  std::shared_ptr<const detail::VersionKey> version_key;
  std::unique_ptr<detail::SlotRing> ring;
  std::unique_ptr<detail::UcxPublisherTransport> ucx;      // after ring: unmapped before the slots are
  std::unique_ptr<detail::VerbsPublisherTransport> verbs;  // likewise
  std::unique_ptr<detail::ViewRegistry> views;  // before server: outlives it
  std::unique_ptr<detail::DeltaStore> deltas;   // likewise; after ring: stops before the slots go
  std::unique_ptr<detail::VersionSigner> signer;  // likewise: signs (a key) or forwards (a relay) blocks
  std::unique_ptr<detail::PublisherServer> server;
  bool writer_open = false;
  int io_timeout_ms = 10000;
  // Device publishes: host slots page-locked on first use, then the commit
  // queue. Declared after `ring`: destroyed first (the queue waits for its
  // copy in flight, then the pins go, then the slots).
  std::vector<std::unique_ptr<detail::HostPin>> slot_pins;
  std::unique_ptr<detail::DevicePublishQueue> device_queue;

  bool device_slots() const { return ring->slot_memory_kind() == MemoryKind::kCuda; }

  // Host-to-slot copy: memcpy into host slots, cudaMemcpy into device slots.
  Status copy_into_slot(void* dest, const void* source, std::size_t bytes) const {
    if (device_slots()) return detail::copy_sync(dest, source, bytes);
    std::memcpy(dest, source, bytes);
    return Status();
  }

  // Every publish path starts here: a device publish in flight must commit
  // first (versions commit in order), and its failure is reported once.
  Status settle_device_publish() {
    if (!device_queue) return Status();
    return device_queue->wait_idle(std::chrono::milliseconds(io_timeout_ms));
  }

  // Creates the commit queue and page-locks the host slots, once.
  Status prepare_device_publish();

  // Hash of the tensors in layout order (padding excluded).
  std::uint64_t checksum_of_slot(std::uint32_t slot) const {
    return detail::version_checksum(layout, ring->slot_data(slot), version_key);
  }

  // The threads that work from committed versions: view pre-hashing, deltas.
  void announce_commit(std::uint32_t slot, std::uint64_t version) {
    if (views) views->committed(slot, version << 1);
    if (deltas) deltas->committed(slot, version << 1);
    if (signer) signer->committed(slot, version << 1);
  }

  Result<PublishResult> finish(const detail::Reservation& r, std::uint64_t version,
                               std::chrono::steady_clock::time_point start,
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
    out.copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  Result<detail::Reservation> reserve(std::uint64_t version) {
    if (writer_open) {
      return Status(ErrorCode::kInvalidArgument,
                    "a SlotWriter is still open; commit or destroy it before publishing again");
    }
    if (Status settled = settle_device_publish(); !settled.ok()) return settled;
    auto r = ring->reserve(version);
    if (r.ok()) writer_open = true;
    return r;
  }
};

Status Publisher::Impl::prepare_device_publish() {
  if (device_queue) return Status();
  const detail::DeviceBackend backend = detail::device_backend();
  if (!device_slots()) {
    const auto start = std::chrono::steady_clock::now();
    for (std::uint32_t i = 0; i < ring->slot_count(); ++i) {
      auto pinned = backend.pin_host(ring->slot_data(i), ring->slot_region(i).mapped_size());
      if (!pinned.ok()) {
        slot_pins.clear();
        return pinned.status();
      }
      slot_pins.push_back(std::move(*pinned));
    }
    WS_INFO("publisher: page-locked {} slots x {} bytes for device publishes in {:.3f} s", ring->slot_count(),
            ring->slot_bytes(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
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
        out.copy_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - job.started).count();
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

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Publisher::~Publisher() {
  if (impl_ && impl_->server) impl_->server->stop();
}

Result<std::unique_ptr<Publisher>> Publisher::create(WeightLayout layout, PublisherOptions options) try {
  const bool cuda_slots = options.slot_memory == MemoryKind::kCuda;
  if (cuda_slots) {
    if (Status ready = detail::cuda_ready(); !ready.ok()) {
      return Status(ErrorCode::kInvalidConfig,
                    "PublisherOptions::slot_memory = kCuda: " + ready.message() + "; use host slots (kHost)");
    }
  } else if (options.slot_memory != MemoryKind::kHost) {
    return Status(ErrorCode::kInvalidConfig,
                  "unknown slot memory kind " + std::to_string(static_cast<int>(options.slot_memory)));
  }
  auto secret = detail::resolve_string(options.secret, "WEIGHTSYNC_SECRET", "");
  auto bind = detail::resolve_string(options.bind_address, "WEIGHTSYNC_BIND", "127.0.0.1");
  auto timeout = detail::resolve_millis(options.io_timeout_ms, "WEIGHTSYNC_TIMEOUT_MS", 10000);
  auto checksum = detail::resolve_bool(options.checksum, "WEIGHTSYNC_CHECKSUM", false);
  auto allocator = detail::resolve_string(options.slot_allocator, "WEIGHTSYNC_SLOT_ALLOCATOR", "auto");
  auto handshake_timeout =
      detail::resolve_millis(options.handshake_timeout_ms, "WEIGHTSYNC_HANDSHAKE_TIMEOUT_MS", 2000);
  auto idle_timeout =
      detail::resolve_millis(options.idle_timeout_ms, "WEIGHTSYNC_IDLE_TIMEOUT_MS", 0, /*zero_allowed=*/true);
  auto lease_timeout = detail::resolve_millis(options.lease_timeout_ms, "WEIGHTSYNC_LEASE_TIMEOUT_MS", 60000);
  auto deltas = detail::resolve_bool(options.deltas, "WEIGHTSYNC_DELTAS", false);
  auto integrity = detail::resolve_bool(options.integrity, "WEIGHTSYNC_INTEGRITY", false);
  auto encryption = detail::resolve_bool(options.encryption, "WEIGHTSYNC_ENCRYPTION", false);
  auto signing_key = detail::resolve_string(options.signing_key, "WEIGHTSYNC_SIGNING_KEY", "");
  for (const Status* s :
       {&secret.status(), &bind.status(), &timeout.status(), &checksum.status(), &allocator.status(),
        &handshake_timeout.status(), &idle_timeout.status(), &lease_timeout.status(), &deltas.status(),
        &integrity.status(), &encryption.status(), &signing_key.status()}) {
    if (!s->ok()) return *s;
  }
  if (encryption->value && secret->value.empty()) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("encryption (from ") + detail::to_string(encryption->source) +
                      ") needs a secret: set WEIGHTSYNC_SECRET (or PublisherOptions::secret)");
  }
  if (encryption->value && !integrity->value) {
    integrity->value = true;  // encryption implies the integrity layer
    integrity->source = encryption->source;
  }
  if (allocator->value != "auto" && allocator->value != "memfd" && allocator->value != "ucx") {
    return Status(ErrorCode::kInvalidConfig, "slot allocator '" + allocator->value + "' (from " +
                                                 detail::to_string(allocator->source) +
                                                 ") is not one of auto, memfd, ucx");
  }
  if (options.max_connections == 0 || options.max_handshakes == 0 ||
      options.max_handshakes_per_address == 0) {
    return Status(ErrorCode::kInvalidConfig,
                  "max_connections, max_handshakes and max_handshakes_per_address must each be at least 1");
  }
  // Subscribers receive the layout in one reply frame; it must fit.
  if (layout.serialize().size() + 64 > detail::kMaxReplyPayload) {
    return Status(ErrorCode::kInvalidArgument, "the layout's encoding exceeds the protocol's " +
                                                   std::to_string(detail::kMaxReplyPayload) +
                                                   "-byte reply limit; use fewer tensors or shorter names");
  }
  if (bind->value == "localhost") bind->value = "127.0.0.1";
  if (secret->value.empty() && !detail::is_loopback_host(bind->value)) {
    return Status(
        ErrorCode::kInvalidConfig,
        "refusing to listen on non-loopback address '" + bind->value +
            "' without a secret: anyone on the network could read the weights. Set "
            "WEIGHTSYNC_SECRET (or PublisherOptions::secret) on the publisher and every subscriber");
  }

  if (integrity->value) {
    if (secret->value.empty()) {
      return Status(ErrorCode::kInvalidConfig,
                    std::string("integrity (from ") + detail::to_string(integrity->source) +
                        ") needs a secret: set WEIGHTSYNC_SECRET (or PublisherOptions::secret)");
    }
    if (cuda_slots) {
      return Status(ErrorCode::kInvalidConfig, "integrity needs host slots: the publisher computes its tags on the CPU");
    }
    checksum->value = true;  // the tags are the checksums
  }
  if (cuda_slots && checksum->value) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("checksums (from ") + detail::to_string(checksum->source) +
                      ") need host slots: the publisher hashes slot bytes on the CPU; "
                      "turn checksums off or use slot_memory = kHost");
  }
  std::shared_ptr<const detail::SigningKey> signer_key;
  if (!signing_key->value.empty()) {
    if (cuda_slots) {
      return Status(ErrorCode::kInvalidConfig, "signatures need host slots: the publisher digests slot bytes "
                                               "on the CPU (unset WEIGHTSYNC_SIGNING_KEY or use kHost slots)");
    }
    auto loaded = detail::SigningKey::load_pem_file(signing_key->value);
    if (!loaded.ok()) {
      return Status(loaded.status().code(), loaded.status().message() + " (from " +
                                                std::string(detail::to_string(signing_key->source)) + ")");
    }
    signer_key = std::make_shared<const detail::SigningKey>(std::move(*loaded));
  }
  auto impl = std::make_unique<Impl>(std::move(layout));
  impl->checksums = checksum->value;
  if (integrity->value) {
    auto key = detail::derive_version_key(secret->value);
    if (!key.ok()) return key.status();
    impl->version_key = std::move(*key);
  }
  impl->io_timeout_ms = timeout->value;
  // UCX first: WEIGHTSYNC_SLOT_ALLOCATOR=ucx has UCX allocate the slots.
  std::unique_ptr<detail::UcxPublisherTransport> ucx;
  if (cuda_slots) {
    WS_INFO(
        "publisher: UCX and verbs transports not offered: the slots are CUDA memory (cuda_ipc serves them)");
  } else if (encryption->value) {
    WS_INFO("publisher: UCX and verbs transports not offered: encryption is on and one-sided reads cannot be "
            "encrypted (tcp and same-host shm serve)");
  } else if (auto created = detail::create_ucx_publisher(detail::is_loopback_host(bind->value));
             created.ok()) {
    ucx = std::move(*created);
  } else {
    WS_INFO("publisher: UCX transport not offered: {}", created.status().message());
  }
  std::string allocator_choice = allocator->value;
  // Never UCX by default: its shared-memory transports map UCX-allocated
  // slots read-write into every ucx subscriber.
  if (allocator_choice == "auto") allocator_choice = "memfd";
  if (cuda_slots) allocator_choice = "cuda";
  if (allocator_choice == "ucx" && !ucx) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("slot allocator 'ucx' (from ") + detail::to_string(allocator->source) +
                      ") needs the UCX transport, which is not available here (see above, or run "
                      "weightsync-info)");
  }
  if (allocator_choice == "ucx") {
    WS_WARN(
        "publisher: slot allocator 'ucx' (from {}): every ucx subscriber is trusted with write access to the "
        "slots and stamps (UCX maps them read-write), so any one of them can change what the others pull",
        detail::to_string(allocator->source));
  }
  const detail::SlotAllocator stamps_allocator = detail::memfd_slot_allocator(options.lock_memory);
  auto ring = detail::SlotRing::create(options.slots, impl->layout.total_bytes(), options.full_ring_policy,
                                       std::chrono::milliseconds(lease_timeout->value),
                                       allocator_choice == "cuda"  ? detail::cuda_slot_allocator()
                                       : allocator_choice == "ucx" ? ucx->slot_allocator(options.lock_memory)
                                                                   : stamps_allocator,
                                       cuda_slots ? &stamps_allocator : nullptr);
  if (!ring.ok()) return ring.status();
  impl->ring = std::move(*ring);

  auto listener = detail::listen_tcp(bind->value, options.port);
  if (!listener.ok()) return listener.status();
  auto port = detail::local_port(*listener);
  if (!port.ok()) return port.status();
  impl->bind_host = bind->value;
  impl->port = *port;

  // Offers, best first. verbs and UCX: slots registered once, now.
  std::vector<detail::TransportOffer> offers;
  if (cuda_slots || encryption->value) {
    // cuda_ipc only (below); or encryption: no one-sided reads.
  } else if (auto verbs = detail::start_verbs_publisher(*impl->ring); verbs.ok()) {
    impl->verbs = std::move(*verbs);
    offers.push_back(detail::TransportOffer{"verbs", impl->verbs->offer()});
  } else {
    WS_INFO("publisher: verbs transport not offered: {}", verbs.status().message());
  }
  if (ucx) {
    if (Status started = ucx->start(*impl->ring); started.ok()) {
      impl->ucx = std::move(ucx);
      offers.push_back(detail::TransportOffer{"ucx", impl->ucx->offer()});
    } else {
      WS_INFO("publisher: UCX transport not offered: {}", started.message());
    }
  }
  // Same-host shared memory: an abstract Unix socket with an unguessable name,
  // offered with this host's identity (boot id + network namespace, or
  // WEIGHTSYNC_HOST_ID; common/host_identity.h).
  detail::Socket local_listener;
  auto host_id = detail::host_identity();
  if (!host_id.ok()) return host_id.status();
  const std::string host = *host_id;
  const bool local_memory = cuda_slots || impl->ring->slot_region(0).shareable_by_descriptor();
  if (host.empty() || options.slots + 1 > detail::kMaxPassedFds || !local_memory) {
    WS_INFO("publisher: shared-memory transport not offered ({})",
            host.empty() ? "no host identity: /proc/sys/kernel/random/boot_id or /proc/self/ns/net unreadable"
            : options.slots + 1 > detail::kMaxPassedFds
                ? "more slots than descriptors one message can pass"
                : "the slots were allocated by UCX (slot allocator 'ucx'), which cannot hand them out as "
                  "read-only descriptors");
  } else {
    std::uint8_t token[16];
    Status random = detail::random_bytes(token, sizeof(token));
    if (!random.ok()) return random;
    std::string name = "weightsync-";
    for (std::uint8_t b : token) name += fmt::format("{:02x}", b);
    auto local = detail::listen_unix_abstract(name);
    if (local.ok()) {
      local_listener = std::move(*local);
      // The same local socket serves both: read-only descriptors of host
      // slots (shm), or CUDA IPC handles of device slots (cuda_ipc).
      offers.push_back(
          detail::TransportOffer{cuda_slots ? "cuda_ipc" : "shm", detail::ShmOffer{host, name}.encode()});
    } else {
      WS_INFO("publisher: shared-memory transport not offered: {}", local.status().message());
    }
  }

  detail::ServerConfig config;
  config.secret = secret->value;
  config.integrity = integrity->value;
  config.encryption = encryption->value;
  config.io_timeout_ms = timeout->value;
  config.max_connections = options.max_connections;
  config.max_handshakes = options.max_handshakes;
  config.max_handshakes_per_address = options.max_handshakes_per_address;
  // A peer never gets longer to authenticate than to answer any other message.
  config.handshake_timeout_ms = std::min(handshake_timeout->value, timeout->value);
  config.idle_timeout_ms = idle_timeout->value;
  if (cuda_slots && offers.empty()) {
    return Status(ErrorCode::kInvalidConfig,
                  "CUDA slots are served by the cuda_ipc transport only, which needs same-host local sockets "
                  "(see above); use host slots (slot_memory = kHost)");
  }
  // The tcp offer says this publisher understands the streaming extension
  // (docs/protocol.md, "Streaming"); subscribers before it ignore the blob.
  if (!cuda_slots) {
    offers.push_back(detail::TransportOffer{"tcp", detail::TcpOffer{detail::kTcpFeatureStreaming}.encode()});
  }
  detail::ServedState state{&impl->layout,     impl->ring.get(), impl->checksums,
                            std::move(offers), nullptr,          nullptr};
  impl->views = std::make_unique<detail::ViewRegistry>(impl->ring->slot_bytes(), impl->version_key);
  if (impl->checksums) impl->views->start_prehashing(impl->ring.get());
  state.views = impl->views.get();
  impl->signer = std::make_unique<detail::VersionSigner>(impl->layout, signer_key, options.slots + 2);
  impl->signer->start(impl->ring.get());
  state.signatures = impl->signer.get();
  if (deltas->value) {
    auto store = detail::DeltaStore::create(impl->layout, *impl->ring, options.delta_history, options.delta_level,
                                            impl->version_key);
    if (!store.ok()) {
      return Status(store.status().code(), "deltas (from " + std::string(detail::to_string(deltas->source)) +
                                               "): " + store.status().message());
    }
    impl->deltas = std::move(*store);
    state.deltas = impl->deltas.get();
  }
  if (impl->verbs) {
    detail::VerbsPublisherTransport* verbs_transport = impl->verbs.get();
    state.transport_connect =
        [verbs_transport](const std::string& name, std::uint64_t session,
                          const std::vector<std::uint8_t>& blob) -> Result<std::vector<std::uint8_t>> {
      if (name != "verbs")
        return Status(ErrorCode::kInvalidConfig, "transport '" + name + "' takes no connection");
      return verbs_transport->connect(session, blob);
    };
    state.session_closed = [verbs_transport](std::uint64_t session) {
      verbs_transport->session_closed(session);
    };
  }
  auto server = detail::PublisherServer::start(std::move(*listener), std::move(local_listener),
                                               std::move(config), std::move(state));
  if (!server.ok()) return server.status();
  impl->server = std::move(*server);

  if (secret->value.empty()) {
    WS_WARN(
        "publisher: no secret configured (WEIGHTSYNC_SECRET): listening on loopback {} only; "
        "set a secret to serve other hosts",
        impl->bind_host);
  }
  WS_INFO(
      "publisher: {}:{} (bind from {}), {} slots x {} bytes (allocator {}, asked {} from {}), checksums {} "
      "(from {}), deltas {} (from {}), integrity {} (from {}), encryption {} (from {}), signatures {} (from {}), "
      "io timeout {} ms (from {}), auth {} (from {})",
      impl->bind_host, impl->port, detail::to_string(bind->source), options.slots, impl->layout.total_bytes(),
      impl->ring->allocator_name(), allocator->value, detail::to_string(allocator->source),
      impl->checksums ? "on" : "off", detail::to_string(checksum->source), impl->deltas ? "on" : "off",
      detail::to_string(deltas->source), impl->version_key ? "on" : "off", detail::to_string(integrity->source),
      encryption->value ? "on" : "off", detail::to_string(encryption->source),
      signer_key ? "key " + detail::short_hex(signer_key->key_id()) : std::string("off"),
      detail::to_string(signing_key->source),
      timeout->value,
      detail::to_string(timeout->source), secret->value.empty() ? "off" : "on",
      detail::to_string(secret->source));
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::create: ") + e.what());
}

const WeightLayout& Publisher::layout() const noexcept {
  return impl_->layout;
}

std::string Publisher::address() const {
  return detail::HostPort{impl_->bind_host, impl_->port}.to_string();
}

std::uint16_t Publisher::port() const noexcept {
  return impl_->port;
}

std::size_t Publisher::slot_count() const noexcept {
  return impl_->ring->slot_count();
}

const std::string& Publisher::slot_allocator() const noexcept {
  return impl_->ring->allocator_name();
}

std::uint64_t Publisher::latest_version() const noexcept {
  return impl_->ring->latest_version();
}

Result<PublishResult> Publisher::publish(std::uint64_t version,
                                         const std::vector<TensorSource>& tensors) try {
  const auto start = std::chrono::steady_clock::now();
  const WeightLayout& layout = impl_->layout;
  if (tensors.size() != layout.tensors().size()) {
    return Status(ErrorCode::kInvalidArgument, "publish() got " + std::to_string(tensors.size()) +
                                                   " tensors; the layout has " +
                                                   std::to_string(layout.tensors().size()));
  }
  // Validate everything before touching a slot.
  std::vector<const TensorSource*> by_index(layout.tensors().size(), nullptr);
  for (const auto& t : tensors) {
    const TensorEntry* entry = layout.find(t.name);
    if (entry == nullptr)
      return Status(ErrorCode::kInvalidArgument, "publish(): unknown tensor '" + t.name + "'");
    const std::size_t index = static_cast<std::size_t>(entry - layout.tensors().data());
    if (by_index[index] != nullptr)
      return Status(ErrorCode::kInvalidArgument, "publish(): tensor '" + t.name + "' given twice");
    if (t.bytes != entry->bytes || t.data == nullptr) {
      return Status(ErrorCode::kInvalidArgument, "publish(): tensor '" + t.name + "' has " +
                                                     std::to_string(t.bytes) + " bytes; the layout says " +
                                                     std::to_string(entry->bytes));
    }
    by_index[index] = &t;
  }
  auto r = impl_->reserve(version);
  if (!r.ok()) return r.status();
  auto* base = static_cast<char*>(r->data);
  std::optional<detail::StreamHasher> hasher;
  if (impl_->checksums) hasher.emplace(impl_->version_key);
  // With checksums: copy in 1 MiB chunks and hash each while still in cache.
  // Without: one memcpy per tensor (large copies are fastest whole; see
  // transport/direct_copy.h).
  const std::uint64_t chunk = hasher ? (1u << 20) : UINT64_MAX;
  for (std::size_t i = 0; i < by_index.size(); ++i) {
    const TensorEntry& entry = layout.tensors()[i];
    const auto* src = static_cast<const char*>(by_index[i]->data);
    for (std::uint64_t done = 0; done < entry.bytes;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, entry.bytes - done));
      if (Status copied = impl_->copy_into_slot(base + entry.offset + done, src + done, n); !copied.ok()) {
        impl_->ring->abandon(r->slot);
        impl_->writer_open = false;
        return copied;
      }
      if (hasher) hasher->update(base + entry.offset + done, n);
      done += n;
    }
  }
  return impl_->finish(*r, version, start,
                       hasher ? std::optional<std::uint64_t>(hasher->digest()) : std::nullopt);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish: ") + e.what());
}

Result<PublishResult> Publisher::publish(std::uint64_t version, const void* data, std::size_t bytes) try {
  const auto start = std::chrono::steady_clock::now();
  if (data == nullptr || bytes != impl_->layout.total_bytes()) {
    return Status(ErrorCode::kInvalidArgument, "publish(): contiguous image has " + std::to_string(bytes) +
                                                   " bytes; the layout's region is " +
                                                   std::to_string(impl_->layout.total_bytes()));
  }
  auto r = impl_->reserve(version);
  if (!r.ok()) return r.status();
  if (Status copied = impl_->copy_into_slot(r->data, data, bytes); !copied.ok()) {
    impl_->ring->abandon(r->slot);
    impl_->writer_open = false;
    return copied;
  }
  return impl_->finish(*r, version, start, std::nullopt);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish: ") + e.what());
}

Result<SlotWriter> Publisher::begin_publish(std::uint64_t version) try {
  auto r = impl_->reserve(version);
  if (!r.ok()) return r.status();
  return SlotWriter(this, version, r->slot, r->data, impl_->layout.total_bytes(), r->revoked);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::begin_publish: ") + e.what());
}

Result<PublishTicket> Publisher::publish_from_device(std::uint64_t version, const void* device_data,
                                                     std::size_t bytes, void* cuda_stream) try {
  if (device_data == nullptr || bytes != impl_->layout.total_bytes()) {
    return Status(ErrorCode::kInvalidArgument, "publish_from_device(): the image has " +
                                                   std::to_string(bytes) + " bytes; the layout's region is " +
                                                   std::to_string(impl_->layout.total_bytes()));
  }
  return publish_from_device(version, {TensorSource{"", device_data, bytes}}, cuda_stream);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish_from_device: ") + e.what());
}

Result<PublishTicket> Publisher::publish_from_device(std::uint64_t version,
                                                     const std::vector<TensorSource>& tensors,
                                                     void* cuda_stream) try {
  const auto start = std::chrono::steady_clock::now();
  const WeightLayout& layout = impl_->layout;
  // One unnamed source is the whole image (the overload above); else one per tensor.
  const bool image = tensors.size() == 1 && tensors[0].name.empty();
  std::vector<detail::DeviceCopy> copies;  // dest filled in once a slot is reserved
  std::vector<std::uint64_t> offsets;
  if (image) {
    if (Status s = detail::device_backend().check_device_memory(tensors[0].data, tensors[0].bytes,
                                                                "the publish_from_device source");
        !s.ok())
      return s;
    copies.push_back(detail::DeviceCopy{nullptr, tensors[0].data, tensors[0].bytes});
    offsets.push_back(0);
  } else {
    if (tensors.size() != layout.tensors().size()) {
      return Status(ErrorCode::kInvalidArgument,
                    "publish_from_device() got " + std::to_string(tensors.size()) +
                        " tensors; the layout has " + std::to_string(layout.tensors().size()));
    }
    std::vector<bool> seen(layout.tensors().size(), false);
    for (const auto& t : tensors) {
      const TensorEntry* entry = layout.find(t.name);
      if (entry == nullptr)
        return Status(ErrorCode::kInvalidArgument, "publish_from_device(): unknown tensor '" + t.name + "'");
      const std::size_t index = static_cast<std::size_t>(entry - layout.tensors().data());
      if (seen[index])
        return Status(ErrorCode::kInvalidArgument,
                      "publish_from_device(): tensor '" + t.name + "' given twice");
      seen[index] = true;
      if (t.bytes != entry->bytes) {
        return Status(ErrorCode::kInvalidArgument, "publish_from_device(): tensor '" + t.name + "' has " +
                                                       std::to_string(t.bytes) + " bytes; the layout says " +
                                                       std::to_string(entry->bytes));
      }
      if (Status s =
              detail::device_backend().check_device_memory(t.data, t.bytes, "the publish_from_device source");
          !s.ok())
        return Status(s.code(), "tensor '" + t.name + "': " + s.message());
      copies.push_back(detail::DeviceCopy{nullptr, t.data, t.bytes});
      offsets.push_back(entry->offset);
    }
  }
  if (Status prepared = impl_->prepare_device_publish(); !prepared.ok()) return prepared;
  auto r = impl_->reserve(version);  // waits for the previous device publish
  if (!r.ok()) return r.status();
  impl_->writer_open = false;  // the queue owns the reservation from here
  for (std::size_t i = 0; i < copies.size(); ++i) copies[i].dest = static_cast<char*>(r->data) + offsets[i];
  detail::DeviceCopyJob job{version, r->slot, r->revoked, start};
  if (Status queued = impl_->device_queue->enqueue(job, cuda_stream, copies); !queued.ok()) {
    impl_->ring->abandon(r->slot);
    return queued;
  }
  PublishTicket ticket;
  ticket.version = version;
  ticket.slot = r->slot;
  ticket.revoked_leases = r->revoked;
  ticket.enqueue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ticket;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::publish_from_device: ") + e.what());
}

Status Publisher::order_after_device_publish(void* cuda_stream) try {
  if (!impl_->device_queue) return Status();
  return impl_->device_queue->order_after(cuda_stream);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::order_after_device_publish: ") + e.what());
}

Result<PublishResult> Publisher::flush_device_publishes(std::chrono::milliseconds timeout) try {
  if (!impl_->device_queue) return Status(ErrorCode::kNotReady, "no device publish was enqueued");
  return impl_->device_queue->flush(timeout);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("Publisher::flush_device_publishes: ") + e.what());
}

PublisherStats Publisher::stats() const {
  PublisherStats stats;
  const detail::RingStats ring = impl_->ring->stats();
  stats.versions_published = ring.published;
  stats.versions_skipped = ring.skipped;
  stats.leases_revoked = ring.revoked;
  stats.leases_expired = ring.expired;
  stats.leases_granted = ring.granted;
  stats.leases_active = ring.active;
  const auto& c = impl_->server->counters();
  stats.connections_active = c.connections_active.load();
  stats.connections_accepted = c.connections_accepted.load();
  stats.auth_failures = c.auth_failures.load();
  stats.protocol_errors = c.protocol_errors.load();
  stats.bytes_served = c.bytes_served.load();
  stats.connections_refused = c.connections_refused.load();
  stats.handshakes_active = c.handshakes_active.load();
  stats.handshakes_timed_out = c.handshakes_timed_out.load();
  stats.sessions_idle_closed = c.sessions_idle_closed.load();
  const detail::ServerHealth health = impl_->server->health();
  if (impl_->deltas) {
    const detail::DeltaStoreStats d = impl_->deltas->stats();
    stats.deltas_computed = d.computed;
    stats.deltas_served = d.served;
    stats.delta_last_bytes = d.last_bytes;
    stats.delta_last_seconds = d.last_seconds;
  }
  const detail::VersionSigner::Counters signing = impl_->signer->counters();
  stats.versions_signed = signing.signed_versions;
  stats.versions_unsigned = signing.superseded;
  stats.sign_last_seconds = signing.last_sign_seconds;
  stats.serving = health.serving;
  stats.server_error = health.error;
  return stats;
}

// ---- SlotWriter ----

SlotWriter::SlotWriter(Publisher* owner, std::uint64_t version, std::uint32_t slot, void* data,
                       std::size_t size, std::uint32_t revoked)
    : owner_(owner),
      version_(version),
      slot_(slot),
      data_(data),
      size_(size),
      revoked_(revoked),
      started_(std::chrono::steady_clock::now()) {}

SlotWriter::SlotWriter(SlotWriter&& other) noexcept
    : owner_(other.owner_),
      version_(other.version_),
      slot_(other.slot_),
      data_(other.data_),
      size_(other.size_),
      revoked_(other.revoked_),
      started_(other.started_) {
  other.owner_ = nullptr;
}

SlotWriter& SlotWriter::operator=(SlotWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    owner_ = other.owner_;
    version_ = other.version_;
    slot_ = other.slot_;
    data_ = other.data_;
    size_ = other.size_;
    revoked_ = other.revoked_;
    started_ = other.started_;
    other.owner_ = nullptr;
  }
  return *this;
}

SlotWriter::~SlotWriter() {
  abandon();
}

void SlotWriter::abandon() noexcept {
  if (owner_ == nullptr) return;
  owner_->impl_->ring->abandon(slot_);
  owner_->impl_->writer_open = false;
  owner_ = nullptr;
}

Result<void*> SlotWriter::tensor(const std::string& name) try {
  if (owner_ == nullptr) return Status(ErrorCode::kInvalidArgument, "SlotWriter already committed");
  const TensorEntry* entry = owner_->impl_->layout.find(name);
  if (entry == nullptr) return Status(ErrorCode::kInvalidArgument, "unknown tensor '" + name + "'");
  return static_cast<void*>(static_cast<char*>(data_) + entry->offset);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("SlotWriter::tensor: ") + e.what());
}

Result<PublishResult> SlotWriter::commit() {
  if (owner_ == nullptr) return Status(ErrorCode::kInvalidArgument, "SlotWriter already committed");
  Publisher* owner = owner_;
  owner_ = nullptr;
  detail::Reservation r{slot_, revoked_, data_};
  try {
    return owner->impl_->finish(r, version_, started_, std::nullopt);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("SlotWriter::commit: ") + e.what());
  }
}

// ---- PublisherAccess (src/publisher/publisher_access.h) ----

namespace detail {

Result<PublishResult> PublisherAccess::commit_as(SlotWriter& writer, std::uint64_t version,
                                                 std::optional<std::uint64_t> checksum) {
  if (writer.owner_ == nullptr) return Status(ErrorCode::kInvalidArgument, "SlotWriter already committed");
  if (version < writer.version_) {
    const std::uint64_t reserved = writer.version_;
    writer.abandon();
    return Status(ErrorCode::kInvalidArgument, "cannot commit version " + std::to_string(version) +
                                                   " into a slot reserved for version " +
                                                   std::to_string(reserved) + " (versions must increase)");
  }
  Publisher* owner = writer.owner_;
  writer.owner_ = nullptr;
  detail::Reservation r{writer.slot_, writer.revoked_, writer.data_};
  try {
    // With the integrity layer a forwarded checksum (a relay's upstream tag,
    // keyed by the upstream's secret) is not served: this publisher tags the
    // version itself, under its own key.
    if (owner->impl_->version_key) checksum.reset();
    return owner->impl_->finish(r, version, writer.started_, checksum);
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("PublisherAccess::commit_as: ") + e.what());
  }
}

Status PublisherAccess::begin_streaming(SlotWriter& writer, std::uint64_t version) {
  if (writer.owner_ == nullptr) return Status(ErrorCode::kInvalidArgument, "SlotWriter already committed");
  Status s = writer.owner_->impl_->ring->begin_streaming(writer.slot_, version);
  if (s.ok()) writer.version_ = version;
  return s;
}

void PublisherAccess::advance_watermark(SlotWriter& writer, std::uint64_t bytes) {
  if (writer.owner_ == nullptr) return;
  writer.owner_->impl_->ring->advance_watermark(writer.slot_, bytes);
}

void PublisherAccess::retire(Publisher& publisher, const std::string& why) {
  publisher.impl_->ring->retire(why);
}

bool PublisherAccess::serves_checksums(const Publisher& publisher) {
  return publisher.impl_->checksums;
}

void PublisherAccess::enable_signature_forwarding(Publisher& publisher) {
  publisher.impl_->signer->enable_forwarding();
}

void PublisherAccess::forward_signature(Publisher& publisher, std::uint64_t version,
                                        std::optional<std::vector<std::uint8_t>> block) {
  if (block) {
    publisher.impl_->signer->attach(version, std::move(*block));
  } else {
    publisher.impl_->signer->give_up(version);
  }
}

}  // namespace detail

}  // namespace weightsync
