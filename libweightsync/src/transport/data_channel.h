// DataChannel: the subscriber side of a data transport. A channel reads the
// byte ranges of a leased slot straight into the caller's memory and reports
// the slot's seqlock stamp as observed after the last byte was read.
//
// Every transport must (docs/consistency.md): read only inside the slot
// (bounds checked on the publisher too), deliver bytes in plan order through
// on_bytes (for streaming checksums and progress), never hold a lease past the
// call, and bound every wait by stall_ms. A channel is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ring/read_plan.h"
#include "weightsync/status.h"

namespace weightsync::detail {

struct ReadRequest {
  std::uint64_t lease_id = 0;
  std::uint32_t slot = 0;
  std::uint64_t stamp = 0;  // the stamp the lease was granted with
  const std::vector<ReadPiece>* plan = nullptr;
  std::function<void(const void*, std::size_t)> on_bytes;
  // on_bytes hashes the bytes: deliver them in cache-sized pieces, so they
  // are hashed while still in cache. Otherwise transports that copy may use
  // large pieces (glibc's memcpy switches to non-temporal stores above a
  // few MiB, which is faster when nothing reads the bytes right after).
  bool hashing = false;
  int stall_ms = 10000;
  // False once the publisher is known to be gone (its control connection
  // hung up). One-sided transports that cannot see peer failure themselves
  // ask it while they wait, so a dead publisher is an error at once.
  std::function<bool()> peer_alive;
};

class DataChannel {
 public:
  virtual ~DataChannel() = default;
  virtual const char* name() const = 0;
  // The stamp observed after the read. kVersionRevoked if the publisher
  // refused the read because the slot was taken back; connection errors are
  // kConnectionLost / kTimeout / kProtocolError.
  virtual Result<std::uint64_t> read(const ReadRequest& request) = 0;
  // Best-effort goodbye before closing.
  virtual void close() = 0;
  // Memory registrations this channel made (destinations are registered on
  // first use only; a steady pull loop adds none).
  virtual std::uint64_t registrations() const { return 0; }
  // Channels that read into registered memory (ucx's get path, verbs; see
  // transport/registration_cache.h): register a region once, drop the
  // registrations overlapping a range, count those dropped, and bump
  // registration_generation() on every drop. Others: nothing to do.
  virtual Status register_region(void* /*base*/, std::size_t /*bytes*/) { return Status(); }
  virtual std::size_t release_region(void* /*base*/, std::size_t /*bytes*/) { return 0; }
  virtual std::uint64_t released_registrations() const { return 0; }
  virtual std::uint64_t registration_generation() const { return 0; }
  // Whether plan pieces may point into CUDA device memory. Channels that
  // cannot write it read into host staging chunks instead, behind a
  // StagingChannel (transport/staging_channel.h).
  virtual bool writes_device_memory() const { return false; }
  // The newest committed version this channel can see without a round trip
  // (shm: the mapped stamp page), or nullopt if it cannot tell. Only ever a
  // hint for "nothing newer" (a pull that finds nothing asks no publisher);
  // leases still come from the publisher.
  virtual std::optional<std::uint64_t> newest_committed() const { return std::nullopt; }
};

}  // namespace weightsync::detail
