// Walks a box of a global tensor placed inside a row-major buffer, one
// contiguous run (the box's last dimension) at a time: how the trainer fills
// its shards and how the generator checks its destination pieces.
#pragma once

#include <cstdint>
#include <vector>

#include "weightsync/sharding.h"

namespace sharded {

using Shape = std::vector<std::int64_t>;

// A box with its start and size spelled out (Box::whole() resolved).
struct Span {
  Shape start;
  Shape size;
};

inline Span resolve(const weightsync::Box& box, const Shape& shape) {
  if (box.start.empty() && box.size.empty()) return Span{Shape(shape.size(), 0), shape};
  return Span{box.start, box.size};
}

inline std::uint64_t numel(const Shape& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

// Calls fn(global, local, length) for each run of the box: `global` is the
// flat index of the run's first element in the global tensor of shape
// `global_shape`, `local` that in a buffer of shape `local_shape` where the
// box's first element sits at `at`; `length` elements follow contiguously in both.
template <typename Fn>
void for_each_run(const Shape& global_shape, const Span& box, const Shape& local_shape, const Shape& at,
                  Fn&& fn) {
  const std::size_t rank = global_shape.size();
  if (rank == 0) return;
  for (auto s : box.size) {
    if (s <= 0) return;
  }
  std::vector<std::uint64_t> global_stride(rank, 1), local_stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) {
    global_stride[d - 1] = global_stride[d] * static_cast<std::uint64_t>(global_shape[d]);
    local_stride[d - 1] = local_stride[d] * static_cast<std::uint64_t>(local_shape[d]);
  }
  const std::uint64_t length = static_cast<std::uint64_t>(box.size[rank - 1]);
  std::vector<std::int64_t> index(rank, 0);  // position inside the box; the last dim stays 0
  for (;;) {
    std::uint64_t global = 0, local = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      global += static_cast<std::uint64_t>(box.start[d] + index[d]) * global_stride[d];
      local += static_cast<std::uint64_t>(at[d] + index[d]) * local_stride[d];
    }
    fn(global, local, length);
    std::size_t d = rank - 1;  // advance the outer dims, last-but-one fastest
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < box.size[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace sharded
