// weightsync/sharding.h: routing plans from a sharded trainer to a sharded
// inference engine, computed once and replayed every step (docs/sharding.md).
//
// The model's tensors are *global* tensors (GlobalTensor). The trainer holds
// them over R ranks: each rank publishes its own WeightLayout (one Publisher
// per rank) whose tensors are *boxes* of global tensors (a hyper-rectangle:
// an FSDP dim-0 shard, a Megatron row or column split, a whole tensor of a
// pipeline stage, a replica). The engine has G ranks; each rank has
// destination tensors, each made of one or more pieces, each piece a box of
// a global tensor placed at an origin inside the destination tensor (a
// tensor-parallel slice; a fused QKV or gate/up tensor has several pieces).
//
// RoutingPlan::compute() intersects every destination piece with every
// trainer shard of the same global tensor and emits, for each (engine rank,
// trainer rank), the reads that move those bytes: each a strided run of
// equal ranges (TensorSlice form), so a column slice is one read, not one per
// row. Binding a plan to the engine rank's buffers gives one Destination per
// trainer rank (Destination::slices) for SubscriberGroup::pull().
//
// Contract
// - compute() checks, and refuses with kInvalidArgument naming the tensor:
//   unknown global tensors, boxes outside their tensor, a trainer shard or
//   destination piece whose dtype differs from the global tensor's (the plan
//   never converts dtypes), a destination tensor not covered exactly (every
//   element by exactly one piece), a piece some part of which no trainer rank
//   holds, and trainer shards of one tensor that overlap without being equal
//   (equal boxes are replicas: each piece reads a replica chosen round-robin
//   by engine rank, to spread the load). For expert lists: expert_dim out of
//   range, an id outside [0, E) or listed twice in one list, or a box that
//   does not span the whole expert dimension.
// - What a plan does not do: convert dtypes, transpose, quantize, pad (a
//   vocabulary padded to a multiple of the TP degree needs its own piece),
//   or re-shard non-box layouts (interleaved heads: describe each head's box
//   as its own piece). Tensors are row-major and dense.
// - A plan is plain data: compute it once, copy it anywhere; const methods are
//   thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "weightsync/layout.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"

namespace weightsync {

// A tensor of the whole model, unsharded.
struct GlobalTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
};

// A hyper-rectangle of a global tensor: for each dimension d, the elements
// [start[d], start[d] + size[d]). Empty start and size: the whole tensor.
struct Box {
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> size;

  static Box whole();
  // The `index`-th of `parts` equal blocks along `dim` of a tensor of `shape`
  // (shape[dim] % parts must be 0, else compute() refuses it).
  static Box split(const std::vector<std::int64_t>& shape, std::size_t dim, std::int64_t parts,
                   std::int64_t index);
};

// Which experts each rank holds, and in which local order: ranks[r] lists the
// global expert ids of rank r, local index i holding expert ranks[r][i].
// Trainer expert parallelism (EP) and an engine's placement (an EPLB
// rebalance changes it) are both ExpertMaps; an engine may hold an expert on
// several ranks (redundant experts).
struct ExpertMap {
  std::int64_t experts = 0;                      // E: experts per expert tensor
  std::vector<std::vector<std::int64_t>> ranks;  // ranks[r]: global ids in local order

  // Rank r holds the r-th of R contiguous runs of experts, in order
  // (Megatron's EP layout: [r * E / R, (r + 1) * E / R) when R divides E; else
  // the first E % R ranks hold one more). With R > E some ranks hold none:
  // give such a rank no shard of the tensor (an empty `experts` list means
  // "not an expert shard": the box alone, all experts). Like any function
  // returning a container, it may let std::bad_alloc through (E in the billions).
  static ExpertMap contiguous(std::int64_t experts, std::size_t ranks);
};

// What one trainer rank holds of one global tensor, under `local_name` in its
// layout (a row-major tensor of shape box.size; with `experts`, box.size with
// experts.size() along expert_dim).
struct TrainerShard {
  std::string tensor;      // global name
  std::string local_name;  // name in this rank's WeightLayout
  Box box;
  // Expert parallelism: the experts of this shard along `expert_dim`, in local
  // order; empty: none (the box alone says what the shard holds).
  std::vector<std::int64_t> experts;
  std::size_t expert_dim = 0;
};

struct ShardedSource {
  std::vector<GlobalTensor> tensors;
  std::vector<std::vector<TrainerShard>> ranks;  // ranks[r]: trainer rank r's shards

  // The WeightLayout trainer rank r publishes: its shards in order, each
  // named local_name, with the global tensor's dtype and the box's shape.
  Result<WeightLayout> rank_layout(std::size_t rank,
                                   std::size_t alignment = WeightLayout::kDefaultAlignment) const;
};

// One piece of a destination tensor: box `from` of global tensor `tensor`,
// placed with its first element at `at` (one index per dimension of the
// destination tensor; the piece has the destination tensor's rank, sizes
// from.size).
// With `experts`, the piece is, for each i, expert experts[i] of box `from`
// (which spans the whole expert dimension) placed at `at` plus i along
// expert_dim: an engine rank's [local_experts, ...] tensor in its map's order
// is one piece (or one per fused part: gate and up side by side).
struct DestinationPiece {
  std::string tensor;  // global name
  Box from;
  std::vector<std::int64_t> at;
  std::vector<std::int64_t> experts;  // global expert ids in local order; empty: none
  std::size_t expert_dim = 0;
};

// A tensor in an engine rank's memory, row-major, made of pieces.
struct DestinationTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
  std::vector<DestinationPiece> pieces;

  std::uint64_t bytes() const;
};

struct ShardedTarget {
  std::vector<std::vector<DestinationTensor>> ranks;  // ranks[g]: engine rank g's tensors
};

// One strided read: `count` ranges of `length` bytes at `offset + i * stride`
// of the trainer rank's local tensor `source`, landing at `dest_offset + i *
// dest_stride` bytes into destination tensor `dest`.
struct PlannedRead {
  std::string source;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t count = 1;
  std::uint64_t stride = 0;
  std::string dest;
  std::uint64_t dest_offset = 0;
  std::uint64_t dest_stride = 0;
};

class RoutingPlan {
 public:
  static Result<RoutingPlan> compute(const ShardedSource& source, const ShardedTarget& target);
  // Only engine rank g's reads, the same as compute()'s for g (replicas are
  // still chosen by g): what one engine rank needs when it (re-)plans alone,
  // about 1/G of the work. The other ranks' read lists are empty and their
  // destinations are not validated. kInvalidArgument if g is not in target.
  static Result<RoutingPlan> compute_rank(const ShardedSource& source, const ShardedTarget& target,
                                          std::size_t engine_rank);

  std::size_t trainer_ranks() const noexcept { return trainer_ranks_; }
  std::size_t engine_ranks() const noexcept { return reads_.size(); }
  // What engine rank g reads from trainer rank r, sorted by (source tensor's
  // position in r's layout, offset).
  const std::vector<PlannedRead>& reads(std::size_t engine_rank, std::size_t trainer_rank) const;
  // Bytes engine rank g reads from trainer rank r.
  std::uint64_t bytes(std::size_t engine_rank, std::size_t trainer_rank) const;
  // Total strided reads in the plan.
  std::size_t read_count() const;

  // The Destinations of engine rank g, one per trainer rank (for
  // SubscriberGroup::pull), given the base address of each of its destination
  // tensors by name. kInvalidArgument for a missing or null buffer. A trainer
  // rank g reads nothing from gets an empty Destination::slices({}).
  Result<std::vector<Destination>> bind(std::size_t engine_rank,
                                        const std::unordered_map<std::string, void*>& buffers,
                                        MemoryKind kind = MemoryKind::kHost) const;

 private:
  static Result<RoutingPlan> plan(const ShardedSource& source, const ShardedTarget& target, std::size_t first,
                                  std::size_t last);
  std::size_t trainer_ranks_ = 0;
  std::vector<std::vector<std::vector<PlannedRead>>> reads_;  // [g][r]
};

}  // namespace weightsync
