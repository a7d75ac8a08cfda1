// The trainer with Marin's token-budget batcher, through a real TrainerLoop
// (its Publisher and trajectory receiver on 127.0.0.1) fed by a
// GroupSender: the step line's "environments" object, the budget never
// exceeded, the spill wait for an environment that sends nothing, the
// fractions kept when both send, the sync round capped; and the parsing of
// --token-budget, --env-fractions and --spill-wait.
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/environment_buffers.h"
#include "channel/group_channel.h"
#include "rollout/rollout.h"
#include "tiny_policy.h"
#include "trainer_feed.h"
#include "trainer/algorithm_choice.h"
#include "trainer/batcher_choice.h"
#include "trainer/trainer_loop.h"
#include "zorplex/tasks.h"

namespace {

using rltest::tiny_config;

const std::string kEasy = "compositional:easy";
const std::string kMedium = "compositional:medium";

// Three episodes of one compositional task of `difficulty` sampled by
// `model` (version 1, temperature 1), rewards 1.2, 0, 0.2: a signal.
algorithms::TrajectoryGroup group_on(const policy::Transformer& model, zorplex::Difficulty difficulty,
                                     std::int64_t task_seed, std::uint64_t sequence) {
  algorithms::TrajectoryGroup group = rltest::sampled_group(model, difficulty, task_seed, {1.2, 0.0, 0.2}, sequence);
  group.round_groups = 4;
  return group;
}

trainer::TrainerOptions budget_options(const std::string& out, bool sync, std::uint64_t budget,
                                       std::map<std::string, double> fractions, double spill_wait_s) {
  trainer::TrainerOptions options;
  options.sync = sync;
  options.steps = 1;
  options.generators = 1;
  options.round_timeout_s = 60.0;
  options.idle_timeout_s = 60.0;
  options.checkpoint_every = 0;
  options.out_dir = out;
  options.update.lr = 1e-4;
  if (sync) options.replay.max_staleness = 0;
  trainer::AlgorithmChoice choice;
  REQUIRE(trainer::apply_algorithm_choice(choice, options).ok());
  options.batcher.token_budget = budget;
  options.batcher.fractions = std::move(fractions);
  options.batcher.spill_wait_s = spill_wait_s;
  return options;
}

// Runs one step over `groups`; returns its step line.
nlohmann::json run_one_step(const trainer::TrainerOptions& options, policy::Transformer model,
                            const std::vector<algorithms::TrajectoryGroup>& groups) {
  return rltest::run_one_step(options, std::move(model), groups).step;
}

std::uint64_t largest_group(const std::vector<algorithms::TrajectoryGroup>& groups) {
  std::uint64_t largest = 0;
  for (const auto& g : groups) largest = std::max(largest, algorithms::group_tokens(g, 256));
  return largest;
}

}  // namespace

TEST_CASE("trainer with a token budget: an environment that sends nothing is waited for, then spilled",
          "[rl][trainer][batcher]") {
  torch::set_num_threads(1);
  const std::string out = "/tmp/ws_trainer_batcher_spill_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  const policy::Transformer model = rltest::model_with_seed(5);
  std::vector<algorithms::TrajectoryGroup> groups;  // medium only
  for (std::uint64_t i = 0; i < 8; ++i)
    groups.push_back(group_on(model, zorplex::Difficulty::kMedium, 30 + i, i));
  const std::uint64_t budget = 600;
  const trainer::TrainerOptions options =
      budget_options(out, false, budget, {{kEasy, 0.5}, {kMedium, 0.5}}, 1.0);
  const nlohmann::json step = run_one_step(options, rltest::model_with_seed(5), groups);

  CHECK(step.at("token_budget") == budget);
  CHECK(step.at("wait_seconds").get<double>() >= 1.0);  // the spill wait ran out
  CHECK(step.at("wait_seconds").get<double>() < 30.0);
  const nlohmann::json& environments = step.at("environments");
  const nlohmann::json& easy = environments.at(kEasy);
  const nlohmann::json& medium = environments.at(kMedium);
  CHECK(easy.at("spilled_tokens") == 300);  // its whole share: floor(0.5 x 600)
  CHECK(easy.at("new_rollouts") == 0);
  CHECK(easy.at("tokens_used") == 0);
  CHECK(medium.at("spilled_tokens") == 0);
  CHECK(medium.at("new_rollouts") == 24);
  CHECK(medium.at("frac_used").get<double>() == 1.0);
  // Medium filled the rest: within one group of the whole budget, never over it.
  const std::uint64_t used = medium.at("tokens_used").get<std::uint64_t>();
  CHECK(used <= budget);
  CHECK(used + largest_group(groups) > budget);
  CHECK(used + medium.at("tokens_in_buffer").get<std::uint64_t>() ==
        medium.at("new_tokens").get<std::uint64_t>());
  CHECK(medium.at("rollouts_used") == step.at("trajectories"));
  for (const char* key : {"rollouts_in_buffer", "tokens_in_buffer", "frac_on_policy", "new_rollouts",
                          "new_tokens", "new_generated_tokens", "reward_mean", "reward_std", "correct_rate",
                          "frac_truncated", "rollouts_used", "tokens_used", "frac_used", "spilled_tokens"}) {
    CHECK(easy.contains(key));
    CHECK(medium.contains(key));
  }
  CHECK(medium.at("reward_mean").get<double>() == Approx(1.4 / 3.0));
  std::filesystem::remove_all(out);
}

TEST_CASE("trainer with a token budget: two environments that both send share it by their fractions",
          "[rl][trainer][batcher]") {
  torch::set_num_threads(1);
  const std::string out = "/tmp/ws_trainer_batcher_share_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  const policy::Transformer model = rltest::model_with_seed(5);
  std::vector<algorithms::TrajectoryGroup> groups;
  for (std::uint64_t i = 0; i < 12; ++i) {
    groups.push_back(
        group_on(model, i % 2 == 0 ? zorplex::Difficulty::kEasy : zorplex::Difficulty::kMedium, 50 + i, i));
  }
  const std::uint64_t budget = 800;
  // A spill wait of 30 s: a step that waited for it would show.
  const trainer::TrainerOptions options =
      budget_options(out, false, budget, {{kEasy, 0.25}, {kMedium, 0.75}}, 30.0);
  const nlohmann::json step = run_one_step(options, rltest::model_with_seed(5), groups);
  CHECK(step.at("wait_seconds").get<double>() < 20.0);
  const nlohmann::json& easy = step.at("environments").at(kEasy);
  const nlohmann::json& medium = step.at("environments").at(kMedium);
  const std::uint64_t e = easy.at("tokens_used").get<std::uint64_t>();
  const std::uint64_t m = medium.at("tokens_used").get<std::uint64_t>();
  const double largest = static_cast<double>(largest_group(groups));
  CHECK(e + m <= budget);
  CHECK(e > 0);
  CHECK(std::abs(static_cast<double>(e) - 0.25 * static_cast<double>(e + m)) <= largest);
  CHECK(std::abs(static_cast<double>(m) - 0.75 * static_cast<double>(e + m)) <= largest);
  CHECK(easy.at("spilled_tokens") == 0);
  CHECK(medium.at("spilled_tokens") == 0);
  CHECK(easy.at("frac_used").get<double>() + medium.at("frac_used").get<double>() == Approx(1.0));
  CHECK(easy.at("rollouts_used").get<int>() + medium.at("rollouts_used").get<int>() ==
        step.at("trajectories"));
  std::filesystem::remove_all(out);
}

TEST_CASE("trainer with a token budget in sync mode: the round decides what arrives, the budget caps it",
          "[rl][trainer][batcher]") {
  torch::set_num_threads(1);
  const std::string out = "/tmp/ws_trainer_batcher_sync_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  const policy::Transformer model = rltest::model_with_seed(5);
  std::vector<algorithms::TrajectoryGroup> round;  // one generator's round of 4 groups
  for (std::uint64_t i = 0; i < 4; ++i) {
    round.push_back(
        group_on(model, i % 2 == 0 ? zorplex::Difficulty::kEasy : zorplex::Difficulty::kMedium, 70 + i, i));
  }
  std::uint64_t all = 0;
  for (const auto& g : round) all += algorithms::group_tokens(g, 256);
  // One token short of the whole round: at least one group stays out.
  REQUIRE(all - 1 >= 256);
  const std::uint64_t budget = all - 1;
  const trainer::TrainerOptions options = budget_options(out, true, budget, {}, 5.0);
  const nlohmann::json step = run_one_step(options, rltest::model_with_seed(5), round);
  CHECK(step.at("wait_seconds").get<double>() < 30.0);  // the round ended with its 4 groups
  const nlohmann::json& easy = step.at("environments").at(kEasy);
  const nlohmann::json& medium = step.at("environments").at(kMedium);
  const std::uint64_t used =
      easy.at("tokens_used").get<std::uint64_t>() + medium.at("tokens_used").get<std::uint64_t>();
  CHECK(used <= budget);
  CHECK(used > 0);
  CHECK(step.at("groups").get<int>() < 4);  // capped: not the whole round
  CHECK(easy.at("new_rollouts").get<int>() + medium.at("new_rollouts").get<int>() == 12);
  std::filesystem::remove_all(out);
}

TEST_CASE(
    "trainer with a token budget: groups larger than the whole budget end the run with an error, not a hang",
    "[rl][trainer][batcher]") {
  torch::set_num_threads(1);
  const std::string out = "/tmp/ws_trainer_batcher_large_" + std::to_string(::getpid());
  std::filesystem::remove_all(out);
  const policy::Transformer model = rltest::model_with_seed(5);
  algorithms::TrajectoryGroup large = group_on(model, zorplex::Difficulty::kEasy, 90, 0);
  const std::vector<rollout::Trajectory> three = large.trajectories;
  while (algorithms::group_tokens(large, 256) <= 256) {
    large.trajectories.insert(large.trajectories.end(), three.begin(), three.end());
  }
  trainer::TrainerOptions options = budget_options(out, false, 256, {}, 1.0);
  options.idle_timeout_s = 2.0;
  trainer::TrainerLoop loop(options, rltest::model_with_seed(5), policy::Metadata{});
  REQUIRE(loop.start());
  auto sender = channel::GroupSender::connect(loop.trajectory_endpoint(), channel::ChannelOptions{});
  REQUIRE(sender);
  // Sent every 0.5 s: arrivals go on, so only the budget rule can end the wait.
  std::atomic<bool> stop{false};
  std::thread feeder([&] {
    for (std::uint64_t i = 0; i < 16 && !stop.load(); ++i) {
      large.sequence = i;
      (void)sender.value()->send(large);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  const auto started = std::chrono::steady_clock::now();
  auto summary = loop.run(stop);
  stop.store(true);
  feeder.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  REQUIRE_FALSE(summary);
  CHECK_THAT(summary.error().message, Catch::Contains("no queued group fitted --token-budget 256"));
  CHECK(seconds < 7.0);
  std::filesystem::remove_all(out);
}

TEST_CASE(
    "trainer with a token budget: bad --token-budget, --env-fractions and --spill-wait are refused naming "
    "the flag",
    "[rl][trainer][batcher]") {
  trainer::BatcherFlags off;
  auto none = trainer::batcher_options_from_flags(off);
  REQUIRE(none);
  CHECK(none.value().token_budget == 0);

  trainer::BatcherFlags flags;
  flags.token_budget = 4096;
  flags.env_fractions = "compositional:easy=0.3,compositional:medium=0.7";
  flags.spill_wait_s = 500.0;
  flags.spill_wait_given = true;
  flags.idle_timeout_s = 60.0;
  auto parsed = trainer::batcher_options_from_flags(flags);
  REQUIRE(parsed);
  CHECK(parsed.value().token_budget == 4096);
  CHECK(parsed.value().fractions.at(kMedium) == Approx(0.7));
  CHECK(parsed.value().spill_wait_s == 60.0);  // never longer than --idle-timeout

  struct Bad {
    trainer::BatcherFlags flags;
    std::string says;
  };
  std::vector<Bad> bad;
  auto with = [&](auto change, const std::string& says) {
    trainer::BatcherFlags f;
    f.token_budget = 4096;
    change(f);
    bad.push_back({f, says});
  };
  with([](trainer::BatcherFlags& f) { f.token_budget = -1; },
       "--token-budget -1: must be a number of tokens >= 0");
  with([](trainer::BatcherFlags& f) { f.env_fractions = "compositional:easy=0.6,compositional:medium=0.6"; },
       "--env-fractions: the fractions in");
  with([](trainer::BatcherFlags& f) { f.env_fractions = "compositional:hard=x"; }, "--env-fractions: ");
  with([](trainer::BatcherFlags& f) { f.env_fractions = "arithmetic=0.5"; },
       "--env-fractions: 'arithmetic=0.5': unknown task kind");
  with([](trainer::BatcherFlags& f) { f.env_fractions = "compositional:easy:0.5"; }, "--env-fractions: ");
  with([](trainer::BatcherFlags& f) { f.spill_wait_s = -2.0; },
       "--spill-wait: must be a number of seconds >= 0");
  with(
      [](trainer::BatcherFlags& f) {
        f.token_budget = 0;
        f.env_fractions = "simple=1";
      },
      "--env-fractions needs --token-budget");
  with(
      [](trainer::BatcherFlags& f) {
        f.token_budget = 0;
        f.spill_wait_given = true;
      },
      "--spill-wait needs --token-budget");
  with(
      [](trainer::BatcherFlags& f) {
        f.sync = true;
        f.spill_wait_given = true;
      },
      "--spill-wait: sync mode never waits");
  for (const Bad& b : bad) {
    auto result = trainer::batcher_options_from_flags(b.flags);
    INFO(b.says);
    REQUIRE_FALSE(result);
    CHECK_THAT(result.error().message, Catch::Contains(b.says));
  }
  algorithms::BatcherOptions small;
  small.token_budget = 100;
  auto checked = trainer::check_token_budget(small, 256);
  REQUIRE_FALSE(checked);
  CHECK_THAT(checked.error().message,
             Catch::Contains("--token-budget: the token budget (100) is below the policy's "
                             "max_seq_len (256)"));
  small.token_budget = 256;
  CHECK(trainer::check_token_budget(small, 256));
}
