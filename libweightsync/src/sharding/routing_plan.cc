// RoutingPlan (docs/sharding.md): validates a sharded source and target,
// indexes the trainer shards by global tensor, intersects every destination
// piece with the shards of its tensor, and turns each intersection into
// strided reads; bind() makes them Destination::slices.
//
// Cost: O(pieces x shards the piece meets) intersections (the shards are
// found by binary search, sharding/shard_index.h), plus sorting the reads. Boxes live in fixed storage and
// reads are routed as small records before they become PlannedReads, so a plan of thousands of tensors takes
// milliseconds.
#include <algorithm>
#include <string_view>

#include "sharding/box_geometry.h"
#include "sharding/experts.h"
#include "sharding/name_set.h"
#include "sharding/shard_index.h"

namespace weightsync {

namespace {

using detail::Dims;
using detail::ResolvedBox;
using detail::Shape;

Status invalid(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "routing plan: " + why);
}

using detail::IndexedTensor;
using detail::NameSet;
using detail::ShardGroup;
using detail::ShardHolder;

// ---------------------------------------------------------------------------
// Messages

std::string dest_what(const DestinationTensor& dest, std::size_t engine_rank) {
  return "destination tensor '" + dest.name + "' of engine rank " + std::to_string(engine_rank);
}

std::string piece_what(const DestinationTensor& dest, std::size_t p, std::size_t engine_rank) {
  return "piece " + std::to_string(p) + " (tensor '" + dest.pieces[p].tensor + "') of " +
         dest_what(dest, engine_rank);
}

// ---------------------------------------------------------------------------
// The engine side: destination tensors and their pieces

// A piece resolved against its global tensor: its box and its origin in the
// destination tensor. An expert piece resolves into one per run of experts.
struct ResolvedPiece {
  const IndexedTensor* source = nullptr;
  std::size_t piece = 0;  // index in DestinationTensor::pieces, for messages
  ResolvedBox box;
  Dims at{};
};

// Checks that `resolved` (box and at set from the piece; for an expert piece,
// its box's expert dimension sized to its list) lies inside the destination.
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

// Resolves piece p into `out` (appended): one ResolvedPiece, or one per run
// of its experts.
Status resolve_piece(const DestinationTensor& dest, std::size_t p, std::size_t engine_rank,
                     const detail::ShardIndex& index, std::vector<detail::ExpertRun>* runs,
                     std::vector<ResolvedPiece>* out) {
  const DestinationPiece& piece = dest.pieces[p];
  const IndexedTensor* source = index.find(piece.tensor);
  if (source == nullptr) {
    return invalid(piece_what(dest, p, engine_rank) + " names an unknown global tensor; add '" +
                   piece.tensor + "' to ShardedSource::tensors");
  }
  const GlobalTensor& global = *source->tensor;
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
  ResolvedPiece resolved;
  resolved.source = source;
  resolved.piece = p;
  Status valid = detail::resolve_box(piece.from, global.shape, &resolved.box);
  if (!valid.ok()) return invalid(piece_what(dest, p, engine_rank) + " " + valid.message());
  if (piece.experts.empty()) {
    valid = check_placement(dest, p, engine_rank, &resolved);
    if (valid.ok()) out->push_back(resolved);
    return valid;
  }
  valid = detail::check_experts(piece.experts, piece.expert_dim, global.shape, resolved.box);
  if (!valid.ok()) return invalid(piece_what(dest, p, engine_rank) + " " + valid.message());
  const ResolvedBox whole = resolved.box;
  resolved.box.size[piece.expert_dim] = static_cast<std::int64_t>(piece.experts.size());
  valid = check_placement(dest, p, engine_rank, &resolved);
  if (!valid.ok()) return valid;
  const std::int64_t base = resolved.at[piece.expert_dim];
  detail::expert_runs(piece.experts, runs);
  for (const detail::ExpertRun& run : *runs) {
    resolved.box = detail::run_box(whole, piece.expert_dim, run);
    resolved.at[piece.expert_dim] = base + run.local;
    out->push_back(resolved);
  }
  return Status();
}

// Every element of the destination in exactly one piece: pairwise disjoint
// (in destination coordinates) and volumes summing to its element count.
// Placed boxes are sorted along dimension 0, and each is compared only with
// those that start before it ends there.
Status check_coverage(const DestinationTensor& dest, const std::vector<ResolvedPiece>& pieces,
                      std::size_t engine_rank, std::vector<std::size_t>* order) {
  order->resize(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) (*order)[i] = i;
  const auto at0 = [&pieces](std::size_t i) { return pieces[i].box.rank == 0 ? 0 : pieces[i].at[0]; };
  std::sort(order->begin(), order->end(), [&](std::size_t a, std::size_t b) { return at0(a) < at0(b); });
  std::uint64_t covered = 0;
  ResolvedBox common;
  for (std::size_t x = 0; x < order->size(); ++x) {
    const ResolvedPiece& a = pieces[(*order)[x]];
    const ResolvedBox placed{a.box.rank, a.at, a.box.size};
    for (std::size_t y = x + 1; y < order->size(); ++y) {
      const ResolvedPiece& b = pieces[(*order)[y]];
      if (a.box.rank > 0 && b.at[0] >= a.at[0] + a.box.size[0]) break;
      if (detail::intersect(placed, ResolvedBox{b.box.rank, b.at, b.box.size}, &common)) {
        const std::size_t i = std::min(a.piece, b.piece), j = std::max(a.piece, b.piece);
        return invalid((i == j ? "two experts of piece " + std::to_string(i)
                               : "pieces " + std::to_string(i) + " and " + std::to_string(j)) +
                       " of " + dest_what(dest, engine_rank) + " overlap at " + detail::describe_box(common) +
                       "; every element must come from exactly one piece");
      }
    }
    covered += detail::box_volume(a.box);  // disjoint pieces inside the destination: no overflow
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
  std::vector<detail::ExpertRun> expert_runs;
  std::vector<std::size_t> order;
  std::vector<std::vector<RoutedRead>> by_rank;  // [trainer rank]
};

// Validates one destination tensor and resolves its pieces into scratch->pieces.
Status resolve_destination(const DestinationTensor& dest, std::size_t engine_rank,
                           const detail::ShardIndex& index, RouteScratch* scratch) {
  Status valid = detail::check_tensor(dest.dtype, dest.shape);
  if (!valid.ok()) return invalid(dest_what(dest, engine_rank) + " " + valid.message());
  scratch->pieces.clear();
  for (std::size_t p = 0; p < dest.pieces.size(); ++p) {
    Status resolved = resolve_piece(dest, p, engine_rank, index, &scratch->expert_runs, &scratch->pieces);
    if (!resolved.ok()) return resolved;
  }
  return check_coverage(dest, scratch->pieces, engine_rank, &scratch->order);
}

// The copy of `common` (an intersection of `piece` and a shard box held by
// `holder`) from the holder's local tensor into the destination tensor.
void describe_copy(const DestinationTensor& dest, const ResolvedPiece& piece, const ResolvedBox& shard,
                   const ShardHolder& holder, const ResolvedBox& common, detail::RegionCopy* copy) {
  copy->rank = common.rank;
  copy->element_bytes = dtype_size(dest.dtype);
  for (std::size_t d = 0; d < common.rank; ++d) {
    copy->src_shape[d] = holder.local_shape != nullptr ? (*holder.local_shape)[d] : shard.size[d];
    copy->src_start[d] = holder.local_at(d) + common.start[d] - shard.start[d];
    copy->dest_shape[d] = dest.shape[d];
    copy->dest_start[d] = piece.at[d] + common.start[d] - piece.box.start[d];
    copy->extent[d] = common.size[d];
  }
}

// Routes a resolved piece to one replica of each shard group it meets,
// appending to by_rank[trainer rank]; errors if some part of it is held by no
// trainer rank.
Status route_piece(const DestinationTensor& dest, const ResolvedPiece& piece, std::size_t engine_rank,
                   RouteScratch* scratch) {
  std::uint64_t found = 0;
  ResolvedBox common;
  const IndexedTensor& source = *piece.source;
  const std::size_t key = source.key_dim;
  const auto [first, last] = piece.box.rank == 0
                                 ? std::pair<std::size_t, std::size_t>{0, source.groups.size()}
                                 : source.candidates(piece.box.start[key], piece.box.size[key]);
  for (std::size_t g = first; g < last; ++g) {
    const ShardGroup& group = source.groups[g];
    if (!detail::intersect(piece.box, group.box, &common)) continue;
    found += detail::box_volume(common);
    const ShardHolder& holder = group.holder_for(engine_rank);
    describe_copy(dest, piece, group.box, holder, common, &scratch->copy);
    scratch->runs.clear();
    detail::append_strided_runs(scratch->copy, &scratch->runs);
    for (const detail::StridedRun& run : scratch->runs) {
      scratch->by_rank[holder.rank].push_back(
          RoutedRead{holder.position, holder.local_name, &dest.name, run});
    }
  }
  const std::uint64_t volume = detail::box_volume(piece.box);
  if (found != volume) {  // shard boxes are disjoint: found == volume iff covered
    return invalid(piece_what(dest, piece.piece, engine_rank) + ": " + std::to_string(volume - found) +
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
                        const detail::ShardIndex& index, RouteScratch* scratch,
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
    Status valid = resolve_destination(dest, engine_rank, index, scratch);
    if (!valid.ok()) return valid;
    for (const ResolvedPiece& piece : scratch->pieces) {
      Status routed = route_piece(dest, piece, engine_rank, scratch);
      if (!routed.ok()) return routed;
    }
  }
  reads->clear();
  reads->reserve(scratch->by_rank.size());
  for (auto& routed : scratch->by_rank) reads->push_back(sorted_reads(&routed));
  return Status();
}

}  // namespace

Result<RoutingPlan> RoutingPlan::plan(const ShardedSource& source, const ShardedTarget& target,
                                      std::size_t first, std::size_t last) {
  auto index = detail::ShardIndex::build(source);
  if (!index.ok()) return index.status();
  RoutingPlan plan;
  plan.trainer_ranks_ = source.ranks.size();
  plan.reads_.resize(target.ranks.size());
  for (auto& rank : plan.reads_) rank.resize(plan.trainer_ranks_);  // empty lists for ranks not planned
  RouteScratch scratch;
  scratch.by_rank.resize(plan.trainer_ranks_);
  for (std::size_t g = first; g < last; ++g) {
    Status planned = plan_engine_rank(target.ranks[g], g, *index, &scratch, &plan.reads_[g]);
    if (!planned.ok()) return planned;
  }
  return plan;
}

Result<RoutingPlan> RoutingPlan::compute(const ShardedSource& source, const ShardedTarget& target) try {
  return plan(source, target, 0, target.ranks.size());
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RoutingPlan::compute: ") + e.what());
}

Result<RoutingPlan> RoutingPlan::compute_rank(const ShardedSource& source, const ShardedTarget& target,
                                              std::size_t engine_rank) try {
  if (engine_rank >= target.ranks.size()) {
    return invalid("compute_rank: engine rank " + std::to_string(engine_rank) +
                   " does not exist (the target has " + std::to_string(target.ranks.size()) +
                   " engine ranks)");
  }
  return plan(source, target, engine_rank, engine_rank + 1);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("RoutingPlan::compute_rank: ") + e.what());
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
