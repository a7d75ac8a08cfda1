// Expert lists of trainer shards and destination pieces (weightsync/sharding.h,
// "Mixture-of-experts tensors"): their validation, and the runs of
// consecutive experts in consecutive local positions that each become one box.
//
// Contract: pure functions of their arguments; thread-safe. check_experts()
// is the only check an expert list gets: callers resolve the box first and
// pass it here before using expert_runs().
#pragma once

#include <cstdint>
#include <vector>

#include "sharding/box_geometry.h"

namespace weightsync::detail {

// A run of `length` experts: global ids first .. first + length - 1 at local
// positions local .. local + length - 1 along the expert dimension.
struct ExpertRun {
  std::int64_t first = 0;
  std::int64_t local = 0;
  std::int64_t length = 0;
};

// OK if `experts` is a valid list for a box `box` of a tensor of `shape`:
// expert_dim < rank, every id in [0, shape[expert_dim]) and listed once, and
// the box spans the whole expert dimension. Otherwise kInvalidArgument whose
// message is a predicate for the caller to put after the shard or piece's name.
Status check_experts(const std::vector<std::int64_t>& experts, std::size_t expert_dim, const Shape& shape,
                     const ResolvedBox& box);

// The maximal runs of `experts` (a list check_experts() accepted), in local
// order, into `out` (cleared first).
void expert_runs(const std::vector<std::int64_t>& experts, std::vector<ExpertRun>* out);

// `box` narrowed to one run: its expert dimension becomes the run's experts.
ResolvedBox run_box(const ResolvedBox& box, std::size_t expert_dim, const ExpertRun& run);

}  // namespace weightsync::detail
