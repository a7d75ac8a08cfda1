// algorithms/dynamic_filter.h: SLIME's dynamic sampling (seed 004), run by a
// generator where the rewards are known: over-sample prompts and send only
// the groups that carry a learning signal, so the trainer's batch stays full.
//
// Contract
// - fill_round(options, sample): one generator round. `sample(n)` samples n
//   prompts (the next n of the generator's task stream, one group each, same
//   weights logic as any batch) and returns their groups in prompt order.
//   * Filter off: one batch of options.prompts prompts; every group is kept.
//   * Filter on: a group whose rewards are all equal (algorithms::
//     zero_variance: no signal under group-relative advantages) is filtered,
//     i.e. counted and not kept. While fewer than options.prompts groups are
//     kept and fewer than oversample_cap * prompts prompts were sampled, it
//     samples another batch of the missing count (never past the cap), so it
//     never keeps more than options.prompts groups and every sampled group is
//     either kept or filtered. A round that reaches the cap with none kept
//     keeps its last group anyway (zero-variance: the trainer's replay buffer
//     drops and counts it), so every round sends at least one group and a
//     sync trainer hears from every generator every round.
//   * The round's counts (prompts sampled, groups and trajectories filtered,
//     cap_hit) are in the result; stamp_round() writes them into the kept
//     groups for the wire: the first group carries the round's filtered
//     counts (everything filtered since the previous sent group: a round
//     always sends), the others 0; every group carries round_groups, the
//     number of groups its round sends.
//   * The filtered groups themselves are in `filtered` (for transcripts).
//   * sample() returning an Error ends the round with it; returning fewer
//     groups than asked (stopped) ends the round with what it has.
// - accept_filtered(group, trainer_keeps_zero_variance): the trainer's check.
//   A trainer that keeps zero-variance groups (REINFORCE with the running
//   baseline, where r - b carries signal in every group, or
//   --keep-zero-variance) must not get a filtered stream: that would bias its
//   gradient towards mixed-outcome prompts. A group with nonzero filtered
//   counts is then refused with an Error naming the generator flag to change
//   (--dynamic-filter off); anything else is accepted.
// - Pure functions (sample() aside); any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/replay_buffer.h"
#include "zorplex/result.h"

namespace algorithms {

struct DynamicFilterOptions {
  bool enabled = true;     // generator --dynamic-filter on|off
  int prompts = 4;         // usable groups wanted per round (generator --prompts)
  int oversample_cap = 4;  // at most this many times `prompts` prompts sampled per round
};

struct FilledRound {
  std::vector<TrajectoryGroup> groups;  // to send, in sampling order
  std::vector<TrajectoryGroup> filtered;  // not to send (transcripts), in sampling order
  std::uint64_t prompts_sampled = 0;
  std::uint64_t batches = 0;
  std::uint64_t groups_filtered = 0;
  std::uint64_t trajectories_filtered = 0;
  bool cap_hit = false;  // filter on and fewer than `prompts` usable groups found within the cap
};

using SampleBatch = std::function<zorplex::Result<std::vector<TrajectoryGroup>>(int prompts)>;

zorplex::Result<FilledRound> fill_round(const DynamicFilterOptions& options, const SampleBatch& sample);

// Writes the round's counts into its groups (see the contract).
void stamp_round(FilledRound& round);

zorplex::Result<bool> accept_filtered(const TrajectoryGroup& group, bool trainer_keeps_zero_variance);

}  // namespace algorithms
