// Boxes of global tensors (docs/sharding.md): Box::whole/split, the layout a
// trainer rank publishes for its shards, and the box geometry of
// box_geometry.h (validation, intersection, strided byte runs).
#include <algorithm>
#include <array>
#include <unordered_map>

#include "sharding/box_geometry.h"
#include "sharding/experts.h"

namespace weightsync {

namespace {

Status bad_box(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, why);
}

std::string shape_string(const detail::Shape& shape) {
  std::string out = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

}  // namespace

Box Box::whole() {
  return Box{};
}

// An impossible split gives a box that resolve_box() refuses: size 0 along
// `dim` (or along every dimension when `dim` itself is out of range).
Box Box::split(const std::vector<std::int64_t>& shape, std::size_t dim, std::int64_t parts,
               std::int64_t index) {
  if (dim >= shape.size()) {
    const std::size_t rank = std::max<std::size_t>(shape.size(), 1);
    return Box{std::vector<std::int64_t>(rank, 0), std::vector<std::int64_t>(rank, 0)};
  }
  Box box{std::vector<std::int64_t>(shape.size(), 0), shape};
  if (parts <= 0 || index < 0 || index >= parts || shape[dim] % parts != 0) {
    box.size[dim] = 0;
    return box;
  }
  box.size[dim] = shape[dim] / parts;
  box.start[dim] = index * box.size[dim];
  return box;
}

// 0 for a shape with a non-positive dimension or a size past 64 bits (which
// compute() refuses).
std::uint64_t DestinationTensor::bytes() const {
  std::uint64_t numel = 0;
  std::uint64_t total = 0;
  if (!detail::checked_numel(shape, &numel) || __builtin_mul_overflow(numel, dtype_size(dtype), &total)) {
    return 0;
  }
  return total;
}

Result<WeightLayout> ShardedSource::rank_layout(std::size_t rank, std::size_t alignment) const try {
  if (rank >= ranks.size()) {
    return Status(ErrorCode::kInvalidArgument, "rank_layout: trainer rank " + std::to_string(rank) +
                                                   " does not exist (the source has " +
                                                   std::to_string(ranks.size()) + " ranks)");
  }
  std::unordered_map<std::string, const GlobalTensor*> globals;
  for (const auto& tensor : tensors) globals.emplace(tensor.name, &tensor);
  std::vector<TensorSpec> specs;
  specs.reserve(ranks[rank].size());
  for (const auto& shard : ranks[rank]) {
    const auto what = [&] {
      return "trainer rank " + std::to_string(rank) + "'s shard '" + shard.local_name + "'";
    };
    auto global = globals.find(shard.tensor);
    if (global == globals.end()) {
      return bad_box(what() + " names unknown global tensor '" + shard.tensor +
                     "'; add it to ShardedSource::tensors");
    }
    detail::ResolvedBox box;
    Status valid = detail::resolve_box(shard.box, global->second->shape, &box);
    if (!valid.ok()) return bad_box(what() + " of tensor '" + shard.tensor + "' " + valid.message());
    detail::Shape shape(box.size.begin(), box.size.begin() + box.rank);
    if (!shard.experts.empty()) {  // the listed experts, in local order, along expert_dim
      valid = detail::check_experts(shard.experts, shard.expert_dim, global->second->shape, box);
      if (!valid.ok()) return bad_box(what() + " of tensor '" + shard.tensor + "' " + valid.message());
      shape[shard.expert_dim] = static_cast<std::int64_t>(shard.experts.size());
    }
    specs.push_back(TensorSpec{shard.local_name, global->second->dtype, std::move(shape)});
  }
  return WeightLayout::build(std::move(specs), alignment);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("ShardedSource::rank_layout: ") + e.what());
}

namespace detail {

Status resolve_box(const Box& box, const Shape& shape, ResolvedBox* resolved) {
  if (shape.size() > kMaxRank) {
    return bad_box("has " + std::to_string(shape.size()) + " dimensions, more than " +
                   std::to_string(kMaxRank));
  }
  const bool whole = box.start.empty() && box.size.empty();
  if (!whole && (box.start.size() != shape.size() || box.size.size() != shape.size())) {
    return bad_box("has a box of " + std::to_string(box.start.size()) + " starts and " +
                   std::to_string(box.size.size()) + " sizes, but the tensor has " +
                   std::to_string(shape.size()) + " dimensions; give one per dimension");
  }
  resolved->rank = shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    resolved->start[d] = whole ? 0 : box.start[d];
    resolved->size[d] = whole ? shape[d] : box.size[d];
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (resolved->size[d] <= 0) {
      return bad_box("has an empty box (size " + std::to_string(resolved->size[d]) + " along dimension " +
                     std::to_string(d) +
                     "); Box::split gives one when `parts` does not divide the dimension or "
                     "`index` is out of range");
    }
    if (resolved->start[d] < 0 || resolved->start[d] > shape[d] - resolved->size[d]) {
      return bad_box("has box " + describe_box(*resolved) + ", outside the tensor's shape " +
                     shape_string(shape) + "; keep start + size within each dimension");
    }
  }
  return Status();
}

bool checked_numel(const Shape& shape, std::uint64_t* numel) {
  std::uint64_t total = 1;
  for (std::int64_t dim : shape) {
    if (dim <= 0 || __builtin_mul_overflow(total, static_cast<std::uint64_t>(dim), &total)) return false;
  }
  *numel = total;
  return true;
}

std::uint64_t box_volume(const ResolvedBox& box) {
  std::uint64_t volume = 1;
  for (std::size_t d = 0; d < box.rank; ++d) volume *= static_cast<std::uint64_t>(box.size[d]);
  return volume;
}

bool intersect(const ResolvedBox& a, const ResolvedBox& b, ResolvedBox* common) {
  common->rank = a.rank;
  for (std::size_t d = 0; d < a.rank; ++d) {
    const std::int64_t lo = std::max(a.start[d], b.start[d]);
    const std::int64_t hi = std::min(a.start[d] + a.size[d], b.start[d] + b.size[d]);
    if (hi <= lo) return false;
    common->start[d] = lo;
    common->size[d] = hi - lo;
  }
  return true;
}

bool same_box(const ResolvedBox& a, const ResolvedBox& b) {
  if (a.rank != b.rank) return false;
  for (std::size_t d = 0; d < a.rank; ++d) {
    if (a.start[d] != b.start[d] || a.size[d] != b.size[d]) return false;
  }
  return true;
}

std::string describe_box(const ResolvedBox& box) {
  std::string out = "[";
  for (std::size_t d = 0; d < box.rank; ++d) {
    out += (d ? ", " : "") + std::to_string(box.start[d]) + ":" + std::to_string(box.start[d] + box.size[d]);
  }
  return out + "]";
}

namespace {

using Strides = std::array<std::uint64_t, kMaxRank>;

// Row-major element strides of a tensor of `shape` into `strides`; returns
// the byte offset of `start` in that tensor.
std::uint64_t strides_and_offset(std::size_t rank, const Dims& shape, const Dims& start,
                                 std::uint64_t element, Strides* strides) {
  std::uint64_t stride = 1;
  std::uint64_t offset = 0;
  for (std::size_t d = rank; d-- > 0;) {
    (*strides)[d] = stride;
    offset += static_cast<std::uint64_t>(start[d]) * stride;
    stride *= static_cast<std::uint64_t>(shape[d]);
  }
  return offset * element;
}

}  // namespace

void append_strided_runs(const RegionCopy& copy, std::vector<StridedRun>* out) {
  const std::uint64_t element = copy.element_bytes;
  Strides src_strides{};
  Strides dest_strides{};
  StridedRun run;
  run.src_offset = strides_and_offset(copy.rank, copy.src_shape, copy.src_start, element, &src_strides);
  run.dest_offset = strides_and_offset(copy.rank, copy.dest_shape, copy.dest_start, element, &dest_strides);

  // Dimensions that matter, innermost first (size-1 ones only add to the base).
  std::array<std::size_t, kMaxRank> dims{};
  std::size_t dim_count = 0;
  for (std::size_t d = copy.rank; d-- > 0;) {
    if (copy.extent[d] > 1) dims[dim_count++] = d;
  }
  // Merge dimensions into one range while the region stays contiguous in both.
  std::uint64_t run_elements = 1;
  std::size_t next = 0;
  for (; next < dim_count; ++next) {
    const std::size_t d = dims[next];
    if (src_strides[d] != run_elements || dest_strides[d] != run_elements) break;
    run_elements *= static_cast<std::uint64_t>(copy.extent[d]);
  }
  run.length = run_elements * element;
  if (next < dim_count) {  // the strided dimension
    const std::size_t d = dims[next++];
    run.count = static_cast<std::uint64_t>(copy.extent[d]);
    run.src_stride = src_strides[d] * element;
    run.dest_stride = dest_strides[d] * element;
    // Dimensions further out whose steps continue the stride evenly in both
    // tensors join it (the rows of consecutive experts: one read, not one per expert).
    while (next < dim_count && src_strides[dims[next]] * element == run.count * run.src_stride &&
           dest_strides[dims[next]] * element == run.count * run.dest_stride) {
      run.count *= static_cast<std::uint64_t>(copy.extent[dims[next++]]);
    }
  }
  // Dimensions further out, dims[next, dim_count): one run per index
  // combination (an odometer, innermost fastest).
  Strides index{};
  while (true) {
    StridedRun placed = run;
    for (std::size_t i = next; i < dim_count; ++i) {
      placed.src_offset += index[i] * src_strides[dims[i]] * element;
      placed.dest_offset += index[i] * dest_strides[dims[i]] * element;
    }
    out->push_back(placed);
    std::size_t i = next;
    while (i < dim_count && ++index[i] == static_cast<std::uint64_t>(copy.extent[dims[i]])) index[i++] = 0;
    if (i == dim_count) break;
  }
}

}  // namespace detail

}  // namespace weightsync
