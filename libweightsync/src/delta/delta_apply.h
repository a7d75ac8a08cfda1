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

namespace weightsync::detail {

// A decoded chain, what applying it needs of each link: the versions it
// goes between (for errors) and its compressed size. The subscriber builds it
// from DELTA (wire/messages.h: DeltaMsg, whose decode checked the chain).
struct DeltaChainLink {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint64_t bytes = 0;  // compressed size
};
struct DeltaChain {
  std::uint8_t element_bytes = 1;  // 1, 2, 4 or 8 (delta/delta_codec.h)
  std::vector<DeltaChainLink> links;
};

struct DeltaApplyBuffers {
  std::vector<std::uint8_t> xor_image;
  std::vector<std::uint8_t> scratch;
};

// `compressed` holds the links' bytes in order (exactly the sum of their
// sizes, else kInternal); `pieces` is a whole plan (every tensor once, in
// layout order). Returns the xxHash3 of the pieces' bytes after the last
// link, in order (the keyed tag with `key`).
Result<std::uint64_t> apply_delta_chain(const DeltaChain& chain, const std::vector<std::uint8_t>& compressed,
                                        std::uint64_t image_bytes, const std::vector<ReadPiece>& pieces,
                                        DeltaApplyBuffers& buffers,
                                        const std::shared_ptr<const VersionKey>& key = nullptr,
                                        const std::function<Status(std::size_t link)>& before_link = {});

}  // namespace weightsync::detail
