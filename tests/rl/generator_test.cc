// The generator's in-flight weight updates (generator/staged_policy.h): a
// real weightsync Publisher of policy versions, a real Subscriber, real
// rollouts. A version published while sequences are being sampled is
// installed at the next token boundary; the tokens after it carry its
// version, the ones before the older one; a lost trainer leaves the
// installed weights generating.
#include <torch/torch.h>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "generator/staged_policy.h"
#include "loop/policy_weights.h"
#include "loop/run_log.h"
#include "rollout/rollout.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"
#include "zorplex/tasks.h"

namespace {

policy::ModelConfig tiny_config() {
  policy::ModelConfig c;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.d_ff = 64;
  c.max_seq_len = 256;
  return c;
}

policy::Transformer model_with_seed(std::uint64_t seed) {
  auto model = policy::Transformer::create(tiny_config(), seed);
  REQUIRE(model);
  return std::move(model).value();
}

bool same_weights(const policy::Transformer& a, const policy::Transformer& b) {
  return torch::equal(a.flat_parameters(), b.flat_parameters());
}

}  // namespace

TEST_CASE("generator in flight: a version published mid-rollout is installed at a token boundary",
          "[rl][generator]") {
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  torch::set_num_threads(1);
  const policy::Transformer first = model_with_seed(1);
  const policy::Transformer second = model_with_seed(2);
  const policy::Transformer starting = model_with_seed(9);
  auto layout = loop::policy_weight_layout(tiny_config());
  REQUIRE(layout);
  weightsync::PublisherOptions publisher_options;
  publisher_options.checksum = true;
  auto publisher = weightsync::Publisher::create(layout.value(), publisher_options);
  REQUIRE(publisher.ok());
  REQUIRE(loop::publish_policy(**publisher, 1, first));
  weightsync::SubscriberOptions subscriber_options;
  subscriber_options.transport = transport;
  auto subscriber = weightsync::Subscriber::connect((*publisher)->address(), subscriber_options);
  REQUIRE(subscriber.ok());

  const std::string metrics_path =
      "/tmp/ws_generator_test_" + std::to_string(::getpid()) + "_" + transport + ".jsonl";
  std::filesystem::remove(metrics_path);
  auto metrics = loop::JsonlFile::open(metrics_path, false);
  REQUIRE(metrics);
  auto made = generator::StagedPolicy::create(std::move(subscriber).value(), starting, 0,
                                              metrics.value().get(), nullptr);
  INFO((made ? std::string() : made.error().message));
  REQUIRE(made);
  generator::StagedPolicy& policy = *made.value();
  CHECK(policy.version() == 0);
  CHECK(&policy.model() == &starting);  // nothing installed yet: the starting model samples
  auto installed = policy.wait_and_install(std::chrono::milliseconds(5000));
  REQUIRE(installed);
  REQUIRE(installed.value());
  CHECK(policy.version() == 1);
  CHECK(same_weights(policy.model(), first));

  // Rollouts whose fourth step sees version 2 arrive: the trainer publishes
  // it, the background pull stages it, the next token boundary installs it.
  zorplex::TaskGenerator tasks(zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy, 42);
  std::vector<rollout::RolloutRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back({tasks.next(), &tasks.tools()});
  rollout::RolloutOptions options;
  options.sampling.temperature = 1.0;
  options.sampling.seed = 5;
  const policy::StepHook install_at_boundaries = policy.hook();
  int steps = 0;
  options.step_hook = [&]() -> policy::ModelAtStep {
    if (++steps == 4) {
      REQUIRE(loop::publish_policy(**publisher, 2, second));
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (policy.newest_known() < 2 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return install_at_boundaries();
  };
  auto trajectories = rollout::run_rollouts(policy.model(), requests, options);
  REQUIRE(trajectories);
  CHECK(policy.version() == 2);
  CHECK(same_weights(policy.model(), second));
  int spanning = 0;
  for (const rollout::Trajectory& t : trajectories.value()) {
    REQUIRE(t.token_versions.size() == t.tokens.size());
    CHECK(t.oldest_version() == 1);  // every sequence started on version 1
    std::uint64_t previous = 0;
    for (std::size_t i = 0; i < t.tokens.size(); ++i) {
      if (t.generated[i] == 0) {
        CHECK(t.token_versions[i] == 0);
        continue;
      }
      CHECK(t.token_versions[i] >= previous);  // versions never go back within a sequence
      previous = t.token_versions[i];
    }
    if (t.newest_version() == 2) ++spanning;
  }
  CHECK(spanning > 0);  // sequences in flight went on under version 2

  // The pause is logged apart from the background pull.
  metrics.value().reset();
  std::ifstream in(metrics_path);
  int installs = 0;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("event", "") != "install") continue;
    ++installs;
    CHECK(record.value("blocked_seconds", 1.0) < 0.05);
    CHECK(record.value("mode", "") == "swap");
  }
  CHECK(installs == 2);
  std::filesystem::remove(metrics_path);

  // The trainer dies: version 2 keeps generating; nothing is installed.
  publisher->reset();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (policy.status().ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_FALSE(policy.status().ok());
  auto nothing = policy.install_if_staged();
  REQUIRE(nothing);
  CHECK_FALSE(nothing.value());
  CHECK(policy.version() == 2);
  CHECK(same_weights(policy.model(), second));
  options.step_hook = policy.hook();
  auto after_loss = rollout::run_rollouts(policy.model(), requests, options);
  REQUIRE(after_loss);
  for (const rollout::Trajectory& t : after_loss.value()) CHECK(t.oldest_version() == 2);
}

TEST_CASE("generator in flight: a narrowed wire is refused with the reason (it pulls between rounds)",
          "[rl][generator]") {
  const policy::Transformer starting = model_with_seed(9);
  auto narrow = loop::policy_wire_layout(tiny_config(), weightsync::DType::kBFloat16);
  REQUIRE(narrow);
  auto publisher = weightsync::Publisher::create(narrow.value(), {});
  REQUIRE(publisher.ok());
  auto subscriber = weightsync::Subscriber::connect((*publisher)->address(), {});
  REQUIRE(subscriber.ok());
  auto made = generator::StagedPolicy::create(std::move(subscriber).value(), starting, 0, nullptr, nullptr);
  REQUIRE_FALSE(made);
  CHECK_THAT(made.error().message, Catch::Contains("float32 layout"));
}
