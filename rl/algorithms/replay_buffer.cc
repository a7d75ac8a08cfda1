// algorithms/replay_buffer.cc: see replay_buffer.h.
#include "algorithms/replay_buffer.h"

#include "algorithms/advantages.h"

namespace algorithms {

std::vector<double> TrajectoryGroup::rewards() const {
  std::vector<double> out;
  out.reserve(trajectories.size());
  for (const rollout::Trajectory& t : trajectories) out.push_back(t.score.reward);
  return out;
}

bool is_stale(const TrajectoryGroup& group, std::uint64_t current_version, const ReplayOptions& options) {
  return current_version > group.version_start &&
         current_version - group.version_start > options.max_staleness;
}

GroupSignal signal_of(const TrajectoryGroup& group, const ReplayOptions& options) {
  if (group.trajectories.size() < options.min_group_size) return GroupSignal::kUndersized;
  if (options.drop_zero_variance && zero_variance(group.rewards())) return GroupSignal::kZeroVariance;
  return GroupSignal::kUsable;
}

void ReplayBuffer::add(TrajectoryGroup group) {
  ++counters_.groups_received;
  counters_.trajectories_received += group.trajectories.size();
  queue_.push_back(std::move(group));
  while (queue_.size() > options_.capacity_groups) {
    queue_.pop_front();
    ++counters_.groups_dropped_overflow;
  }
}

std::vector<TrajectoryGroup> ReplayBuffer::take(std::size_t max_groups, std::uint64_t current_version) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (is_stale(*it, current_version, options_)) {
      ++counters_.groups_dropped_stale;
      counters_.trajectories_dropped_stale += it->trajectories.size();
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<TrajectoryGroup> out;
  for (std::size_t consumed = 0; !queue_.empty() && consumed < max_groups; ++consumed) {
    TrajectoryGroup group = std::move(queue_.front());
    queue_.pop_front();
    ++counters_.groups_consumed;
    counters_.trajectories_consumed += group.trajectories.size();
    counters_.groups_filtered_at_source += group.filtered_groups;
    counters_.trajectories_filtered_at_source += group.filtered_trajectories;
    const GroupSignal signal = signal_of(group, options_);
    if (signal == GroupSignal::kUndersized) {
      ++counters_.groups_dropped_undersized;
      counters_.trajectories_dropped_undersized += group.trajectories.size();
      continue;
    }
    if (signal == GroupSignal::kZeroVariance) {
      ++counters_.groups_dropped_zero_variance;
      continue;
    }
    out.push_back(std::move(group));
    ++counters_.groups_served;
  }
  return out;
}

}  // namespace algorithms
