// tests/rl/trainer_feed.h: feeding a real TrainerLoop from a test. A group
// of episodes sampled by a policy with rewards the test chooses, and one
// trainer step run over groups sent through a real GroupSender (the loop's
// Publisher and trajectory receiver on 127.0.0.1), returning the run's
// summary and its one step line. Used by trainer_counts_test.cc and
// trainer_batcher_test.cc.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "channel/group_channel.h"
#include "rollout/rollout.h"
#include "trainer/trainer_loop.h"
#include "zorplex/tasks.h"

namespace rltest {

// rewards.size() episodes of the first compositional task of `difficulty`
// and `task_seed`, sampled by `model` (version 1, temperature 1, at most 12
// new tokens), given these rewards; round_groups 1 and no filter counts
// (the caller sets what it needs).
inline algorithms::TrajectoryGroup sampled_group(const policy::Transformer& model, zorplex::Difficulty difficulty,
                                                 std::int64_t task_seed, const std::vector<double>& rewards,
                                                 std::uint64_t sequence) {
  zorplex::TaskGenerator tasks(zorplex::TaskKind::kCompositional, difficulty, task_seed);
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
  return group;
}

// The "step" records of a trainer.jsonl, in order.
inline std::vector<nlohmann::json> step_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("event", "") == "step") steps.push_back(record);
  }
  return steps;
}

struct OneStep {
  trainer::TrainerSummary summary;
  nlohmann::json step;  // the run's one step line
};

// Starts a TrainerLoop over `options` (options.steps should be 1), sends
// `groups` through a GroupSender with this high-water mark, runs the loop;
// REQUIREs that it succeeds with exactly one step line.
inline OneStep run_one_step(const trainer::TrainerOptions& options, policy::Transformer model,
                            const std::vector<algorithms::TrajectoryGroup>& groups, int high_water_mark = 64) {
  trainer::TrainerLoop loop(options, std::move(model), policy::Metadata{});
  auto started = loop.start();
  INFO((started ? std::string() : started.error().message));
  REQUIRE(started);
  channel::ChannelOptions channel_options;
  channel_options.high_water_mark = high_water_mark;
  auto sender = channel::GroupSender::connect(loop.trajectory_endpoint(), channel_options);
  REQUIRE(sender);
  for (const algorithms::TrajectoryGroup& g : groups) {
    auto sent = sender.value()->send(g);
    REQUIRE(sent);
    REQUIRE(sent.value());
  }
  std::atomic<bool> stop{false};
  auto summary = loop.run(stop);
  INFO((summary ? std::string() : summary.error().message));
  REQUIRE(summary);
  const std::vector<nlohmann::json> steps = step_lines(options.out_dir + "/trainer.jsonl");
  REQUIRE(steps.size() == 1);
  return OneStep{summary.value(), steps.front()};
}

}  // namespace rltest
