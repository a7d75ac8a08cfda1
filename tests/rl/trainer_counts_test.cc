// The trainer's step counts with the generators' dynamic filter
// (algorithms/dynamic_filter.h), through a real TrainerLoop (its Publisher
// and trajectory receiver on 127.0.0.1) fed by a GroupSender: a step's line
// reports the trajectories sampled (consumed plus what the generators
// filtered before sending them), filtered and trained; a sync round is as
// many groups as the generator's round says it sends; a trainer that keeps
// zero-variance groups (REINFORCE with the running baseline) refuses groups
// whose generator filtered. The step line's real_tokens counts the
// trajectories' tokens, padded (group) and packed (running, --pack-sequences).
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tiny_policy.h"
#include "trainer_feed.h"
#include "channel/group_channel.h"
#include "rollout/rollout.h"
#include "trainer/algorithm_choice.h"
#include "trainer/trainer_loop.h"
#include "zorplex/tasks.h"

namespace {

using rltest::model_with_seed;
using rltest::tiny_config;

// Three episodes of one easy task sampled by `model` (version 1, temperature
// 1), with the given rewards and dynamic-filter fields.
algorithms::TrajectoryGroup group_of(const policy::Transformer& model, std::int64_t task_seed,
                                     std::vector<double> rewards, std::uint64_t sequence,
                                     std::uint64_t filtered_groups, std::uint32_t round_groups) {
  algorithms::TrajectoryGroup group =
      rltest::sampled_group(model, zorplex::Difficulty::kEasy, task_seed, rewards, sequence);
  group.filtered_groups = filtered_groups;
  group.filtered_trajectories = filtered_groups * 3;
  group.round_groups = round_groups;
  return group;
}

}  // namespace

TEST_CASE("trainer step: sampled counts what the generators filtered, beside filtered and trained, and a "
          "sync round is the groups the generator's round sends",
          "[rl][trainer][dynamic_filter]") {
  torch::set_num_threads(1);
  const std::string baseline = GENERATE(as<std::string>{}, "group", "running");
  auto model = policy::Transformer::create(tiny_config(), 5);
  REQUIRE(model.ok());
  const std::string out = "/tmp/ws_trainer_counts_" + std::to_string(::getpid()) + "_" + baseline;
  std::filesystem::remove_all(out);

  trainer::TrainerOptions options;
  options.sync = true;
  options.steps = 1;
  options.generators = 1;
  options.prompts_per_round = 4;  // the generator's --prompts; its round sends fewer (its cap was hit)
  options.round_timeout_s = 60.0;  // a round the trainer misjudged would wait this long
  options.idle_timeout_s = 60.0;
  options.replay.max_staleness = 0;
  options.checkpoint_every = 0;
  options.out_dir = out;
  options.update.lr = 1e-4;
  options.update.pack_sequences = baseline == "running";  // the step line counts padding either way
  trainer::AlgorithmChoice choice;
  choice.algorithm = baseline == "running" ? "reinforce" : "grpo";
  choice.baseline = baseline;
  REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());

  // The generator's round: 2 groups with a signal sent, 5 zero-variance ones
  // (15 trajectories) filtered before the first.
  std::vector<algorithms::TrajectoryGroup> round{group_of(model.value(), 11, {1.2, 0.0, 0.2}, 0, 5, 2),
                                                 group_of(model.value(), 12, {0.0, 1.2, 1.2}, 1, 0, 2)};
  if (baseline == "running") {
    // A generator left with its filter on: its filtered group is refused; a
    // round of two unfiltered groups follows.
    round.push_back(group_of(model.value(), 13, {0.2, 0.0, 0.0}, 2, 0, 2));
  }

  // The trajectories the step trains on (the running baseline's first group is refused, below).
  std::int64_t real_tokens = 0;
  for (std::size_t g = baseline == "running" ? 1 : 0; g < round.size(); ++g) {
    for (const rollout::Trajectory& t : round[g].trajectories)
      real_tokens += static_cast<std::int64_t>(t.tokens.size());
  }

  const rltest::OneStep ran = rltest::run_one_step(options, std::move(model).value(), round, 16);
  const nlohmann::json& step = ran.step;
  CHECK(step.at("wait_seconds").get<double>() < 30.0);  // the round ended with its 2 groups, not at a timeout
  CHECK(step.at("trajectories_trained") == 6);
  CHECK(step.at("trajectories") == 6);
  CHECK(step.at("dropped").at("zero_variance_groups") == 0);  // the generator's filter did it: the safety net is idle
  CHECK(step.at("real_tokens") == real_tokens);
  CHECK(step.at("padded_tokens").get<std::int64_t>() >= 0);
  if (baseline == "group") {
    CHECK(step.at("trajectories_filtered") == 15);
    CHECK(step.at("groups_filtered") == 5);
    CHECK(step.at("trajectories_sampled") == 6 + 15);
    CHECK(step.at("dropped").at("filtered_refused_groups") == 0);
    CHECK(ran.summary.trajectories_sampled == 21);
    CHECK(ran.summary.trajectories_filtered == 15);
  } else {
    // REINFORCE with the running baseline trains on zero-variance groups: a
    // filtered stream would bias it, so the filtered group is refused.
    CHECK(step.at("dropped").at("filtered_refused_groups") == 1);
    CHECK(step.at("trajectories_filtered") == 0);
    CHECK(step.at("trajectories_sampled") == 6);
  }
  std::filesystem::remove_all(out);
}
