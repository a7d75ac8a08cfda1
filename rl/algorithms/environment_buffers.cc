// algorithms/environment_buffers.cc: see environment_buffers.h.
#include "algorithms/environment_buffers.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "rollout/demonstrations.h"

namespace algorithms {
namespace {

// Applies `count` to an environment's counters and to the totals.
template <typename Count>
void count_both(ReplayCounters& environment, ReplayCounters& total, Count count) {
  count(environment);
  count(total);
}

}  // namespace

std::string environment_of(const TrajectoryGroup& group) {
  if (group.trajectories.empty()) return "none";
  const zorplex::Task& task = group.trajectories.front().task;
  return rollout::task_mix_name(rollout::TaskMix{task.kind, task.difficulty});
}

std::uint64_t trajectory_tokens(const rollout::Trajectory& trajectory, std::uint64_t max_seq_len) {
  const std::uint64_t tokens = trajectory.tokens.size();
  return max_seq_len > 0 ? std::min(tokens, max_seq_len) : tokens;
}

std::uint64_t group_tokens(const TrajectoryGroup& group, std::uint64_t max_seq_len) {
  std::uint64_t tokens = 0;
  for (const rollout::Trajectory& t : group.trajectories) tokens += trajectory_tokens(t, max_seq_len);
  return tokens;
}

void EnvironmentBuffers::add(TrajectoryGroup group) {
  Environment& e = environments_[environment_of(group)];
  const std::uint64_t trajectories = group.trajectories.size();
  count_both(e.counters, counters_, [&](ReplayCounters& c) {
    ++c.groups_received;
    c.trajectories_received += trajectories;
  });
  Arrivals& a = e.arrivals;
  for (const rollout::Trajectory& t : group.trajectories) {
    ++a.rollouts;
    a.tokens += trajectory_tokens(t, max_seq_len_);
    a.generated_tokens += t.generated_tokens();
    a.correct += t.score.correct ? 1 : 0;
    a.truncated += t.truncated ? 1 : 0;
    a.reward_sum += t.score.reward;
    a.reward_square_sum += t.score.reward * t.score.reward;
  }
  const std::uint64_t tokens = group_tokens(group, max_seq_len_);
  e.last_group_tokens = tokens;
  e.queue.push_back(Entry{std::move(group), arrivals_++, tokens});
  while (size() > options_.capacity_groups) {
    Environment* first = oldest();
    first->queue.pop_front();
    count_both(first->counters, counters_, [](ReplayCounters& c) { ++c.groups_dropped_overflow; });
  }
}

EnvironmentBuffers::Environment* EnvironmentBuffers::oldest() {
  Environment* first = nullptr;
  for (auto& [name, e] : environments_) {
    if (!e.queue.empty() && (first == nullptr || e.queue.front().arrival < first->queue.front().arrival))
      first = &e;
  }
  return first;
}

GroupSignal EnvironmentBuffers::consume(Environment& e, const TrajectoryGroup& group) {
  const GroupSignal signal = signal_of(group, options_);
  const std::uint64_t trajectories = group.trajectories.size();
  count_both(e.counters, counters_, [&](ReplayCounters& c) {
    ++c.groups_consumed;
    c.trajectories_consumed += trajectories;
    c.groups_filtered_at_source += group.filtered_groups;
    c.trajectories_filtered_at_source += group.filtered_trajectories;
    if (signal == GroupSignal::kUndersized) {
      ++c.groups_dropped_undersized;
      c.trajectories_dropped_undersized += trajectories;
    } else if (signal == GroupSignal::kZeroVariance) {
      ++c.groups_dropped_zero_variance;
    } else {
      ++c.groups_served;
    }
  });
  return signal;
}

void EnvironmentBuffers::drop_stale(std::uint64_t current_version) {
  for (auto& [name, e] : environments_) {
    for (auto it = e.queue.begin(); it != e.queue.end();) {
      if (is_stale(it->group, current_version, options_)) {
        const std::uint64_t trajectories = it->group.trajectories.size();
        count_both(e.counters, counters_, [&](ReplayCounters& c) {
          ++c.groups_dropped_stale;
          c.trajectories_dropped_stale += trajectories;
        });
        it = e.queue.erase(it);
      } else {
        ++it;
      }
    }
  }
}

std::vector<TrajectoryGroup> EnvironmentBuffers::take(std::size_t max_groups, std::uint64_t current_version) {
  drop_stale(current_version);
  std::vector<TrajectoryGroup> out;
  for (std::size_t consumed = 0; consumed < max_groups; ++consumed) {
    Environment* e = oldest();
    if (e == nullptr) break;
    TrajectoryGroup group = std::move(e->queue.front().group);
    e->queue.pop_front();
    if (consume(*e, group) == GroupSignal::kUsable) out.push_back(std::move(group));
  }
  return out;
}

std::vector<EnvironmentSupply> EnvironmentBuffers::supply(std::uint64_t current_version) {
  drop_stale(current_version);
  std::vector<EnvironmentSupply> out;
  for (const auto& [name, e] : environments_) {
    EnvironmentSupply s;
    s.name = name;
    for (auto it = e.queue.rbegin(); it != e.queue.rend(); ++it) s.group_tokens.push_back(it->tokens);
    s.next_group_tokens = e.last_group_tokens;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<TrajectoryGroup> EnvironmentBuffers::take_planned(const BatchPlan& plan) {
  // Picks index each queue newest first; erased one by one, the indices of
  // one environment would shift, so the groups are moved out first.
  std::vector<TrajectoryGroup> out;
  std::map<std::string, std::vector<std::size_t>> emptied;  // queue positions, per environment
  for (const Pick& pick : plan.picks) {
    auto found = environments_.find(pick.environment);
    if (found == environments_.end() || pick.index >= found->second.queue.size())
      continue;  // not from supply()
    Environment& e = found->second;
    const std::size_t position = e.queue.size() - 1 - pick.index;
    TrajectoryGroup group = std::move(e.queue[position].group);
    if (consume(e, group) == GroupSignal::kUsable) out.push_back(std::move(group));
    emptied[pick.environment].push_back(position);
  }
  for (auto& [name, positions] : emptied) {
    std::deque<Entry>& queue = environments_[name].queue;
    std::sort(positions.rbegin(), positions.rend());
    for (std::size_t position : positions) queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(position));
  }
  return out;
}

std::map<std::string, EnvironmentMetrics> EnvironmentBuffers::step_metrics(
    const std::vector<TrajectoryGroup>& batch, std::uint64_t current_version,
    const std::map<std::string, std::uint64_t>& spilled) {
  std::map<std::string, EnvironmentMetrics> out;
  for (auto& [name, e] : environments_) {
    EnvironmentMetrics& m = out[name];
    std::uint64_t on_policy = 0;
    for (const Entry& entry : e.queue) {
      m.rollouts_in_buffer += entry.group.trajectories.size();
      m.tokens_in_buffer += entry.tokens;
      if (entry.group.version_start == current_version) on_policy += entry.group.trajectories.size();
    }
    if (m.rollouts_in_buffer > 0)
      m.frac_on_policy = static_cast<double>(on_policy) / static_cast<double>(m.rollouts_in_buffer);
    const Arrivals& a = e.arrivals;
    m.new_rollouts = a.rollouts;
    m.new_tokens = a.tokens;
    m.new_generated_tokens = a.generated_tokens;
    if (a.rollouts > 0) {
      const double n = static_cast<double>(a.rollouts);
      m.reward_mean = a.reward_sum / n;
      m.reward_std = std::sqrt(std::max(0.0, a.reward_square_sum / n - m.reward_mean * m.reward_mean));
      m.correct_rate = static_cast<double>(a.correct) / n;
      m.frac_truncated = static_cast<double>(a.truncated) / n;
    }
    e.arrivals = Arrivals{};
  }
  std::uint64_t batch_tokens = 0;
  for (const TrajectoryGroup& group : batch) {
    EnvironmentMetrics& m = out[environment_of(group)];
    m.rollouts_used += group.trajectories.size();
    const std::uint64_t tokens = group_tokens(group, max_seq_len_);
    m.tokens_used += tokens;
    batch_tokens += tokens;
  }
  for (auto& [name, m] : out) {
    if (batch_tokens > 0)
      m.frac_used = static_cast<double>(m.tokens_used) / static_cast<double>(batch_tokens);
  }
  for (const auto& [name, tokens] : spilled) out[name].spilled_tokens = tokens;
  return out;
}

std::size_t EnvironmentBuffers::size() const {
  std::size_t n = 0;
  for (const auto& [name, e] : environments_) n += e.queue.size();
  return n;
}

std::size_t EnvironmentBuffers::size(const std::string& environment) const {
  auto it = environments_.find(environment);
  return it == environments_.end() ? 0 : it->second.queue.size();
}

std::vector<std::string> EnvironmentBuffers::environments() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : environments_) out.push_back(name);
  return out;
}

ReplayCounters EnvironmentBuffers::counters(const std::string& environment) const {
  auto it = environments_.find(environment);
  return it == environments_.end() ? ReplayCounters{} : it->second.counters;
}

}  // namespace algorithms
