// Boxes of row-major tensors: resolving and validating a Box against its
// tensor's shape, intersecting two boxes, volumes, and the strided byte runs
// that copy a box of one tensor into a box of another (the TensorSlice form:
// `count` equal ranges `stride` bytes apart).
//
// Contract
// - A ResolvedBox has one start and one size per dimension of its tensor (at
//   most kMaxRank, in fixed storage: a plan handles tens of thousands of boxes
//   without allocating), sizes > 0, and lies inside its tensor. resolve_box()
//   is the only way one is made from user input.
// - The functions after resolve_box() take resolved boxes and shapes whose
//   byte sizes fit in 64 bits (RoutingPlan::compute() checks).
// - Pure functions of their arguments; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/sharding.h"

namespace weightsync::detail {

using Shape = std::vector<std::int64_t>;

constexpr std::size_t kMaxRank = WeightLayout::kMaxDims;
using Dims = std::array<std::int64_t, kMaxRank>;

struct ResolvedBox {
  std::size_t rank = 0;
  Dims start{};
  Dims size{};
};

// Sets `resolved` to `box` with explicit start/size (Box::whole() becomes
// [0, shape)), or returns kInvalidArgument if it is not a non-empty box inside
// `shape` or `shape` has more than kMaxRank dimensions. The message is a
// predicate ("has an empty box ...") for the caller to put after the box's name.
Status resolve_box(const Box& box, const Shape& shape, ResolvedBox* resolved);

// Elements of a tensor of this shape; false if that overflows 64 bits or a
// dimension is not positive.
bool checked_numel(const Shape& shape, std::uint64_t* numel);
// Elements of a box (product of its sizes; no overflow check).
std::uint64_t box_volume(const ResolvedBox& box);

// The common part of two boxes of the same rank; false if it is empty.
bool intersect(const ResolvedBox& a, const ResolvedBox& b, ResolvedBox* common);
bool same_box(const ResolvedBox& a, const ResolvedBox& b);
// "[start:end, ...]" per dimension.
std::string describe_box(const ResolvedBox& box);

// One strided run (TensorSlice form), offsets in bytes from each tensor's start.
struct StridedRun {
  std::uint64_t src_offset = 0;
  std::uint64_t dest_offset = 0;
  std::uint64_t length = 0;  // bytes per range
  std::uint64_t count = 1;
  std::uint64_t src_stride = 0;   // 0 when count == 1
  std::uint64_t dest_stride = 0;  // 0 when count == 1
};

// Copying a region of `extent` elements per dimension that starts at
// `src_start` in a row-major tensor of shape `src_shape` and lands at
// `dest_start` in one of shape `dest_shape` (all of `rank` dimensions;
// elements of `element_bytes`).
struct RegionCopy {
  std::size_t rank = 0;
  Dims src_shape{};
  Dims src_start{};
  Dims dest_shape{};
  Dims dest_start{};
  Dims extent{};
  std::uint64_t element_bytes = 0;
};

// Appends the runs of `copy` to `out`: the innermost dimensions over which
// the region is contiguous in both tensors make one range; the next dimension
// out is the strided one (count, stride, dest_stride); dimensions further out
// give one run per index. Size-1 dimensions never break contiguity.
void append_strided_runs(const RegionCopy& copy, std::vector<StridedRun>* out);

}  // namespace weightsync::detail
