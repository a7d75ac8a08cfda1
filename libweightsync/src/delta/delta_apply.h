// Applying a chain of deltas (DELTA) in place to a destination that holds the
// chain's first version, and hashing the result for the caller to check
// against the last link's checksum.
//
// Contract: any thread; the caller owns the buffers (kept between pulls to
// avoid reallocating two image-sized buffers). A link that does not decode is
// kProtocolError; the destination may then hold a mix of versions (pull in
// full). Host memory only. Each link costs a slot-sized decode and XOR: the
// caller bounds the number of links (kMaxDeltaChainApplied), and
// `before_link`, called before each link, may stop the chain (cancellation,
// a deadline): its error is returned as is, the destination then holding the
// links applied so far.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/checksum.h"
#include "ring/read_plan.h"
#include "weightsync/status.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct DeltaApplyBuffers {
  std::vector<std::uint8_t> xor_image;
  std::vector<std::uint8_t> scratch;
};

// `compressed` holds the links' bytes in order; `pieces` is a whole plan
// (every tensor once, in layout order). Returns the xxHash3 of the pieces'
// bytes after the last link, in order (the keyed tag with `key`).
Result<std::uint64_t> apply_delta_chain(const DeltaMsg& chain, const std::vector<std::uint8_t>& compressed,
                                        std::uint64_t image_bytes, const std::vector<ReadPiece>& pieces,
                                        DeltaApplyBuffers& buffers,
                                        const std::shared_ptr<const VersionKey>& key = nullptr,
                                        const std::function<Status(std::size_t link)>& before_link = {});

}  // namespace weightsync::detail
