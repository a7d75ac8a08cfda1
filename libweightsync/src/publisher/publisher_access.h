// PublisherAccess: library-internal hooks into a Publisher for relays
// (src/relay/). Not part of the public API.
//
// A relay learns the version number it forwards from its upstream's lease,
// and the end-to-end checksum with it, only once the pull is done. So it
// reserves a slot with begin_publish(v) for the version it was told of, pulls
// straight into the slot, and then commits the slot as the version actually
// delivered (never below v) with the upstream's checksum, not a hash of its own.
//
// Threads: the publishing thread only (like SlotWriter). Errors: kInvalidArgument
// for a spent writer or a version below the reserved one (the slot is then
// abandoned).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/publisher.h"

namespace weightsync::detail {

struct PublisherAccess {
  // Commits `writer`'s slot as `version` (>= writer.version()). `checksum`:
  // the upstream's end-to-end value, stored as is when this publisher serves
  // checksums; nullopt makes a publisher that serves checksums hash the slot
  // itself (an upstream without checksums). Ignored when it serves none.
  static Result<PublishResult> commit_as(SlotWriter& writer, std::uint64_t version,
                                         std::optional<std::uint64_t> checksum);
  // Pipelined relays: expose the writer's slot to streaming readers as
  // `version` (the upstream's, > the latest committed; it may differ from
  // the reserved one, and commit_as must then use it). The relay writes the
  // slot once, in order, and advances the watermark as bytes land;
  // abandoning the writer revokes the streaming leases.
  static Status begin_streaming(SlotWriter& writer, std::uint64_t version);
  static void advance_watermark(SlotWriter& writer, std::uint64_t bytes);
  // A relay whose forwarding stopped for good: leaves asking for a version
  // are refused with kConnectionLost and `why` from now on (SlotRing::retire).
  // Any thread.
  static void retire(Publisher& publisher, const std::string& why);
  // Whether the publisher serves checksums (resolved option).
  static bool serves_checksums(const Publisher& publisher);
  // Serves the trainer's signature block of `version` as the upstream served
  // it (nullopt: the upstream served none for it). Call it before committing
  // `version`, so a leaf never finds the version without its block.
  static void forward_signature(Publisher& publisher, std::uint64_t version,
                                std::optional<std::vector<std::uint8_t>> block);
  // Marks a relay's publisher as one that forwards signatures, so it offers
  // FETCH_SIGNATURE in SLOT_TABLE. Call right after Publisher::create.
  static void enable_signature_forwarding(Publisher& publisher);
};

}  // namespace weightsync::detail
