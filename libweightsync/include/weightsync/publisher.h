// weightsync/publisher.h: the trainer's side: a versioned ring of weight slots.
//
// Contract
// - A Publisher owns `slots` contiguous regions of layout.total_bytes() each,
//   allocated (and registered with every data transport) once, in create().
// - publish() / begin_publish() take a version strictly greater than every
//   version published before; they copy (or let the caller write) into a slot
//   that holds neither the newest version nor a reader's lease, then commit the
//   version atomically (seqlock stamp; see docs/consistency.md).
// - Publishing never waits for readers. When every slot but the newest is
//   leased, options.full_ring_policy decides: revoke the oldest (its readers
//   get kVersionRevoked) or skip (publish returns kBusy).
// - Threads: publish(), begin_publish() and SlotWriter must be used from one
//   thread at a time (the trainer's). Every other method may be called from any
//   thread. Serving subscribers happens on the Publisher's own threads; see
//   docs/thread_model.md. The destructor stops serving (open connections are
//   closed, in-flight pulls fail with kConnectionLost) and joins its threads.
// - GPU weights (weightsync/cuda.h): publish_from_device() enqueues the copy
//   from CUDA memory into a slot on a stream of the publisher's, ordered after
//   the work already on the caller's stream, and returns at once; the
//   publisher's commit thread commits the version when the copy is complete.
//   Host slots are page-locked (cudaHostRegister) on the first such call. At
//   most one device publish is in flight: the next one first waits for it.
//   The sources must stay allocated and unchanged until the copy has read them:
//   order_after_device_publish() (device-side wait) or flush_device_publishes()
//   (host-side wait) before overwriting them.
//   A failed copy abandons the slot; the error is returned by the next
//   publish call or by flush_device_publishes(). The destructor waits for an
//   in-flight copy (bounded by the I/O timeout) before freeing the slots.
// - With PublisherOptions::slot_memory = kCuda the slots are device memory
//   (cudaMalloc on the current device): readable only by the cuda_ipc
//   transport (same host), publish() copies host to device, SlotWriter hands
//   out device pointers (synchronize your kernels before commit()), and
//   checksums are refused.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/options.h"
#include "weightsync/settings.h"
#include "weightsync/status.h"

namespace weightsync {

// The bytes of one tensor, supplied by the caller to publish().
struct TensorSource {
  std::string name;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

struct PublishResult {
  std::uint64_t version = 0;
  std::uint32_t slot = 0;
  std::uint32_t revoked_leases = 0;  // leases taken back to make room
  double copy_seconds = 0.0;         // publish(): the whole call; SlotWriter: begin_publish() to commit()
};

// A device publish that was enqueued: the version commits when its copy ends.
struct PublishTicket {
  std::uint64_t version = 0;
  std::uint32_t slot = 0;
  std::uint32_t revoked_leases = 0;
  double enqueue_seconds = 0.0;  // time the caller's thread spent in the call
};

struct PublisherStats {
  std::uint64_t versions_published = 0;
  std::uint64_t versions_skipped = 0;  // kSkip policy with a full ring
  std::uint64_t leases_revoked = 0;
  std::uint64_t leases_active = 0;
  std::uint64_t leases_granted = 0;
  std::uint64_t connections_active = 0;
  std::uint64_t connections_accepted = 0;
  std::uint64_t auth_failures = 0;
  std::uint64_t protocol_errors = 0;  // connections closed for bad input
  std::uint64_t bytes_served = 0;
  std::uint64_t leases_expired = 0;         // revoked because older than lease_timeout_ms
  std::uint64_t connections_refused = 0;    // turned away with ERROR(kBusy): a cap was reached
  std::uint64_t handshakes_active = 0;      // connections not yet authenticated
  std::uint64_t handshakes_timed_out = 0;   // closed for not authenticating in time
  std::uint64_t sessions_idle_closed = 0;   // closed by idle_timeout_ms
  // The slowest reader of the newest version a reader has finished with: the
  // longest time from granting a lease on it to its release (a reader's
  // whole pull of it, as the publisher sees it). 0 until a lease is released.
  std::uint64_t slowest_reader_version = 0;
  double slowest_reader_seconds = 0.0;
  // Delta versions (PublisherOptions::deltas): deltas encoded, chains sent,
  // and the newest delta's compressed size and copy + encode time.
  std::uint64_t deltas_computed = 0;
  std::uint64_t deltas_served = 0;
  std::uint64_t delta_last_bytes = 0;
  double delta_last_seconds = 0.0;
  // Signatures (PublisherOptions::signing_key): versions signed, versions
  // committed but never signed (a newer one came first, or the slot was
  // taken back while it was hashed), and the newest signature's digest +
  // sign time on the signing thread (never the publishing thread's).
  std::uint64_t versions_signed = 0;
  std::uint64_t versions_unsigned = 0;
  double sign_last_seconds = 0.0;
  // False once the thread that accepts and serves connections has stopped on
  // an error; `server_error` says why. No new subscriber is served then:
  // recreate the Publisher.
  bool serving = true;
  std::string server_error;
};

class Publisher;
class AdapterPublisher;

// In-place write of one version into a slot (no staging copy on the trainer
// side). Obtained from Publisher::begin_publish(). Destroying it without
// commit() abandons the version; the slot returns to the free pool.
// Must not outlive its Publisher.
class SlotWriter {
 public:
  SlotWriter(SlotWriter&& other) noexcept;
  SlotWriter& operator=(SlotWriter&& other) noexcept;
  SlotWriter(const SlotWriter&) = delete;
  SlotWriter& operator=(const SlotWriter&) = delete;
  ~SlotWriter();

  std::uint64_t version() const noexcept { return version_; }
  // The whole slot: layout().total_bytes() writable bytes.
  void* data() noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  // Pointer to a tensor inside the slot; kInvalidArgument for an unknown name.
  Result<void*> tensor(const std::string& name);
  // Publishes the version. After commit() (successful or not) the writer is spent.
  Result<PublishResult> commit();

 private:
  friend class Publisher;
  SlotWriter(Publisher* owner, std::uint64_t version, std::uint32_t slot, void* data, std::size_t size,
             std::uint32_t revoked);
  void abandon() noexcept;

  Publisher* owner_ = nullptr;
  std::uint64_t version_ = 0;
  std::uint32_t slot_ = 0;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint32_t revoked_ = 0;
  std::chrono::steady_clock::time_point started_;
};

class Publisher {
 public:
  static Result<std::unique_ptr<Publisher>> create(WeightLayout layout, PublisherOptions options = {});
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  const WeightLayout& layout() const noexcept;
  // "host:port" that subscribers pass to Subscriber::connect().
  std::string address() const;
  std::uint16_t port() const noexcept;
  std::size_t slot_count() const noexcept;
  // Who allocated the slots: "memfd" or "ucx" (PublisherOptions::slot_allocator).
  const std::string& slot_allocator() const noexcept;
  // What create() resolved: every publisher setting with where it came from,
  // as describe_settings() reports it (weightsync/settings.h).
  std::vector<SettingReport> settings() const;

  // Copies each named tensor into a free slot and commits `version`. Every
  // tensor of the layout must be given exactly once with its exact size.
  Result<PublishResult> publish(std::uint64_t version, const std::vector<TensorSource>& tensors);
  // Copies one contiguous image of the region (layout().total_bytes() bytes,
  // packed as the layout says) and commits `version`.
  Result<PublishResult> publish(std::uint64_t version, const void* data, std::size_t bytes);
  // Reserves a free slot for in-place writing of `version`.
  Result<SlotWriter> begin_publish(std::uint64_t version);

  // Device publish (see the contract above): `device_data` is CUDA memory on
  // the current device holding one contiguous image (layout().total_bytes()),
  // or one device pointer per tensor. `cuda_stream` is a cudaStream_t whose
  // queued work produces the bytes (nullptr: the legacy default stream).
  // Returns once the copy is enqueued; PublishResult of the commit comes from
  // flush_device_publishes().
  Result<PublishTicket> publish_from_device(std::uint64_t version, const void* device_data, std::size_t bytes,
                                            void* cuda_stream = nullptr);
  Result<PublishTicket> publish_from_device(std::uint64_t version, const std::vector<TensorSource>& tensors,
                                            void* cuda_stream = nullptr);
  // Makes `cuda_stream` wait, on the device (the host does not block), until
  // the last device publish has copied its sources: enqueue it before work
  // that overwrites them (the next optimizer step). OK at once if none was
  // ever enqueued.
  Status order_after_device_publish(void* cuda_stream = nullptr);
  // Waits until the in-flight device publish (if any) is committed or failed.
  // Returns its result (copy_seconds: enqueue to commit), kNotReady if none
  // was ever enqueued, or kTimeout.
  Result<PublishResult> flush_device_publishes(std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // 0 before the first commit.
  std::uint64_t latest_version() const noexcept;
  PublisherStats stats() const;

  class Impl;

 private:
  friend class SlotWriter;
  friend class AdapterPublisher;
  explicit Publisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightsync
