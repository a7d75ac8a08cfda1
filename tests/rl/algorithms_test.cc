// RL algorithms without libtorch, against hand-computed values: group
// advantages (GRPO), leave-one-out advantages (RLOO), the running-mean
// baseline (REINFORCE), and the replay buffer's minimum group size,
// zero-variance, staleness and capacity rules.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "algorithms/advantages.h"
#include "algorithms/replay_buffer.h"
#include "algorithms/outcome_tally.h"
#include "algorithms/sampling_agreement.h"

using namespace algorithms;

namespace {

TrajectoryGroup group_with(std::vector<double> rewards, std::uint64_t version_start,
                           std::uint64_t sequence = 0) {
  TrajectoryGroup g;
  g.version_start = version_start;
  g.version_end = version_start;
  g.sequence = sequence;
  for (double r : rewards) {
    rollout::Trajectory t;
    t.score.reward = r;
    g.trajectories.push_back(t);
  }
  return g;
}

}  // namespace

TEST_CASE("advantages: group-relative, with and without the std normalisation", "[rl][algorithms]") {
  // mean 0.7, deviations +-0.5, population std 0.5.
  const std::vector<double> plain = group_advantages({1.2, 0.2, 0.2, 1.2}, false);
  REQUIRE(plain.size() == 4);
  CHECK(plain[0] == Approx(0.5));
  CHECK(plain[1] == Approx(-0.5));
  CHECK(plain[2] == Approx(-0.5));
  CHECK(plain[3] == Approx(0.5));
  const std::vector<double> normalized = group_advantages({1.2, 0.2, 0.2, 1.2}, true);
  CHECK(normalized[0] == Approx(1.0).epsilon(1e-5));
  CHECK(normalized[1] == Approx(-1.0).epsilon(1e-5));
  // One success in four: mean 0.25, variance (0.75^2 + 3 * 0.25^2) / 4 = 0.1875.
  const std::vector<double> one = group_advantages({1, 0, 0, 0}, true, 0.0);
  CHECK(one[0] == Approx(0.75 / std::sqrt(0.1875)));
  CHECK(one[1] == Approx(-0.25 / std::sqrt(0.1875)));
  CHECK(one[0] == Approx(1.7320508));
  // No signal: all equal, or a group of one.
  CHECK(group_advantages({0.2, 0.2, 0.2}, true) == std::vector<double>{0, 0, 0});
  CHECK(group_advantages({1.0}, true) == std::vector<double>{0});
  CHECK(zero_variance({0.2, 0.2}));
  CHECK_FALSE(zero_variance({0.2, 1.2}));
}

TEST_CASE("advantages: leave-one-out (RLOO), G/(G-1) times the group-mean baseline's", "[rl][algorithms]") {
  // Rewards 1, 0, 0, 0.5 (sum 1.5): each one's baseline is the mean of the
  // other three. 1 - 0.5/3, 0 - 1.5/3, 0 - 1.5/3, 0.5 - 1/3.
  const std::vector<double> rewards{1.0, 0.0, 0.0, 0.5};
  auto loo = leave_one_out_advantages(rewards);
  REQUIRE(loo.ok());
  REQUIRE(loo.value().size() == 4);
  CHECK(loo.value()[0] == Approx(5.0 / 6));
  CHECK(loo.value()[1] == Approx(-0.5));
  CHECK(loo.value()[2] == Approx(-0.5));
  CHECK(loo.value()[3] == Approx(1.0 / 6));
  // The group-mean baseline (mean 0.375) gives 0.625, -0.375, -0.375, 0.125:
  // RLOO's are exactly G/(G-1) = 4/3 of those, not equal to them.
  const std::vector<double> group_mean = group_advantages(rewards, false);
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    INFO(i);
    CHECK(loo.value()[i] == Approx(group_mean[i] * 4.0 / 3.0));
    CHECK(loo.value()[i] != Approx(group_mean[i]));
  }
  // A pair: each baseline is the other's reward.
  auto pair = leave_one_out_advantages({1.0, 0.0});
  REQUIRE(pair.ok());
  CHECK(pair.value() == std::vector<double>{1.0, -1.0});
  // No signal: all equal gives exact zeros.
  auto equal = leave_one_out_advantages({0.2, 0.2, 0.2});
  REQUIRE(equal.ok());
  CHECK(equal.value() == std::vector<double>{0, 0, 0});
  // A group of one (or none) has no others to average: an error that says
  // what to change, not a division by zero.
  for (const std::vector<double>& too_small : {std::vector<double>{1.0}, std::vector<double>{}}) {
    auto refused = leave_one_out_advantages(too_small);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("at least 2 trajectories") != std::string::npos);
    CHECK(refused.error().message.find("--min-group-size") != std::string::npos);
  }
}

TEST_CASE("advantages: the running-mean baseline", "[rl][algorithms]") {
  RunningMeanBaseline baseline(0.9);
  CHECK(baseline.value() == 0.0);
  CHECK(baseline.advantage(1.0) == 1.0);
  baseline.update({1.0, 0.0});  // first batch: the mean itself
  CHECK(baseline.value() == Approx(0.5));
  baseline.update({1.0, 1.0});  // 0.9 * 0.5 + 0.1 * 1.0
  CHECK(baseline.value() == Approx(0.55));
  CHECK(baseline.advantage(1.0) == Approx(0.45));
  baseline.update({});
  CHECK(baseline.value() == Approx(0.55));
}

TEST_CASE("replay buffer: zero-variance groups count towards a take's n, and are dropped and counted",
          "[rl][algorithms]") {
  ReplayBuffer buffer(ReplayOptions{4, true, 16});
  buffer.add(group_with({1.2, 1.2, 1.2, 1.2}, 0, 0));
  buffer.add(group_with({0.0, 0.0}, 0, 1));
  buffer.add(group_with({1.2, 0.2}, 0, 2));
  buffer.add(group_with({0.0, 1.0}, 0, 3));
  CHECK(buffer.size() == 4);
  CHECK(buffer.counters().groups_received == 4);
  CHECK(buffer.counters().trajectories_received == 10);
  // The first two sampled groups have no signal: a batch of 2 stands for
  // them, and has nothing to train on (async must not over-sample past them,
  // or it trains on more trajectories than a sync round of 2 prompts).
  CHECK(buffer.take(2, 0).empty());
  CHECK(buffer.counters().groups_dropped_zero_variance == 2);
  CHECK(buffer.counters().groups_served == 0);
  const std::vector<TrajectoryGroup> next = buffer.take(3, 0);
  REQUIRE(next.size() == 2);
  CHECK(next[0].sequence == 2);
  CHECK(next[1].sequence == 3);
  CHECK(buffer.counters().groups_served == 2);
  CHECK(buffer.counters().trajectories_consumed == 10);

  // Without the filter (REINFORCE with a running baseline) they are served.
  ReplayBuffer keep_all(ReplayOptions{4, false, 16});
  keep_all.add(group_with({1.2, 1.2}, 0));
  CHECK(keep_all.take(1, 0).size() == 1);
  CHECK(keep_all.counters().groups_dropped_zero_variance == 0);
}

TEST_CASE("replay buffer: a group below the minimum group size is dropped and counted, one at it is kept",
          "[rl][algorithms]") {
  ReplayBuffer buffer(ReplayOptions{4, true, 16, 3});
  buffer.add(group_with({1, 0}, 0, 0));        // 2 < 3: dropped
  buffer.add(group_with({1, 0, 0}, 0, 1));     // 3: kept
  buffer.add(group_with({1}, 0, 2));           // 1 < 3: dropped as undersized, not as zero-variance
  buffer.add(group_with({1, 0, 0, 1}, 0, 3));  // 4: kept
  // Undersized groups count towards n, as zero-variance ones do: a batch of
  // 2 stands for the first two sampled groups.
  const std::vector<TrajectoryGroup> first = buffer.take(2, 0);
  REQUIRE(first.size() == 1);
  CHECK(first[0].sequence == 1);
  CHECK(buffer.counters().groups_dropped_undersized == 1);
  CHECK(buffer.counters().trajectories_dropped_undersized == 2);
  CHECK(buffer.counters().groups_consumed == 2);
  CHECK(buffer.counters().trajectories_consumed == 5);
  const std::vector<TrajectoryGroup> second = buffer.take(5, 0);
  REQUIRE(second.size() == 1);
  CHECK(second[0].sequence == 3);
  CHECK(buffer.counters().groups_dropped_undersized == 2);
  CHECK(buffer.counters().trajectories_dropped_undersized == 3);
  CHECK(buffer.counters().groups_dropped_zero_variance == 0);
  CHECK(buffer.counters().groups_served == 2);
  CHECK(buffer.counters().groups_consumed == 4);

  // The default is 2: a group of one is dropped even without the
  // zero-variance filter; at 1 every group is kept.
  CHECK(ReplayOptions{}.min_group_size == 2);
  ReplayBuffer by_default(ReplayOptions{4, false, 16});
  by_default.add(group_with({1}, 0));
  by_default.add(group_with({1, 1}, 0));
  CHECK(by_default.take(2, 0).size() == 1);
  CHECK(by_default.counters().groups_dropped_undersized == 1);
  ReplayBuffer keep_all(ReplayOptions{4, false, 16, 1});
  keep_all.add(group_with({1}, 0));
  CHECK(keep_all.take(1, 0).size() == 1);
  CHECK(keep_all.counters().groups_dropped_undersized == 0);
}

TEST_CASE("replay buffer: groups more than max_staleness versions old are dropped at take",
          "[rl][algorithms]") {
  ReplayBuffer buffer(ReplayOptions{2, true, 16});
  for (std::uint64_t v : {1, 2, 3, 5}) buffer.add(group_with({1, 0, 0}, v, v));
  // At version 5: 5 - 1 = 4 > 2 and 5 - 2 = 3 > 2 are stale; 5 - 3 = 2 is not.
  const std::vector<TrajectoryGroup> taken = buffer.take(10, 5);
  REQUIRE(taken.size() == 2);
  CHECK(taken[0].version_start == 3);
  CHECK(taken[1].version_start == 5);
  CHECK(buffer.counters().groups_dropped_stale == 2);
  CHECK(buffer.counters().trajectories_dropped_stale == 6);
  CHECK(buffer.counters().groups_served == 2);
  // A version ahead of the trainer (it cannot happen, but must not underflow) is not stale.
  buffer.add(group_with({1, 0}, 9));
  CHECK(buffer.take(1, 5).size() == 1);
  // max_staleness 0: only groups sampled with the current version.
  ReplayBuffer strict(ReplayOptions{0, true, 16});
  strict.add(group_with({1, 0}, 3));
  strict.add(group_with({1, 0}, 4));
  CHECK(strict.take(5, 4).size() == 1);
  CHECK(strict.counters().groups_dropped_stale == 1);
}

TEST_CASE("replay buffer: oldest first, at most n per take, capacity pushes out the oldest",
          "[rl][algorithms]") {
  ReplayBuffer buffer(ReplayOptions{100, true, 3});
  for (std::uint64_t i = 0; i < 5; ++i) buffer.add(group_with({1, 0}, 0, i));
  CHECK(buffer.size() == 3);
  CHECK(buffer.counters().groups_dropped_overflow == 2);
  const auto first = buffer.take(2, 0);
  REQUIRE(first.size() == 2);
  CHECK(first[0].sequence == 2);
  CHECK(first[1].sequence == 3);
  CHECK(buffer.take(2, 0).size() == 1);
  CHECK(buffer.take(2, 0).empty());
}

TEST_CASE("sampling agreement: a group sampled at another temperature than the trainer's is refused",
          "[rl][algorithms]") {
  TrajectoryGroup at07 = group_with({0, 1}, 1);
  at07.temperature = 0.7;
  at07.generator = 3;
  TrajectoryGroup at10 = group_with({0, 1}, 1);
  at10.temperature = 1.0;
  SECTION("the trainer was given --temperature 1.0") {
    SamplingAgreement agreement(1.0);
    CHECK(agreement.accept(at10).ok());
    auto refused = agreement.accept(at07);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("generator 3 sampled at temperature 0.7") != std::string::npos);
    CHECK(refused.error().message.find("--temperature 1") != std::string::npos);
    CHECK(agreement.refused() == 1);
    CHECK(*agreement.pinned() == 1.0);
  }
  SECTION("no --temperature: the first group's is used, and a different one later refused") {
    SamplingAgreement agreement;
    CHECK_FALSE(agreement.pinned().has_value());
    CHECK(agreement.accept(at07).ok());
    CHECK(*agreement.pinned() == 0.7);
    CHECK(agreement.accept(at07).ok());
    CHECK_FALSE(agreement.accept(at10).ok());
    CHECK(agreement.refused() == 1);
  }
}

TEST_CASE("outcome tally: accuracy before the zero-variance filter, and after it, differ as they should",
          "[rl][algorithms]") {
  // Two groups all right (zero variance) and one mixed: 11 of 12 correct.
  auto correct_group = [](std::vector<double> rewards, std::uint64_t sequence) {
    TrajectoryGroup g = group_with(rewards, 1, sequence);
    for (auto& t : g.trajectories) t.score.correct = t.score.reward > 0;
    return g;
  };
  ReplayBuffer buffer(ReplayOptions{});
  OutcomeTally tally;
  for (auto g : {correct_group({1, 1, 1, 1}, 0), correct_group({1, 1, 1, 1}, 1), correct_group({0, 1, 1, 1}, 2)}) {
    tally.add(g);
    buffer.add(std::move(g));
  }
  CHECK(tally.trajectories() == 12);
  CHECK(tally.correct_rate() == Approx(11.0 / 12));
  CHECK(tally.reward_mean() == Approx(11.0 / 12));
  // What the trainer trains on after the filter: the mixed group alone.
  const auto kept = buffer.take(10, 1);
  REQUIRE(kept.size() == 1);
  double kept_correct = 0;
  for (const auto& t : kept[0].trajectories) kept_correct += t.score.correct ? 1 : 0;
  CHECK(kept_correct / 4 == Approx(0.75));  // pulled towards 0.5: why both are reported
  tally.reset();
  CHECK(tally.trajectories() == 0);
  CHECK(tally.correct_rate() == 0.0);
}
