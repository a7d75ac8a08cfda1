// SLIME's dynamic sampling (algorithms/dynamic_filter.h) against a scripted
// sampler: with the filter on, a round sends only groups whose rewards vary,
// samples further prompts until it has its count or reaches the cap, and
// accounts for every sampled group; the groups carry what was filtered; the
// replay buffer sums it at take; a trainer that keeps zero-variance groups
// refuses a filtered stream.
#include <catch2/catch.hpp>
#include <deque>
#include <string>
#include <vector>

#include "algorithms/advantages.h"
#include "algorithms/dynamic_filter.h"
#include "algorithms/replay_buffer.h"

using namespace algorithms;

namespace {

// A sampler that hands out scripted groups in order: 'v' a group whose
// rewards vary, 'z' one whose rewards are all equal (3 trajectories each);
// it records how many prompts each batch asked for.
struct ScriptedSampler {
  std::deque<char> script;
  std::vector<int> asked;
  std::uint64_t next_task = 0;

  SampleBatch sampler() {
    return [this](int prompts) -> zorplex::Result<std::vector<TrajectoryGroup>> {
      asked.push_back(prompts);
      std::vector<TrajectoryGroup> out;
      for (int p = 0; p < prompts && !script.empty(); ++p) {
        const char kind = script.front();
        script.pop_front();
        TrajectoryGroup g;
        g.task_seed = next_task++;
        for (double r : kind == 'v' ? std::vector<double>{1.2, 0.0, 0.2} : std::vector<double>{1.2, 1.2, 1.2}) {
          rollout::Trajectory t;
          t.score.reward = r;
          g.trajectories.push_back(t);
        }
        out.push_back(std::move(g));
      }
      return out;
    };
  }
};

std::vector<std::uint64_t> seeds_of(const FilledRound& round) {
  std::vector<std::uint64_t> seeds;
  for (const TrajectoryGroup& g : round.groups) seeds.push_back(g.task_seed);
  return seeds;
}

}  // namespace

TEST_CASE("dynamic filter: a round sends only groups with reward variance and samples more prompts until it "
          "has its count",
          "[rl][algorithms][dynamic_filter]") {
  // 4 prompts wanted: the first batch of 4 has 1 usable, the second (3
  // prompts, the missing count) 2, the third (1 prompt) 1.
  ScriptedSampler sampler{{'z', 'v', 'z', 'z', /**/ 'v', 'z', 'v', /**/ 'v', /**/ 'v', 'v'}, {}, 0};
  auto filled = fill_round(DynamicFilterOptions{true, 4, 4}, sampler.sampler());
  REQUIRE(filled.ok());
  FilledRound& round = filled.value();
  CHECK(sampler.asked == std::vector<int>{4, 3, 1});
  CHECK(round.batches == 3);
  CHECK(round.prompts_sampled == 8);
  CHECK(seeds_of(round) == std::vector<std::uint64_t>{1, 4, 6, 7});  // the usable ones, in order
  for (const TrajectoryGroup& g : round.groups) CHECK_FALSE(zero_variance(g.rewards()));
  CHECK(round.groups_filtered == 4);
  CHECK(round.trajectories_filtered == 12);
  std::vector<std::uint64_t> filtered_seeds;  // kept apart for transcripts
  for (const TrajectoryGroup& g : round.filtered) filtered_seeds.push_back(g.task_seed);
  CHECK(filtered_seeds == std::vector<std::uint64_t>{0, 2, 3, 5});
  CHECK_FALSE(round.cap_hit);
  // Every sampled prompt is sent or filtered.
  CHECK(round.groups.size() + round.groups_filtered == round.prompts_sampled);

  // On the wire: the first group carries the round's filtered counts, every
  // group how many its round sends.
  stamp_round(round);
  CHECK(round.groups[0].filtered_groups == 4);
  CHECK(round.groups[0].filtered_trajectories == 12);
  for (std::size_t i = 1; i < round.groups.size(); ++i) {
    CHECK(round.groups[i].filtered_groups == 0);
    CHECK(round.groups[i].filtered_trajectories == 0);
  }
  for (const TrajectoryGroup& g : round.groups) CHECK(g.round_groups == 4);
}

TEST_CASE("dynamic filter: the over-sampling cap ends a round with fewer groups, and a round with none sends "
          "its last",
          "[rl][algorithms][dynamic_filter]") {
  SECTION("cap 2 x 2 prompts: one usable group in 4 prompts") {
    ScriptedSampler sampler{{'z', 'z', 'v', 'z', 'v', 'v'}, {}, 0};
    auto filled = fill_round(DynamicFilterOptions{true, 2, 2}, sampler.sampler());
    REQUIRE(filled.ok());
    const FilledRound& round = filled.value();
    CHECK(sampler.asked == std::vector<int>{2, 2});  // never past the cap
    CHECK(round.prompts_sampled == 4);
    CHECK(round.cap_hit);
    CHECK(seeds_of(round) == std::vector<std::uint64_t>{2});
    CHECK(round.groups_filtered == 3);
  }
  SECTION("a batch asks for the missing count, or what the cap leaves if that is less") {
    ScriptedSampler sampler{{'z', 'z', 'z', 'v', /**/ 'z', 'z', 'v', /**/ 'z', /**/ 'v'}, {}, 0};
    auto filled = fill_round(DynamicFilterOptions{true, 4, 2}, sampler.sampler());
    REQUIRE(filled.ok());
    CHECK(sampler.asked == std::vector<int>{4, 3, 1});  // 3 missing; then 2 missing but 1 left of the cap of 8
    CHECK(seeds_of(filled.value()) == std::vector<std::uint64_t>{3, 6});
    CHECK(filled.value().prompts_sampled == 8);
    CHECK(filled.value().groups_filtered == 6);
    CHECK(filled.value().cap_hit);
  }
  SECTION("none usable within the cap") {
    ScriptedSampler sampler{std::deque<char>(20, 'z'), {}, 0};
    auto filled = fill_round(DynamicFilterOptions{true, 2, 3}, sampler.sampler());
    REQUIRE(filled.ok());
    FilledRound& round = filled.value();
    CHECK(round.prompts_sampled == 6);
    CHECK(round.cap_hit);
    REQUIRE(round.groups.size() == 1);  // the last one, so the trainer hears from the round
    CHECK(round.groups[0].task_seed == 5);
    CHECK(round.filtered.size() == 5);
    CHECK(round.groups_filtered == 5);
    CHECK(round.trajectories_filtered == 15);
    stamp_round(round);
    CHECK(round.groups[0].filtered_groups == 5);
    CHECK(round.groups[0].round_groups == 1);
  }
}

TEST_CASE("dynamic filter: off, a round is one batch of its prompts and every group is sent",
          "[rl][algorithms][dynamic_filter]") {
  ScriptedSampler sampler{{'z', 'v', 'z', 'v', 'v'}, {}, 0};
  auto filled = fill_round(DynamicFilterOptions{false, 4, 4}, sampler.sampler());
  REQUIRE(filled.ok());
  FilledRound& round = filled.value();
  CHECK(sampler.asked == std::vector<int>{4});
  CHECK(seeds_of(round) == std::vector<std::uint64_t>{0, 1, 2, 3});
  CHECK(round.groups_filtered == 0);
  CHECK_FALSE(round.cap_hit);
  stamp_round(round);
  for (const TrajectoryGroup& g : round.groups) {
    CHECK(g.filtered_groups == 0);
    CHECK(g.round_groups == 4);
  }
}

TEST_CASE("dynamic filter: a sampler's error ends the round with it, and a stopped sampler ends it with what it has",
          "[rl][algorithms][dynamic_filter]") {
  auto failing = [](int) -> zorplex::Result<std::vector<TrajectoryGroup>> {
    return zorplex::Error{"rollouts failed: boom"};
  };
  auto failed = fill_round(DynamicFilterOptions{}, failing);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().message == "rollouts failed: boom");
  ScriptedSampler sampler{{'v', 'z'}, {}, 0};  // runs dry: as a stopped generator
  auto stopped = fill_round(DynamicFilterOptions{true, 4, 4}, sampler.sampler());
  REQUIRE(stopped.ok());
  CHECK(sampler.asked == std::vector<int>{4});
  CHECK(stopped.value().groups.size() == 1);
  CHECK_FALSE(stopped.value().cap_hit);
}

TEST_CASE("replay buffer: what the generators filtered is summed over the groups a take consumes",
          "[rl][algorithms][dynamic_filter]") {
  ReplayBuffer buffer(ReplayOptions{4, true, 16});
  auto group = [](std::vector<double> rewards, std::uint64_t filtered_groups, std::uint64_t filtered_trajectories) {
    TrajectoryGroup g;
    for (double r : rewards) {
      rollout::Trajectory t;
      t.score.reward = r;
      g.trajectories.push_back(t);
    }
    g.filtered_groups = filtered_groups;
    g.filtered_trajectories = filtered_trajectories;
    return g;
  };
  buffer.add(group({1, 0}, 3, 6));
  buffer.add(group({1, 1}, 5, 10));  // zero-variance (a round that found none usable): dropped, its counts kept
  buffer.add(group({0, 1}, 1, 2));
  CHECK(buffer.counters().groups_filtered_at_source == 0);  // counted when consumed, not when queued
  CHECK(buffer.take(2, 0).size() == 1);
  CHECK(buffer.counters().groups_filtered_at_source == 8);
  CHECK(buffer.counters().trajectories_filtered_at_source == 16);
  CHECK(buffer.counters().groups_dropped_zero_variance == 1);
  CHECK(buffer.take(2, 0).size() == 1);
  CHECK(buffer.counters().groups_filtered_at_source == 9);
  CHECK(buffer.counters().trajectories_filtered_at_source == 18);
}

TEST_CASE("dynamic filter: a trainer that keeps zero-variance groups refuses filtered ones, naming the flag",
          "[rl][algorithms][dynamic_filter]") {
  TrajectoryGroup filtered;
  filtered.generator = 1;
  filtered.filtered_groups = 2;
  filtered.filtered_trajectories = 16;
  TrajectoryGroup clean;
  CHECK(accept_filtered(filtered, false).ok());  // a group-relative trainer takes it
  CHECK(accept_filtered(clean, true).ok());
  auto refused = accept_filtered(filtered, true);  // REINFORCE with the running baseline
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("generator 1 filtered 2 zero-variance groups"));
  CHECK_THAT(refused.error().message, Catch::Contains("--baseline running"));
  CHECK_THAT(refused.error().message, Catch::Contains("Restart the generators with --dynamic-filter off"));
}
