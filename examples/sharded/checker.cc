// Element-by-element check of a pulled engine rank against values.h (checker.h).
#include "checker.h"

#include "values.h"

namespace sharded {
namespace {

Shape unflatten(std::uint64_t flat, const Shape& shape) {
  Shape out(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    out[d] = static_cast<std::int64_t>(flat % static_cast<std::uint64_t>(shape[d]));
    flat /= static_cast<std::uint64_t>(shape[d]);
  }
  return out;
}

std::string coords(const Shape& index) {
  std::string out = "[";
  for (std::size_t d = 0; d < index.size(); ++d) out += (d ? ", " : "") + std::to_string(index[d]);
  return out + "]";
}

}  // namespace

Checker::Checker(const weightsync::ShardedSource& source, const weightsync::ShardedTarget& target,
                 std::size_t rank, const std::unordered_map<std::string, void*>& buffers)
    : source_(source) {
  for (const auto& dest : target.ranks.at(rank)) {
    for (const auto& piece : dest.pieces) {
      for (std::size_t id = 0; id < source.tensors.size(); ++id) {
        const auto& global = source.tensors[id];
        if (global.name != piece.tensor) continue;
        pieces_.push_back(Piece{dest.name, global.name, static_cast<std::uint32_t>(id), global.shape,
                                resolve(piece.from, global.shape), dest.shape, piece.at,
                                static_cast<const std::uint32_t*>(buffers.at(dest.name))});
      }
    }
  }
}

CheckResult Checker::check(std::uint64_t version) const {
  CheckResult out;
  for (const Piece& piece : pieces_) {
    for_each_run(piece.global_shape, piece.box, piece.dest_shape, piece.at,
                 [&](std::uint64_t global, std::uint64_t local, std::uint64_t length) {
                   const std::uint32_t* got = piece.data + local;
                   out.elements += length;
                   std::uint64_t wrong = 0;
                   for (std::uint64_t k = 0; k < length; ++k) {
                     wrong += got[k] != element_bits(version, piece.tensor_id, global + k);
                   }
                   if (wrong == 0) return;
                   // Slow path: say which version each wrong element came from.
                   for (std::uint64_t k = 0; k < length; ++k) {
                     if (got[k] == element_bits(version, piece.tensor_id, global + k)) continue;
                     const auto origin = origin_version(got[k], version, piece.tensor_id, global + k);
                     if (origin) {
                       if (out.mixed++ == 0) out.other_version = *origin;
                     } else {
                       ++out.bad;
                     }
                     if (out.first_problem.empty()) {
                       out.first_problem = describe(piece, global + k, local + k) +
                                           (origin ? " holds version " + std::to_string(*origin)
                                                   : " holds no version's value");
                     }
                   }
                 });
  }
  return out;
}

// "layers.0.qkv[70, 3] (layers.0.k[6, 3], held by trainer rank 0)".
std::string Checker::describe(const Piece& piece, std::uint64_t global, std::uint64_t local) const {
  const Shape at_global = unflatten(global, piece.global_shape);
  std::string holders;
  for (std::size_t r = 0; r < source_.ranks.size(); ++r) {
    for (const auto& shard : source_.ranks[r]) {
      if (shard.tensor != piece.tensor) continue;
      const Span box = resolve(shard.box, piece.global_shape);
      bool inside = true;
      for (std::size_t d = 0; d < at_global.size(); ++d) {
        inside = inside && at_global[d] >= box.start[d] && at_global[d] < box.start[d] + box.size[d];
      }
      if (inside) holders += (holders.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  return piece.dest + coords(unflatten(local, piece.dest_shape)) + " (" + piece.tensor + coords(at_global) +
         ", held by trainer rank " + holders + ")";
}

}  // namespace sharded
