// The "ucx" offer blob in SLOT_TABLE (versioned, opaque to everything but
// this transport): the publisher worker's address and, for every slot and
// for the stamp page, its remote address, length and packed rkey.
#pragma once

#include <cstdint>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

struct UcxRegion {
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::vector<std::uint8_t> rkey;
};

struct UcxOffer {
  static constexpr std::uint16_t kVersion = 1;
  std::vector<std::uint8_t> worker_address;
  std::vector<UcxRegion> slots;
  UcxRegion stamps;
  std::vector<std::uint8_t> encode() const;
  static Result<UcxOffer> decode(const std::vector<std::uint8_t>& blob);
};

}  // namespace weightsync::detail
