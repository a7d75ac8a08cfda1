// ShardIndex: the trainer side of a routing plan (docs/sharding.md): the
// global tensors by name, and for each, its trainer shards as groups of
// equal boxes (replicas), pairwise disjoint, sorted so that the groups a box
// meets are found by binary search along one dimension (the expert
// dimension for expert tensors, else 0) instead of by trying every group.
//
// An expert shard (TrainerShard::experts) adds one box per run of
// consecutive experts (sharding/experts.h), each with its place in the
// shard's local tensor, so a trainer rank may hold any subset of experts in
// any local order.
//
// Contract: build() validates the source and refuses with kInvalidArgument
// naming the shard (unknown tensors, bad boxes or expert lists, shards that
// overlap without being equal). The index views names and shards of the
// ShardedSource, which must outlive it. Read-only after build(): const
// methods are thread-safe.
#pragma once

#include <deque>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sharding/box_geometry.h"

namespace weightsync::detail {

// One trainer rank's copy of a box: rank, the local tensor's position in its
// layout, name and shape, and where the box's first element lies in it (at
// local_offset along expert_dim, 0 along the others). Small: a plan over
// hundreds of experts holds one per run of experts.
struct ShardHolder {
  std::size_t rank = 0;
  std::size_t position = 0;
  const std::string* local_name = nullptr;
  const Dims* local_shape = nullptr;  // owned by the ShardIndex; null: the group's box size
  std::size_t expert_dim = 0;
  std::int64_t local_offset = 0;

  std::int64_t local_at(std::size_t d) const { return d == expert_dim ? local_offset : 0; }
};

// Shards of one tensor with the same box: replicas, in trainer rank order.
struct ShardGroup {
  ResolvedBox box;
  ShardHolder first;
  std::vector<ShardHolder> replicas;  // the others, usually none

  const ShardHolder& holder_for(std::size_t engine_rank) const {
    const std::size_t k = engine_rank % (replicas.size() + 1);
    return k == 0 ? first : replicas[k - 1];
  }
};

struct IndexedTensor {
  const GlobalTensor* tensor = nullptr;
  std::size_t position = 0;          // in ShardedSource::tensors
  std::vector<ShardGroup> groups;    // pairwise disjoint, sorted by start along key_dim
  std::vector<std::int64_t> starts;  // groups[i].box.start[key_dim], for the binary search
  std::size_t key_dim = 0;
  std::int64_t max_key_size = 0;  // the largest group's size along key_dim

  // The groups whose start along key_dim could lie within a box starting at
  // `start` of `size` along it: [first, last) of `groups`.
  std::pair<std::size_t, std::size_t> candidates(std::int64_t start, std::int64_t size) const;
};

// A dtype and shape a plan can handle; otherwise kInvalidArgument whose
// message is a predicate for the caller to put after the tensor's name.
Status check_tensor(DType dtype, const Shape& shape);

class ShardIndex {
 public:
  static Result<ShardIndex> build(const ShardedSource& source);
  // The tensor named `name`, or null.
  const IndexedTensor* find(std::string_view name) const;

 private:
  // Keys view the names in ShardedSource::tensors.
  std::unordered_map<std::string_view, IndexedTensor> tensors_;
  std::deque<Dims> local_shapes_;  // one per expert shard; holders point here
};

}  // namespace weightsync::detail
