// The toy MoE of ws-example-moe: L layers of expert tensors w1, w3 [E, ff, d]
// and w2 [E, d, ff] (the grouped form engines load), sharded over the
// trainer's ranks by expert parallelism and tensor parallelism inside each
// expert, and placed on the engine's ranks by an ExpertMap; every element's
// value is a function of its global coordinates and the version, so each
// engine rank checks every element it holds. Plain data and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "weightsync/sharding.h"

namespace moe {

struct Model {
  std::int64_t experts = 64, layers = 4, ff = 32, d = 16;
  std::int64_t trainer_ep = 2, trainer_tp = 1;  // trainer ranks: ep * tp (rank = e * tp + t)

  std::vector<weightsync::GlobalTensor> globals() const;
  // The trainer: EP groups of contiguous experts, TP splitting ff inside each.
  weightsync::ShardedSource source() const;
  // The engine: per rank and layer a fused w13 [local, 2 ff, d] (gate then up)
  // and w2 [local, d, ff], its experts in the map's order.
  weightsync::ShardedTarget target(const weightsync::ExpertMap& map) const;
  // Bytes of one expert over w1, w2 and w3 of one layer.
  std::uint64_t expert_bytes() const { return 3 * static_cast<std::uint64_t>(ff * d) * 4; }
};

// An EPLB-style rebalance: experts with random loads packed onto `ranks`
// ranks of E / ranks experts each, the heaviest first, each onto the rank
// with the least load so far; local order is the order of packing.
weightsync::ExpertMap rebalanced_map(std::int64_t experts, std::size_t ranks, std::uint32_t seed);

// Fills trainer rank r's slot (laid out as its rank_layout) for `version`.
void fill_trainer_rank(const weightsync::ShardedSource& source, std::size_t r,
                       const weightsync::WeightLayout& layout, std::uint64_t version, std::uint8_t* slot);

// Elements of an engine rank's tensors (by name) that differ from what its
// pieces place there at `version`; `checked` counts the elements looked at.
std::uint64_t wrong_elements(const weightsync::ShardedSource& source,
                             const std::vector<weightsync::DestinationTensor>& tensors,
                             const std::map<std::string, std::vector<std::uint32_t>>& buffers,
                             std::uint64_t version, std::uint64_t* checked);

}  // namespace moe
