// algorithms/dynamic_filter.cc: see dynamic_filter.h.
#include "algorithms/dynamic_filter.h"

#include <algorithm>
#include <string>
#include <utility>

#include "algorithms/advantages.h"

namespace algorithms {

zorplex::Result<FilledRound> fill_round(const DynamicFilterOptions& options, const SampleBatch& sample) {
  FilledRound round;
  const std::uint64_t wanted = static_cast<std::uint64_t>(std::max(options.prompts, 1));
  const std::uint64_t cap =
      options.enabled ? wanted * static_cast<std::uint64_t>(std::max(options.oversample_cap, 1)) : wanted;
  while (round.groups.size() < wanted && round.prompts_sampled < cap) {
    const std::uint64_t ask = std::min(wanted - round.groups.size(), cap - round.prompts_sampled);
    auto batch = sample(static_cast<int>(ask));
    if (!batch) return batch.error();
    if (!batch.value().empty()) ++round.batches;
    round.prompts_sampled += batch.value().size();
    for (TrajectoryGroup& group : batch.value()) {
      if (options.enabled && zero_variance(group.rewards())) {
        ++round.groups_filtered;
        round.trajectories_filtered += group.trajectories.size();
        round.filtered.push_back(std::move(group));
        continue;
      }
      round.groups.push_back(std::move(group));
    }
    if (batch.value().size() < ask) break;  // stopped mid-round
  }
  round.cap_hit = options.enabled && round.groups.size() < wanted && round.prompts_sampled >= cap;
  if (round.groups.empty() && !round.filtered.empty()) {
    // None usable within the cap: send the last one anyway, so the trainer
    // hears from this round (its buffer drops it as zero-variance).
    --round.groups_filtered;
    round.trajectories_filtered -= round.filtered.back().trajectories.size();
    round.groups.push_back(std::move(round.filtered.back()));
    round.filtered.pop_back();
  }
  return round;
}

void stamp_round(FilledRound& round) {
  for (std::size_t i = 0; i < round.groups.size(); ++i) {
    TrajectoryGroup& group = round.groups[i];
    group.filtered_groups = i == 0 ? round.groups_filtered : 0;
    group.filtered_trajectories = i == 0 ? round.trajectories_filtered : 0;
    group.round_groups = static_cast<std::uint32_t>(round.groups.size());
  }
}

zorplex::Result<bool> accept_filtered(const TrajectoryGroup& group, bool trainer_keeps_zero_variance) {
  if (!trainer_keeps_zero_variance || group.filtered_groups == 0) return true;
  return zorplex::Error{
      "generator " + std::to_string(group.generator) + " filtered " + std::to_string(group.filtered_groups) +
      " zero-variance groups before this one (its --dynamic-filter is on), but this trainer trains on "
      "zero-variance groups (REINFORCE with --baseline running, where r - b carries signal in every group, "
      "or --keep-zero-variance): a filtered stream would bias the gradient. Restart the generators with "
      "--dynamic-filter off (scripts/rl-run.sh does so when the trainer options include --baseline running "
      "or --keep-zero-variance)"};
}

}  // namespace algorithms
