// RoutingPlan (docs/sharding.md): validates a sharded source and target,
// indexes the trainer shards by global tensor, intersects every destination
// piece with the shards of its tensor, and turns each intersection into
// strided reads; bind() makes them Destination::slices.
//
// Cost: O(pieces x shards of the piece's tensor) intersections, plus sorting
// the reads. Boxes live in fixed storage and reads are routed as small
// records before they become PlannedReads, so a plan of thousands of tensors
// takes milliseconds.
#include <algorithm>
#include <memory_resource>
#include <string_view>
#include <unordered_set>

#include "sharding/box_geometry.h"

namespace weightsync {

namespace {

using detail::Dims;
using detail::ResolvedBox;
using detail::Shape;

Status invalid(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "routing plan: " + why);
}

// One trainer rank's copy of a shard: rank, position in its layout, local name.
struct ShardHolder {
  std::size_t rank = 0;
  std::size_t position = 0;
  const std::string* local_name = nullptr;
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
  std::vector<ShardGroup> groups;  // pairwise disjoint boxes
};

// Keys view the names in ShardedSource::tensors, which outlive compute().
using TensorIndex = std::unordered_map<std::string_view, IndexedTensor>;

// ---------------------------------------------------------------------------
// Messages

std::string shard_what(std::size_t rank, const TrainerShard& shard) {
  return "trainer rank " + std::to_string(rank) + "'s shard '" + shard.local_name + "' of tensor '" +
         shard.tensor + "'";
}

std::string dest_what(const DestinationTensor& dest, std::size_t engine_rank) {
  return "destination tensor '" + dest.name + "' of engine rank " + std::to_string(engine_rank);
}

std::string piece_what(const DestinationTensor& dest, std::size_t p, std::size_t engine_rank) {
  return "piece " + std::to_string(p) + " (tensor '" + dest.pieces[p].tensor + "') of " +
         dest_what(dest, engine_rank);
}

// ---------------------------------------------------------------------------
// The trainer side: global tensors and their shards

// A dtype and shape a plan can handle; otherwise kInvalidArgument whose
// message is a predicate for the caller to put after the tensor's name.
Status check_tensor(DType dtype, const Shape& shape) {
  const auto refuse = [](const std::string& why) { return Status(ErrorCode::kInvalidArgument, why); };
  if (dtype_size(dtype) == 0) return refuse("has an unknown dtype");
  if (shape.size() > detail::kMaxRank) {
    return refuse("has " + std::to_string(shape.size()) + " dimensions, more than " +
                  std::to_string(detail::kMaxRank));
  }
  std::uint64_t numel = 0;
  std::uint64_t bytes = 0;
  if (!detail::checked_numel(shape, &numel) || __builtin_mul_overflow(numel, dtype_size(dtype), &bytes)) {
    return refuse(
        "has a zero or negative dimension or more bytes than fit in 64 bits; give it a positive shape");
  }
  return Status();
}

Result<TensorIndex> index_global_tensors(const std::vector<GlobalTensor>& tensors) {
  TensorIndex index;
  index.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    if (tensor.name.empty()) return invalid("a global tensor has an empty name; name every tensor");
    Status valid = check_tensor(tensor.dtype, tensor.shape);
    if (!valid.ok()) return invalid("global tensor '" + tensor.name + "' " + valid.message());
    if (!index.emplace(tensor.name, IndexedTensor{&tensor, {}}).second) {
      return invalid("global tensor '" + tensor.name +
                     "' is listed twice in ShardedSource::tensors; list each once");
    }
  }
  return index;
}

// Adds one shard to its tensor's groups: a replica of an equal box, or a new
// box that must not overlap any other.
Status add_shard(IndexedTensor* entry, const ResolvedBox& box, const ShardHolder& holder,
                 const TrainerShard& shard, std::size_t trainer_ranks) {
  ResolvedBox common;
  for (auto& group : entry->groups) {
    if (detail::same_box(group.box, box)) {
      group.replicas.push_back(holder);
      return Status();
    }
    if (detail::intersect(group.box, box, &common)) {
      return invalid(shard_what(holder.rank, shard) + " has box " + detail::describe_box(box) +
                     ", which overlaps trainer rank " + std::to_string(group.first.rank) + "'s shard " +
                     detail::describe_box(group.box) +
                     " of the same tensor without being equal to it; shards of a tensor must be disjoint or "
                     "identical (replicas)");
    }
  }
  if (entry->groups.empty()) entry->groups.reserve(std::min<std::size_t>(trainer_ranks, 8));
  entry->groups.push_back(ShardGroup{box, holder, {}});
  return Status();
}

// A set of names whose nodes come from one arena (no allocation per name).
class NameSet {
 public:
  explicit NameSet(std::size_t expected) : names_(&arena_) { names_.reserve(expected); }
  bool insert(std::string_view name) { return names_.insert(name).second; }

 private:
  std::pmr::monotonic_buffer_resource arena_;
  std::pmr::unordered_set<std::string_view> names_;
};

Status index_trainer_shards(const ShardedSource& source, TensorIndex* index) {
  for (std::size_t rank = 0; rank < source.ranks.size(); ++rank) {
    NameSet local_names(source.ranks[rank].size());
    for (std::size_t position = 0; position < source.ranks[rank].size(); ++position) {
      const TrainerShard& shard = source.ranks[rank][position];
      auto entry = index->find(shard.tensor);
      if (entry == index->end()) {
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
      ResolvedBox box;
      Status valid = detail::resolve_box(shard.box, entry->second.tensor->shape, &box);
      if (!valid.ok()) return invalid(shard_what(rank, shard) + " " + valid.message());
      Status added = add_shard(&entry->second, box, ShardHolder{rank, position, &shard.local_name}, shard,
                               source.ranks.size());
      if (!added.ok()) return added;
    }
  }
  return Status();
}

// ---------------------------------------------------------------------------
// The engine side: destination tensors and their pieces

// A piece resolved against its global tensor: its box and its origin in the
// destination tensor.
struct ResolvedPiece {
  const IndexedTensor* source = nullptr;
  ResolvedBox box;
  Dims at{};
};

Status check_placement(const DestinationTensor& dest, std::size_t p, std::size_t engine_rank,
                       ResolvedPiece* resolved) {
  const std::vector<std::int64_t>& at = dest.pieces[p].at;
  if (!at.empty() && at.size() != dest.shape.size()) {
    return invalid(piece_what(dest, p, engine_rank) + " has " + std::to_string(at.size()) +
                   " `at` indices for a destination of " + std::to_string(dest.shape.size()) +
                   " dimensions; give one per dimension");
  }
  for (std::size_t d = 0; d < dest.shape.size(); ++d) {
    resolved->at[d] = at.empty() ? 0 : at[d];  // an empty `at`: the destination's origin
    const std::int64_t size = resolved->box.size[d];
    if (resolved->at[d] < 0 || resolved->at[d] > dest.shape[d] - size) {
      return invalid(piece_what(dest, p, engine_rank) + ", placed at " + std::to_string(resolved->at[d]) +
                     " with size " + std::to_string(size) + " along dimension " + std::to_string(d) +
                     ", lies outside the destination tensor (size " + std::to_string(dest.shape[d]) +
                     "); keep at + size within the destination's shape");
    }
  }
  return Status();
}

Status resolve_piece(const DestinationTensor& dest, std::size_t p, std::size_t engine_rank,
                     const TensorIndex& index, ResolvedPiece* resolved) {
  const DestinationPiece& piece = dest.pieces[p];
  auto entry = index.find(piece.tensor);
  if (entry == index.end()) {
    return invalid(piece_what(dest, p, engine_rank) + " names an unknown global tensor; add '" +
                   piece.tensor + "' to ShardedSource::tensors");
  }
  const GlobalTensor& global = *entry->second.tensor;
  if (global.dtype != dest.dtype) {
    return invalid(piece_what(dest, p, engine_rank) + ": the destination is " + to_string(dest.dtype) +
                   " but the global tensor is " + to_string(global.dtype) +
                   "; a plan never converts dtypes, so make them equal");
  }
  if (global.shape.size() != dest.shape.size()) {
    return invalid(piece_what(dest, p, engine_rank) + ": the global tensor has " +
                   std::to_string(global.shape.size()) + " dimensions and the destination " +
                   std::to_string(dest.shape.size()) + "; a piece must have the destination's rank");
  }
  resolved->source = &entry->second;
  Status valid = detail::resolve_box(piece.from, global.shape, &resolved->box);
  if (!valid.ok()) return invalid(piece_what(dest, p, engine_rank) + " " + valid.message());
  return check_placement(dest, p, engine_rank, resolved);
}

// Every element of the destination in exactly one piece: pairwise disjoint
// (in destination coordinates) and volumes summing to its element count.
Status check_coverage(const DestinationTensor& dest, const std::vector<ResolvedPiece>& pieces,
                      std::size_t engine_rank) {
  std::uint64_t covered = 0;
  ResolvedBox placed;
  ResolvedBox other;
  ResolvedBox common;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    placed = ResolvedBox{pieces[i].box.rank, pieces[i].at, pieces[i].box.size};
    for (std::size_t j = i + 1; j < pieces.size(); ++j) {
      other = ResolvedBox{pieces[j].box.rank, pieces[j].at, pieces[j].box.size};
      if (detail::intersect(placed, other, &common)) {
        return invalid("pieces " + std::to_string(i) + " and " + std::to_string(j) + " of " +
                       dest_what(dest, engine_rank) + " overlap at " + detail::describe_box(common) +
                       "; every element must come from exactly one piece");
      }
    }
    covered += detail::box_volume(pieces[i].box);  // disjoint pieces inside the destination: no overflow
  }
  std::uint64_t numel = 0;
  detail::checked_numel(dest.shape, &numel);
  if (covered != numel) {
    return invalid(dest_what(dest, engine_rank) + " is not covered: its pieces hold " +
                   std::to_string(covered) + " of its " + std::to_string(numel) +
                   " elements; add pieces for the rest");
  }
  return Status();
}

// Validates one destination tensor and resolves its pieces into `pieces`.
Status resolve_destination(const DestinationTensor& dest, std::size_t engine_rank, const TensorIndex& index,
                           std::vector<ResolvedPiece>* pieces) {
  Status valid = check_tensor(dest.dtype, dest.shape);
  if (!valid.ok()) return invalid(dest_what(dest, engine_rank) + " " + valid.message());
  pieces->resize(dest.pieces.size());
  for (std::size_t p = 0; p < dest.pieces.size(); ++p) {
    Status resolved = resolve_piece(dest, p, engine_rank, index, &(*pieces)[p]);
    if (!resolved.ok()) return resolved;
  }
  return check_coverage(dest, *pieces, engine_rank);
}

// ---------------------------------------------------------------------------
// Routing

// A read before it becomes a PlannedRead: no strings copied until sorted.
struct RoutedRead {
  std::size_t position = 0;  // the source tensor's position in the trainer rank's layout
  const std::string* source = nullptr;
  const std::string* dest = nullptr;
  detail::StridedRun run;
};

// Buffers reused from one intersection, piece and engine rank to the next.
struct RouteScratch {
  detail::RegionCopy copy;
  std::vector<detail::StridedRun> runs;
  std::vector<ResolvedPiece> pieces;
  std::vector<std::vector<RoutedRead>> by_rank;  // [trainer rank]
};

// The copy of `common` (an intersection of `piece` and a shard box) from the
// shard's local tensor into the destination tensor.
void describe_copy(const DestinationTensor& dest, const ResolvedPiece& piece, const ResolvedBox& shard,
                   const ResolvedBox& common, detail::RegionCopy* copy) {
  copy->rank = common.rank;
  copy->element_bytes = dtype_size(dest.dtype);
  for (std::size_t d = 0; d < common.rank; ++d) {
    copy->src_shape[d] = shard.size[d];
    copy->src_start[d] = common.start[d] - shard.start[d];
    copy->dest_shape[d] = dest.shape[d];
    copy->dest_start[d] = piece.at[d] + common.start[d] - piece.box.start[d];
    copy->extent[d] = common.size[d];
  }
}

// Routes piece p to one replica of each shard group it meets, appending to
// by_rank[trainer rank]; errors if some part of it is held by no trainer rank.
Status route_piece(const DestinationTensor& dest, std::size_t p, const ResolvedPiece& piece,
                   std::size_t engine_rank, RouteScratch* scratch) {
  std::uint64_t found = 0;
  ResolvedBox common;
  for (const ShardGroup& group : piece.source->groups) {
    if (!detail::intersect(piece.box, group.box, &common)) continue;
    found += detail::box_volume(common);
    const ShardHolder& holder = group.holder_for(engine_rank);
    describe_copy(dest, piece, group.box, common, &scratch->copy);
    scratch->runs.clear();
    detail::append_strided_runs(scratch->copy, &scratch->runs);
    for (const detail::StridedRun& run : scratch->runs) {
      scratch->by_rank[holder.rank].push_back(
          RoutedRead{holder.position, holder.local_name, &dest.name, run});
    }
  }
  const std::uint64_t volume = detail::box_volume(piece.box);
  if (found != volume) {  // shard boxes are disjoint: found == volume iff covered
    return invalid(piece_what(dest, p, engine_rank) + ": " + std::to_string(volume - found) +
                   " elements of its box " + detail::describe_box(piece.box) +
                   " are held by no trainer rank; add trainer shards that cover them");
  }
  return Status();
}

bool read_before(const RoutedRead& a, const RoutedRead& b) {
  if (a.position != b.position) return a.position < b.position;
  if (a.run.src_offset != b.run.src_offset) return a.run.src_offset < b.run.src_offset;
  if (a.dest != b.dest && *a.dest != *b.dest) return *a.dest < *b.dest;
  return a.run.dest_offset < b.run.dest_offset;
}

// Reads come out of routing mostly in layout order already: sort only if not.
std::vector<PlannedRead> sorted_reads(std::vector<RoutedRead>* routed) {
  if (!std::is_sorted(routed->begin(), routed->end(), read_before)) {
    std::sort(routed->begin(), routed->end(), read_before);
  }
  std::vector<PlannedRead> reads;
  reads.reserve(routed->size());
  for (const RoutedRead& r : *routed) {
    reads.push_back(PlannedRead{*r.source, r.run.src_offset, r.run.length, r.run.count, r.run.src_stride,
                                *r.dest, r.run.dest_offset, r.run.dest_stride});
  }
  return reads;
}

// The reads of engine rank g, one sorted list per trainer rank.
Status plan_engine_rank(const std::vector<DestinationTensor>& tensors, std::size_t engine_rank,
                        const TensorIndex& index, RouteScratch* scratch,
                        std::vector<std::vector<PlannedRead>>* reads) {
  for (auto& routed : scratch->by_rank) routed.clear();
  NameSet names(tensors.size());
  for (const DestinationTensor& dest : tensors) {
    if (dest.name.empty()) {
      return invalid("a destination tensor of engine rank " + std::to_string(engine_rank) +
                     " has an empty name; name every tensor");
    }
    if (!names.insert(dest.name)) {
      return invalid(dest_what(dest, engine_rank) +
                     " is listed twice; give each destination tensor a distinct name");
    }
    Status valid = resolve_destination(dest, engine_rank, index, &scratch->pieces);
    if (!valid.ok()) return valid;
    for (std::size_t p = 0; p < dest.pieces.size(); ++p) {
      Status routed = route_piece(dest, p, scratch->pieces[p], engine_rank, scratch);
      if (!routed.ok()) return routed;
    }
  }
  reads->clear();
  reads->reserve(scratch->by_rank.size());
  for (auto& routed : scratch->by_rank) reads->push_back(sorted_reads(&routed));
  return Status();
}

}  // namespace

Result<RoutingPlan> RoutingPlan::compute(const ShardedSource& source, const ShardedTarget& target) try {
  auto index = index_global_tensors(source.tensors);
  if (!index.ok()) return index.status();
  Status shards = index_trainer_shards(source, &index.value());
  if (!shards.ok()) return shards;
  RoutingPlan plan;
  plan.trainer_ranks_ = source.ranks.size();
  plan.reads_.resize(target.ranks.size());
  RouteScratch scratch;
  scratch.by_rank.resize(plan.trainer_ranks_);
  for (std::size_t g = 0; g < target.ranks.size(); ++g) {
    Status planned = plan_engine_rank(target.ranks[g], g, *index, &scratch, &plan.reads_[g]);
    if (!planned.ok()) return planned;
  }
  return plan;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RoutingPlan::compute: ") + e.what());
}

const std::vector<PlannedRead>& RoutingPlan::reads(std::size_t engine_rank, std::size_t trainer_rank) const {
  static const std::vector<PlannedRead> kNoReads;
  if (engine_rank >= reads_.size() || trainer_rank >= reads_[engine_rank].size()) return kNoReads;
  return reads_[engine_rank][trainer_rank];
}

std::uint64_t RoutingPlan::bytes(std::size_t engine_rank, std::size_t trainer_rank) const {
  std::uint64_t total = 0;
  for (const PlannedRead& read : reads(engine_rank, trainer_rank)) total += read.count * read.length;
  return total;
}

std::size_t RoutingPlan::read_count() const {
  std::size_t count = 0;
  for (const auto& engine_rank : reads_) {
    for (const auto& list : engine_rank) count += list.size();
  }
  return count;
}

Result<std::vector<Destination>> RoutingPlan::bind(std::size_t engine_rank,
                                                   const std::unordered_map<std::string, void*>& buffers,
                                                   MemoryKind kind) const try {
  if (engine_rank >= reads_.size()) {
    return invalid("bind: engine rank " + std::to_string(engine_rank) + " does not exist (the plan has " +
                   std::to_string(reads_.size()) + " engine ranks)");
  }
  std::vector<Destination> destinations;
  destinations.reserve(reads_[engine_rank].size());
  for (const auto& list : reads_[engine_rank]) {
    std::vector<TensorSlice> slices;
    slices.reserve(list.size());
    for (const PlannedRead& read : list) {
      auto buffer = buffers.find(read.dest);
      if (buffer == buffers.end() || buffer->second == nullptr) {
        return invalid("bind: no buffer for destination tensor '" + read.dest + "' of engine rank " +
                       std::to_string(engine_rank) + "; pass its base address in `buffers`");
      }
      slices.push_back(TensorSlice{read.source, read.offset, read.length, read.count, read.stride,
                                   static_cast<std::uint8_t*>(buffer->second) + read.dest_offset,
                                   read.dest_stride});
    }
    destinations.push_back(Destination::slices(std::move(slices), kind));
  }
  return destinations;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RoutingPlan::bind: ") + e.what());
}

}  // namespace weightsync
