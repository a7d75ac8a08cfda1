// ShardIndex (sharding/shard_index.h): global tensors by name, trainer shards
// resolved (expert lists into runs), grouped into replicas, checked
// disjoint, and sorted for lookup by binary search.
#include "sharding/shard_index.h"

#include <algorithm>

#include "sharding/experts.h"
#include "sharding/name_set.h"

namespace weightsync::detail {

namespace {

Status invalid(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "routing plan: " + why);
}

std::string shard_what(std::size_t rank, const TrainerShard& shard) {
  return "trainer rank " + std::to_string(rank) + "'s shard '" + shard.local_name + "' of tensor '" +
         shard.tensor + "'";
}

// A box one shard holds, before grouping.
struct ShardBox {
  ResolvedBox box;
  ShardHolder holder;
  const TrainerShard* shard = nullptr;
};

// Orders boxes by start along `key` first, then the other starts and the
// sizes (equal boxes become neighbours), then by trainer rank and position.
struct BoxOrder {
  std::size_t key = 0;
  bool operator()(const ShardBox& a, const ShardBox& b) const {
    if (a.box.start[key] != b.box.start[key]) return a.box.start[key] < b.box.start[key];
    for (std::size_t d = 0; d < a.box.rank; ++d) {
      if (a.box.start[d] != b.box.start[d]) return a.box.start[d] < b.box.start[d];
    }
    for (std::size_t d = 0; d < a.box.rank; ++d) {
      if (a.box.size[d] != b.box.size[d]) return a.box.size[d] < b.box.size[d];
    }
    if (a.holder.rank != b.holder.rank) return a.holder.rank < b.holder.rank;
    return a.holder.position < b.holder.position;
  }
};

// A tensor's boxes while the source is read.
struct PendingTensor {
  IndexedTensor* entry = nullptr;
  std::vector<ShardBox> boxes;
  bool has_expert_dim = false;
};

// The boxes of one shard (one, or one per run of experts) into `pending`.
Status add_shard(const TrainerShard& shard, std::size_t rank, std::size_t position, PendingTensor* pending,
                 std::deque<Dims>* local_shapes, std::vector<ExpertRun>* runs) {
  const GlobalTensor& global = *pending->entry->tensor;
  ShardBox added;
  added.shard = &shard;
  added.holder = ShardHolder{rank, position, &shard.local_name, nullptr, 0, 0};
  Status valid = resolve_box(shard.box, global.shape, &added.box);
  if (!valid.ok()) return invalid(shard_what(rank, shard) + " " + valid.message());
  if (shard.experts.empty()) {  // the local tensor is the box
    pending->boxes.push_back(added);
    return Status();
  }
  valid = check_experts(shard.experts, shard.expert_dim, global.shape, added.box);
  if (!valid.ok()) return invalid(shard_what(rank, shard) + " " + valid.message());
  if (!pending->has_expert_dim) pending->entry->key_dim = shard.expert_dim;
  pending->has_expert_dim = true;
  local_shapes->push_back(added.box.size);
  local_shapes->back()[shard.expert_dim] = static_cast<std::int64_t>(shard.experts.size());
  added.holder.local_shape = &local_shapes->back();
  added.holder.expert_dim = shard.expert_dim;
  expert_runs(shard.experts, runs);
  const ResolvedBox whole = added.box;
  for (const ExpertRun& run : *runs) {
    added.box = run_box(whole, shard.expert_dim, run);
    added.holder.local_offset = run.local;
    pending->boxes.push_back(added);
  }
  return Status();
}

// Groups equal boxes (sorted neighbours) into replicas and checks that the
// groups are disjoint: a box is compared only with the groups after it that
// start before its end along key_dim.
Status finish_tensor(PendingTensor* pending) {
  IndexedTensor& entry = *pending->entry;
  // Sort positions, not the boxes themselves (a few hundred bytes each).
  std::vector<std::uint32_t> order(pending->boxes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  const BoxOrder before{entry.key_dim};
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return before(pending->boxes[a], pending->boxes[b]); });
  entry.groups.reserve(pending->boxes.size());
  entry.starts.reserve(pending->boxes.size());
  std::vector<const TrainerShard*> shard_of;  // of each group's first holder, for messages
  shard_of.reserve(pending->boxes.size());
  for (std::uint32_t i : order) {
    const ShardBox& b = pending->boxes[i];
    if (!entry.groups.empty() && same_box(entry.groups.back().box, b.box)) {
      entry.groups.back().replicas.push_back(b.holder);
      continue;
    }
    entry.groups.push_back(ShardGroup{b.box, b.holder, {}});
    entry.starts.push_back(b.box.start[entry.key_dim]);
    shard_of.push_back(b.shard);
    entry.max_key_size = std::max(entry.max_key_size, b.box.size[entry.key_dim]);
  }
  const std::size_t key = entry.key_dim;
  ResolvedBox common;
  for (std::size_t i = 0; i < entry.groups.size(); ++i) {
    const ResolvedBox& a = entry.groups[i].box;
    for (std::size_t j = i + 1; j < entry.groups.size(); ++j) {
      const ResolvedBox& b = entry.groups[j].box;
      if (b.start[key] >= a.start[key] + a.size[key]) break;
      if (!intersect(a, b, &common)) continue;
      return invalid(shard_what(entry.groups[j].first.rank, *shard_of[j]) + " holds box " + describe_box(b) +
                     ", which overlaps trainer rank " + std::to_string(entry.groups[i].first.rank) +
                     "'s shard '" + *entry.groups[i].first.local_name + "' " + describe_box(a) +
                     " of the same tensor without being equal to it; shards of a tensor must be disjoint or "
                     "identical (replicas)");
    }
  }
  return Status();
}

}  // namespace

Status check_tensor(DType dtype, const Shape& shape) {
  const auto refuse = [](const std::string& why) { return Status(ErrorCode::kInvalidArgument, why); };
  if (dtype_size(dtype) == 0) return refuse("has an unknown dtype");
  if (shape.size() > kMaxRank) {
    return refuse("has " + std::to_string(shape.size()) + " dimensions, more than " +
                  std::to_string(kMaxRank));
  }
  std::uint64_t numel = 0;
  std::uint64_t bytes = 0;
  if (!checked_numel(shape, &numel) || __builtin_mul_overflow(numel, dtype_size(dtype), &bytes)) {
    return refuse(
        "has a zero or negative dimension or more bytes than fit in 64 bits; give it a positive shape");
  }
  return Status();
}

std::pair<std::size_t, std::size_t> IndexedTensor::candidates(std::int64_t start, std::int64_t size) const {
  const std::int64_t lowest = start - max_key_size + 1;  // a group starting before it ends before `start`
  const auto first = std::lower_bound(starts.begin(), starts.end(), lowest);
  const auto last = std::lower_bound(first, starts.end(), start + size);
  return {static_cast<std::size_t>(first - starts.begin()), static_cast<std::size_t>(last - starts.begin())};
}

const IndexedTensor* ShardIndex::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<ShardIndex> ShardIndex::build(const ShardedSource& source) {
  ShardIndex index;
  std::vector<PendingTensor> pending;  // by position in source.tensors
  index.tensors_.reserve(source.tensors.size());
  pending.reserve(source.tensors.size());
  for (const auto& tensor : source.tensors) {
    if (tensor.name.empty()) return invalid("a global tensor has an empty name; name every tensor");
    Status valid = check_tensor(tensor.dtype, tensor.shape);
    if (!valid.ok()) return invalid("global tensor '" + tensor.name + "' " + valid.message());
    auto [it, added] =
        index.tensors_.emplace(tensor.name, IndexedTensor{&tensor, pending.size(), {}, {}, 0, 0});
    if (!added) {
      return invalid("global tensor '" + tensor.name +
                     "' is listed twice in ShardedSource::tensors; list each once");
    }
    pending.push_back(PendingTensor{&it->second, {}, false});
  }
  std::vector<ExpertRun> runs;
  for (std::size_t rank = 0; rank < source.ranks.size(); ++rank) {
    NameSet local_names(source.ranks[rank].size());
    for (std::size_t position = 0; position < source.ranks[rank].size(); ++position) {
      const TrainerShard& shard = source.ranks[rank][position];
      auto entry = index.tensors_.find(shard.tensor);
      if (entry == index.tensors_.end()) {
        return invalid(shard_what(rank, shard) + " names an unknown global tensor; add '" + shard.tensor +
                       "' to ShardedSource::tensors");
      }
      if (shard.local_name.empty()) {
        return invalid(shard_what(rank, shard) + " has an empty local_name; name it as in the rank's layout");
      }
      if (!local_names.insert(shard.local_name)) {
        return invalid(
            shard_what(rank, shard) +
            " reuses the local name of another shard of that rank; give each a distinct local_name");
      }
      Status added =
          add_shard(shard, rank, position, &pending[entry->second.position], &index.local_shapes_, &runs);
      if (!added.ok()) return added;
    }
  }
  for (PendingTensor& tensor : pending) {  // in the source's order: the first error is deterministic
    Status finished = finish_tensor(&tensor);
    if (!finished.ok()) return finished;
  }
  return index;
}

}  // namespace weightsync::detail
