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
  zorplex::TaskGenerator tasks(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, task_seed);
  const zorplex::Task task = tasks.next();
  std::vector<rollout::RolloutRequest> requests(rewards.size(), rollout::RolloutRequest{task, &tasks.tools()});
  rollout::RolloutOptions sampling;
  sampling.format.system_prompt = "Use LOOKUP.";
  sampling.sampling.max_new_tokens = 12;
  sampling.sampling.temperature = 1.0;
  auto sampled = rollout::run_rollouts(model, requests, sampling);
  REQUIRE(sampled.ok());
  algorithms::TrajectoryGroup group;
  group.trajectories = sampled.value();
  for (std::size_t i = 0; i < rewards.size(); ++i) group.trajectories[i].score.reward = rewards[i];
  group.version_start = 1;
  group.version_end = 1;
  group.sequence = sequence;
  group.task_seed = static_cast<std::uint64_t>(task_seed);
  group.temperature = 1.0;
  group.filtered_groups = filtered_groups;
  group.filtered_trajectories = filtered_groups * 3;
  group.round_groups = round_groups;
  return group;
}

nlohmann::json only_step_line(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json step;
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("event", "") == "step") {
      step = record;
      ++steps;
    }
  }
  REQUIRE(steps == 1);
  return step;
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

  trainer::TrainerLoop loop(options, std::move(model).value(), policy::Metadata{});
  auto started = loop.start();
  INFO((started ? std::string() : started.error().message));
  REQUIRE(started);
  channel::ChannelOptions channel_options;
  channel_options.high_water_mark = 16;
  auto sender = channel::GroupSender::connect(loop.trajectory_endpoint(), channel_options);
  REQUIRE(sender);
  for (const algorithms::TrajectoryGroup& g : round) {
    auto sent = sender.value()->send(g);
    REQUIRE(sent);
    REQUIRE(sent.value());
  }
  std::atomic<bool> stop{false};
  auto summary = loop.run(stop);
  INFO((summary ? std::string() : summary.error().message));
  REQUIRE(summary);

  const nlohmann::json step = only_step_line(out + "/trainer.jsonl");
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
    CHECK(summary.value().trajectories_sampled == 21);
    CHECK(summary.value().trajectories_filtered == 15);
  } else {
    // REINFORCE with the running baseline trains on zero-variance groups: a
    // filtered stream would bias it, so the filtered group is refused.
    CHECK(step.at("dropped").at("filtered_refused_groups") == 1);
    CHECK(step.at("trajectories_filtered") == 0);
    CHECK(step.at("trajectories_sampled") == 6);
  }
  std::filesystem::remove_all(out);
}
