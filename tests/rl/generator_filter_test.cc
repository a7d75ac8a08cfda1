// A generator round with the dynamic filter, through a real GeneratorLoop: a
// real Publisher of a tiny random policy (it never earns a reward, so every
// group's rewards are all equal), the trajectory channel on 127.0.0.1. With
// the filter on the round samples up to the cap, sends only its last group
// (so the trainer hears from it) stamped with everything filtered before it,
// and its round event says so; with it off the round sends every group.
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tiny_policy.h"
#include "channel/group_channel.h"
#include "generator/generator_loop.h"
#include "loop/policy_weights.h"
#include "loop/run_log.h"
#include "weightsync/publisher.h"

namespace {

using rltest::model_with_seed;
using rltest::tiny_config;

nlohmann::json round_event(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.value("event", "") == "round") return record;
  }
  FAIL("no round event in " << path);
  return {};
}

}  // namespace

TEST_CASE("generator round with the dynamic filter: zero-variance groups are not sent, prompts are sampled up "
          "to the cap, and what was filtered travels with the group sent",
          "[rl][generator][dynamic_filter]") {
  torch::set_num_threads(1);
  const bool filter = GENERATE(true, false);
  auto layout = loop::policy_weight_layout(tiny_config());
  REQUIRE(layout);
  auto publisher = weightsync::Publisher::create(layout.value(), {});
  REQUIRE(publisher.ok());
  REQUIRE(loop::publish_policy(**publisher, 1, model_with_seed(3)));
  auto receiver = channel::GroupReceiver::bind("tcp://127.0.0.1:*", {});
  REQUIRE(receiver);

  const std::string metrics_path =
      "/tmp/ws_generator_filter_test_" + std::to_string(::getpid()) + (filter ? "_on" : "_off") + ".jsonl";
  std::filesystem::remove(metrics_path);
  auto metrics = loop::JsonlFile::open(metrics_path, false);
  REQUIRE(metrics);
  generator::GeneratorOptions options;
  options.weights_addresses = {(*publisher)->address()};
  options.trajectory_endpoint = receiver.value()->endpoint();
  options.sync = true;
  options.prompts = 2;
  options.group_size = 2;
  options.max_rounds = 1;
  options.dynamic_filter = filter;
  options.oversample_cap = 3;
  options.trainer_timeout = std::chrono::seconds(30);
  generator::GeneratorLoop loop(options, model_with_seed(9), policy::PromptFormat{}, metrics.value().get(), nullptr);
  std::atomic<bool> stop{false};
  zorplex::Result<generator::GeneratorTotals> totals = zorplex::Error{"not run"};
  std::thread runner([&] { totals = loop.run(stop); });
  std::vector<algorithms::TrajectoryGroup> received;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const std::size_t expected = filter ? 1 : 2;
  while (received.size() < expected && std::chrono::steady_clock::now() < until) {
    auto message = receiver.value()->receive(std::chrono::milliseconds(200));
    if (message && *message) received.push_back(std::move(*message).value());
  }
  runner.join();
  INFO((totals ? std::string() : totals.error().message));
  REQUIRE(totals);
  metrics.value().reset();
  const nlohmann::json round = round_event(metrics_path);
  std::filesystem::remove(metrics_path);

  REQUIRE(received.size() == expected);
  if (filter) {
    // No group of a random policy has a signal: 3 x 2 prompts sampled in
    // batches of the missing count, all filtered but the last, which is sent.
    CHECK(round.at("prompts_sampled") == 6);
    CHECK(round.at("batches") == 3);
    CHECK(round.at("groups_filtered") == 5);
    CHECK(round.at("trajectories_filtered") == 10);
    CHECK(round.at("groups_sent") == 1);
    CHECK(round.at("cap_hit") == true);
    CHECK(round.at("trajectories") == 12);  // every episode sampled
    CHECK(received[0].filtered_groups == 5);
    CHECK(received[0].filtered_trajectories == 10);
    CHECK(received[0].round_groups == 1);
  } else {
    CHECK(round.at("prompts_sampled") == 2);
    CHECK(round.at("groups_filtered") == 0);
    CHECK(round.at("groups_sent") == 2);
    CHECK(round.at("cap_hit") == false);
    for (const algorithms::TrajectoryGroup& g : received) {
      CHECK(g.filtered_groups == 0);
      CHECK(g.round_groups == 2);
    }
  }
  CHECK(totals.value().groups_sent == expected);
}
