// The verbs transport's blobs (versioned, opaque to everything else):
// - the offer in SLOT_TABLE: every slot's and the stamp page's address,
//   length and rkey;
// - the endpoint blob exchanged both ways in TRANSPORT_CONNECT/ACCEPT: an RC
//   queue pair's number, starting PSN, port LID and GID.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "weightsync/status.h"

namespace weightsync::detail {

struct VerbsRegion {
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::uint32_t rkey = 0;
};

struct VerbsOffer {
  static constexpr std::uint16_t kVersion = 1;
  std::vector<VerbsRegion> slots;
  VerbsRegion stamps;
  std::vector<std::uint8_t> encode() const;
  static Result<VerbsOffer> decode(const std::vector<std::uint8_t>& blob);
};

struct VerbsEndpoint {
  static constexpr std::uint16_t kVersion = 1;
  std::uint32_t qp_num = 0;
  std::uint32_t psn = 0;
  std::uint16_t lid = 0;
  std::array<std::uint8_t, 16> gid{};
  std::uint32_t mtu = 0;  // enum ibv_mtu value
  std::vector<std::uint8_t> encode() const;
  static Result<VerbsEndpoint> decode(const std::vector<std::uint8_t>& blob);
};

}  // namespace weightsync::detail
