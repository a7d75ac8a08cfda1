// Expert lists (sharding/experts.h) and ExpertMap::contiguous.
#include "sharding/experts.h"

#include <algorithm>
#include <string>

namespace weightsync {

ExpertMap ExpertMap::contiguous(std::int64_t experts, std::size_t ranks) {
  ExpertMap map;
  map.experts = experts;
  map.ranks.resize(ranks);
  if (ranks == 0 || experts <= 0) return map;
  // Rank r starts at r * q + min(r, E % R): the first E % R ranks hold one more.
  const auto n = static_cast<std::int64_t>(ranks);
  const std::int64_t q = experts / n, rem = experts % n;
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t first = r * q + std::min(r, rem);
    const std::int64_t count = q + (r < rem ? 1 : 0);
    auto& list = map.ranks[static_cast<std::size_t>(r)];
    list.reserve(static_cast<std::size_t>(count));
    for (std::int64_t e = first; e < first + count; ++e) list.push_back(e);
  }
  return map;
}

namespace detail {

Status check_experts(const std::vector<std::int64_t>& experts, std::size_t expert_dim, const Shape& shape,
                     const ResolvedBox& box) {
  const auto refuse = [](const std::string& why) { return Status(ErrorCode::kInvalidArgument, why); };
  if (expert_dim >= shape.size()) {
    return refuse("has expert_dim " + std::to_string(expert_dim) + " but its tensor has " +
                  std::to_string(shape.size()) + " dimensions; name the dimension that stacks the experts");
  }
  const std::int64_t count = shape[expert_dim];
  if (box.start[expert_dim] != 0 || box.size[expert_dim] != count) {
    return refuse("has an expert list and a box " + describe_box(box) +
                  " that does not span the whole expert dimension " + std::to_string(expert_dim) +
                  " (0:" + std::to_string(count) +
                  "); the list selects the experts, the box only the other dimensions");
  }
  for (std::int64_t id : experts) {
    if (id < 0 || id >= count) {
      return refuse("lists expert " + std::to_string(id) + ", outside [0, " + std::to_string(count) +
                    "); list only experts the tensor has");
    }
  }
  // Duplicates by sorting a copy: memory in the list's length, never in E
  // (a tensor may claim 2^40 experts).
  std::vector<std::int64_t> sorted(experts);
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) {
    return refuse("lists expert " + std::to_string(*twice) +
                  " twice; list each expert once (every byte is read once per destination)");
  }
  return Status();
}

void expert_runs(const std::vector<std::int64_t>& experts, std::vector<ExpertRun>* out) {
  out->clear();
  for (std::size_t i = 0; i < experts.size(); ++i) {
    if (!out->empty() && out->back().first + out->back().length == experts[i]) {
      ++out->back().length;
    } else {
      out->push_back(ExpertRun{experts[i], static_cast<std::int64_t>(i), 1});
    }
  }
}

ResolvedBox run_box(const ResolvedBox& box, std::size_t expert_dim, const ExpertRun& run) {
  ResolvedBox narrowed = box;
  narrowed.start[expert_dim] = run.first;
  narrowed.size[expert_dim] = run.length;
  return narrowed;
}

}  // namespace detail

}  // namespace weightsync
