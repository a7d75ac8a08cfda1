// Read plans: which bytes of a slot land where. The subscriber builds a plan
// from its destination and the layout; a transport (transport/data_channel.h)
// reads it out of a leased slot, and delta/ applies deltas to it in place.
//
// Contract: plain data, no ownership: `dest` points into the caller's memory
// (host or CUDA), which must outlive the read.
#pragma once

#include <cstdint>

namespace weightsync::detail {

// One contiguous piece of a pull: `length` bytes at `slot_offset` in the slot
// land at `dest`. A plan (a std::vector<ReadPiece>) lists pieces in
// increasing slot_offset order.
struct ReadPiece {
  std::uint64_t slot_offset = 0;
  std::uint64_t length = 0;
  void* dest = nullptr;
};

}  // namespace weightsync::detail
