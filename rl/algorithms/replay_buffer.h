// algorithms/replay_buffer.h: the trainer's buffer of trajectory groups, with
// AReaL's staleness limit, Marin's minimum group size and the zero-variance
// filter of DAPO/SLIME.
//
// Contract
// - The unit is a group: the G trajectories a generator sampled for one
//   prompt in one batch. version_start is the oldest version any of their
//   tokens was sampled with (in-flight updates install new weights mid-batch;
//   each token's own version is in Trajectory::token_versions), version_end
//   the newest published when the group was sent.
// - add(group): queues the group, oldest first, and counts it. A group
//   beyond capacity_groups pushes out the oldest one (counted as overflow).
// - take(n, current_version): first drops every queued group with
//   current_version - version_start > max_staleness (counted as stale, and
//   its trajectories too), then consumes up to n groups, oldest first, and
//   returns those with a learning signal. Two kinds carry none and are
//   consumed, counted and not returned, in this order:
//   * a group of fewer than min_group_size trajectories (Marin's minimum
//     group size; default 2: a group-relative advantage from one trajectory
//     is 0, and RLOO's is undefined); counted as undersized, its
//     trajectories too. min_group_size 0 or 1 keeps every group;
//   * with drop_zero_variance, a group whose rewards are all equal: under
//     group-relative advantages its advantages are all 0 (DAPO/SLIME's
//     filter).
//   Both still count towards n, so a batch of n stands for n sampled groups
//   whichever mode filled it: sync (a round of n prompts) and async (the
//   next n groups to arrive) train on the same number of sampled
//   trajectories. groups_consumed counts every group take consumed (served
//   or dropped by either rule; not the stale ones). With the generators'
//   dynamic filter on (algorithms/dynamic_filter.h) zero-variance groups are
//   rarely sent, and this drop is a safety net.
// - is_stale() and signal_of() are those two rules alone, for the
//   per-environment buffers (algorithms/environment_buffers.h).
// - Counters say how many groups and trajectories came in and went where.
// - One thread (the trainer's); no locking. Nothing fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "rollout/trajectory.h"

namespace algorithms {

struct TrajectoryGroup {
  std::vector<rollout::Trajectory> trajectories;
  std::uint64_t version_start = 0;  // the oldest policy version any token was sampled with
  std::uint64_t version_end = 0;    // the newest version published when the generator sent them
  std::uint32_t generator = 0;
  std::uint64_t sequence = 0;  // per generator, from 0
  std::uint64_t task_seed = 0;
  std::uint64_t task_index = 0;
  double generation_seconds = 0.0;  // time the generator spent sampling this group
  double pull_seconds = 0.0;        // the weight pull before this group's rollouts (0: none)
  std::uint64_t pull_bytes = 0;     // bytes of that pull
  // The sampling parameters the behaviour log-probs depend on (policy/sampling.h):
  // the trainer recomputes them at this temperature, or refuses the group.
  double temperature = 1.0;  // 0: greedy (log-probs at 1)
  double top_p = 1.0;        // for the record: the log-probs are untruncated
  // The generator's dynamic filter (algorithms/dynamic_filter.h): the
  // zero-variance groups, and their trajectories, it sampled and did not send
  // since its previous sent group; and how many groups this one's round sends.
  std::uint64_t filtered_groups = 0;
  std::uint64_t filtered_trajectories = 0;
  std::uint32_t round_groups = 1;

  std::vector<double> rewards() const;
};

struct ReplayOptions {
  std::uint64_t max_staleness = 4;
  bool drop_zero_variance = true;
  std::size_t capacity_groups = 256;
  std::size_t min_group_size = 2;  // fewer trajectories: dropped at take (0 or 1: none)
};

struct ReplayCounters {
  std::uint64_t groups_received = 0;
  std::uint64_t trajectories_received = 0;
  std::uint64_t groups_dropped_zero_variance = 0;
  std::uint64_t groups_dropped_undersized = 0;  // fewer than min_group_size trajectories
  std::uint64_t trajectories_dropped_undersized = 0;
  std::uint64_t groups_dropped_stale = 0;
  std::uint64_t trajectories_dropped_stale = 0;
  std::uint64_t groups_dropped_overflow = 0;
  std::uint64_t groups_served = 0;    // returned by take (undersized and zero-variance ones not)
  std::uint64_t groups_consumed = 0;  // taken off the queue by take: served, undersized or zero-variance
  std::uint64_t trajectories_consumed = 0;  // of the groups take consumed
  // What the generators filtered before sending the groups take consumed
  // (TrajectoryGroup::filtered_groups, filtered_trajectories, summed).
  std::uint64_t groups_filtered_at_source = 0;
  std::uint64_t trajectories_filtered_at_source = 0;
};

// current_version - version_start > max_staleness (never for a group ahead
// of the trainer).
bool is_stale(const TrajectoryGroup& group, std::uint64_t current_version, const ReplayOptions& options);

// Whether a group carries a learning signal, and if not, which rule drops it
// (undersized is checked first).
enum class GroupSignal { kUsable, kUndersized, kZeroVariance };
GroupSignal signal_of(const TrajectoryGroup& group, const ReplayOptions& options);

class ReplayBuffer {
 public:
  explicit ReplayBuffer(ReplayOptions options) : options_(options) {}

  void add(TrajectoryGroup group);
  std::vector<TrajectoryGroup> take(std::size_t max_groups, std::uint64_t current_version);

  std::size_t size() const { return queue_.size(); }
  const ReplayCounters& counters() const { return counters_; }
  const ReplayOptions& options() const { return options_; }

 private:
  ReplayOptions options_;
  std::deque<TrajectoryGroup> queue_;
  ReplayCounters counters_;
};

}  // namespace algorithms
