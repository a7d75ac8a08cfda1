// Checks an engine rank's destination tensors after a pull: every element of
// every piece must hold the value (values.h) of the version the pull says it
// delivered, recomputed from the piece's global coordinates. A wrong element
// is "mixed" when it is another version's value of that same element, else
// "bad" (garbage, unwritten, misplaced).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "box_walk.h"
#include "weightsync/sharding.h"

namespace sharded {

struct CheckResult {
  std::uint64_t elements = 0;       // elements checked
  std::uint64_t mixed = 0;          // elements holding another version's value
  std::uint64_t bad = 0;            // elements holding no version's value
  std::uint64_t other_version = 0;  // the version the first mixed element came from
  std::string first_problem;        // where, in words; empty if none
};

class Checker {
 public:
  // `buffers`: engine rank `rank`'s destination tensors by name (as bound).
  Checker(const weightsync::ShardedSource& source, const weightsync::ShardedTarget& target, std::size_t rank,
          const std::unordered_map<std::string, void*>& buffers);
  CheckResult check(std::uint64_t version) const;

 private:
  struct Piece {
    std::string dest;    // destination tensor
    std::string tensor;  // global tensor
    std::uint32_t tensor_id = 0;
    Shape global_shape;
    Span box;
    Shape dest_shape;
    Shape at;
    const std::uint32_t* data = nullptr;
  };
  std::string describe(const Piece& piece, std::uint64_t global, std::uint64_t local) const;

  const weightsync::ShardedSource& source_;
  std::vector<Piece> pieces_;
};

}  // namespace sharded
