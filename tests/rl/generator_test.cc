// The generator's in-flight weight updates (generator/staged_policy.h): a
// real weightsync Publisher of policy versions, a real Subscriber, real
// rollouts. A version published while sequences are being sampled is
// installed at the next token boundary; the tokens after it carry its
// version, the ones before the older one; a lost trainer leaves the
// installed weights generating. The generator's place in its task stream
// (generator/generator_state.h) survives a restart, and its transcripts
// (rollout/transcript_writer.h) match what it sent.
#include <torch/torch.h>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "tiny_policy.h"
#include "channel/group_channel.h"
#include "generator/generator_loop.h"
#include "generator/generator_state.h"
#include "generator/staged_policy.h"
#include "loop/policy_weights.h"
#include "loop/run_log.h"
#include "rollout/rollout.h"
#include "weightsync/publisher.h"
#include "weightsync/subscriber.h"
#include "zorplex/tasks.h"

namespace {

using rltest::model_with_seed;
using rltest::tiny_config;

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

namespace {

// A stand-in trainer: a Publisher serving version 1 and the trajectory
// channel's receiving end, in this process.
struct TinyTrainer {
  std::unique_ptr<weightsync::Publisher> publisher;
  std::unique_ptr<channel::GroupReceiver> receiver;

  TinyTrainer() {
    auto layout = loop::policy_weight_layout(tiny_config());
    REQUIRE(layout);
    auto made = weightsync::Publisher::create(layout.value(), {});
    REQUIRE(made.ok());
    publisher = std::move(made).value();
    REQUIRE(loop::publish_policy(*publisher, 1, model_with_seed(1)));
    auto bound = channel::GroupReceiver::bind("tcp://127.0.0.1:*", {});
    REQUIRE(bound);
    receiver = std::move(bound).value();
  }
};

generator::GeneratorOptions two_round_options(const TinyTrainer& trainer, const std::string& state_file) {
  generator::GeneratorOptions options;
  options.weights_addresses = {trainer.publisher->address()};
  options.trajectory_endpoint = trainer.receiver->endpoint();
  options.id = 1;
  options.staged_updates = false;  // pulls between rounds: round 2 goes on with version 1
  options.prompts = 2;
  options.group_size = 2;
  options.max_rounds = 2;
  options.dynamic_filter = false;  // one group per prompt (a random policy's would all be filtered)
  options.tasks = {rollout::TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kEasy},
                   rollout::TaskMix{zorplex::TaskKind::kCompositional, zorplex::Difficulty::kMedium}};
  options.task_seed_base = 500;
  options.trainer_timeout = std::chrono::seconds(30);
  options.state_file = state_file;
  return options;
}

// Runs a generator to its max_rounds and returns the groups it sent, in order.
std::vector<algorithms::TrajectoryGroup> run_generator(TinyTrainer& trainer, generator::GeneratorOptions options,
                                                       rollout::TranscriptWriter* transcripts) {
  const std::size_t expected = static_cast<std::size_t>(options.prompts * options.max_rounds);
  std::atomic<bool> stop{false};
  zorplex::Result<generator::GeneratorTotals> totals = zorplex::Error{"not run"};
  std::thread worker([&] {
    generator::GeneratorLoop loop(std::move(options), model_with_seed(9), policy::PromptFormat{}, nullptr,
                                  nullptr, transcripts);
    totals = loop.run(stop);
  });
  std::vector<algorithms::TrajectoryGroup> groups;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (groups.size() < expected && std::chrono::steady_clock::now() < until) {
    auto received = trainer.receiver->receive(std::chrono::milliseconds(200));
    if (!received) continue;
    REQUIRE(received->ok());
    groups.push_back(std::move(*received).value());
  }
  worker.join();
  INFO((totals ? std::string() : totals.error().message));
  REQUIRE(totals);
  CHECK(totals.value().rounds == 2);
  REQUIRE(groups.size() == expected);
  return groups;
}

std::string scratch_dir(const std::string& name) {
  const std::string dir = "/tmp/ws_generator_test_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("generator state: stopped after 2 rounds and resumed, the task stream continues (no repeats, no gaps)",
          "[rl][generator][resume]") {
  torch::set_num_threads(1);
  const std::string dir = scratch_dir("resume");
  const std::string state_file = generator::generator_state_file(dir, 1);
  TinyTrainer trainer;
  auto transcripts = rollout::TranscriptWriter::open(dir + "/transcripts.jsonl");
  REQUIRE(transcripts);

  std::vector<algorithms::TrajectoryGroup> sent =
      run_generator(trainer, two_round_options(trainer, state_file), transcripts.value().get());
  auto saved = generator::load_generator_state(state_file);
  INFO((saved ? std::string() : saved.error().message));
  REQUIRE(saved);
  CHECK(saved.value().position.next_task == 4);
  CHECK(saved.value().position.next_round == 2);
  CHECK(saved.value().position.next_sequence == 4);
  CHECK(saved.value().tasks == std::vector<std::string>{"compositional:easy", "compositional:medium"});
  CHECK_FALSE(std::filesystem::exists(state_file + ".tmp"));  // written through a temp file, renamed
  // Flushed at the end of every round: all 8 lines are on disk while the writer is still open.
  {
    std::ifstream partial(dir + "/transcripts.jsonl");
    int lines = 0;
    for (std::string line; std::getline(partial, line);) ++lines;
    CHECK(lines == 8);
  }

  // A new process: the same flags, resumed from the state file.
  generator::GeneratorOptions resumed = two_round_options(trainer, state_file);
  REQUIRE(generator::check_same_stream(saved.value(), saved.value(), state_file));
  resumed.start = saved.value().position;
  std::vector<algorithms::TrajectoryGroup> after = run_generator(trainer, resumed, transcripts.value().get());
  sent.insert(sent.end(), std::make_move_iterator(after.begin()), std::make_move_iterator(after.end()));

  // Task n of generator 1 has seed 500 + 1,000,000 + n, and the kinds alternate by n.
  REQUIRE(sent.size() == 8);
  for (std::size_t n = 0; n < sent.size(); ++n) {
    INFO("group " << n);
    CHECK(sent[n].task_seed == 500 + 1000000 + n);
    CHECK(sent[n].sequence == n);
    CHECK(sent[n].generator == 1);
    CHECK(sent[n].trajectories.front().task.difficulty ==
          (n % 2 == 0 ? zorplex::Difficulty::kEasy : zorplex::Difficulty::kMedium));
  }
  auto final_state = generator::load_generator_state(state_file);
  REQUIRE(final_state);
  CHECK(final_state.value().position.next_task == 8);
  CHECK(final_state.value().position.next_round == 4);

  // The transcripts: one line per trajectory, matching what was sent.
  transcripts.value().reset();
  std::ifstream in(dir + "/transcripts.jsonl");
  std::map<std::pair<std::uint64_t, std::uint64_t>, nlohmann::json> lines;  // (sequence, index) -> line
  std::vector<std::uint64_t> rounds;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    rounds.push_back(j.at("round").get<std::uint64_t>());
    CHECK(lines.emplace(std::make_pair(j.at("group_sequence").get<std::uint64_t>(),
                                       j.at("index_in_group").get<std::uint64_t>()),
                        j)
              .second);
  }
  CHECK(lines.size() == 16);
  // Each round's 4 trajectories, and the round counter (the sampling seed's position) goes on.
  CHECK(rounds == std::vector<std::uint64_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  for (const algorithms::TrajectoryGroup& group : sent) {
    for (std::size_t g = 0; g < group.trajectories.size(); ++g) {
      INFO("group " << group.sequence << " trajectory " << g);
      const auto found = lines.find({group.sequence, g});
      REQUIRE(found != lines.end());
      const nlohmann::json& j = found->second;
      const rollout::Trajectory& t = group.trajectories[g];
      CHECK(j.at("generator") == 1);
      CHECK(j.at("task_seed") == group.task_seed);
      CHECK(j.at("data_epoch") == 0);
      CHECK(j.at("question") == t.task.question);
      CHECK(j.at("difficulty") == zorplex::difficulty_name(t.task.difficulty));
      CHECK(j.at("reward").get<double>() == t.score.reward);
      CHECK(j.at("correct") == t.score.correct);
      CHECK(j.at("sent") == true);
      CHECK(j.at("generated_tokens") == t.generated_tokens());
      CHECK(j.at("oldest_version") == 1);
      CHECK(j.at("newest_version") == 1);
      CHECK(j.at("temperature").get<double>() == group.temperature);
      // Each turn as the trainer received it (the model's bytes as JSON writes them: not UTF-8 as U+FFFD).
      const auto as_written = [](const std::string& text) {
        return nlohmann::json::parse(
            nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      };
      const std::vector<rollout::TranscriptTurn> turns = rollout::transcript_turns(t);
      REQUIRE(j.at("turns").size() == turns.size());
      for (std::size_t k = 0; k < turns.size(); ++k) {
        CHECK(j.at("turns")[k].at("model") == as_written(turns[k].model));
        CHECK(j.at("turns")[k].at("tool_result") == as_written(turns[k].tool_result));
      }
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("generator state: a corrupt, missing or mismatched state file is refused, saying what to do",
          "[rl][generator][resume]") {
  const std::string dir = scratch_dir("corrupt");
  const std::string path = generator::generator_state_file(dir, 2);
  CHECK(path == dir + "/generator-2-state.json");
  generator::GeneratorState state;
  state.id = 2;
  state.tasks = {"compositional:easy"};
  state.task_seed_base = 200000;
  state.sampling_seed = 1;
  state.position = {12, 3, 12};

  auto missing = generator::load_generator_state(path);
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains(path) && Catch::Contains("no state file") &&
                                          Catch::Contains("without --resume"));

  REQUIRE(generator::save_generator_state(path, state));
  auto loaded = generator::load_generator_state(path);
  REQUIRE(loaded);
  CHECK(loaded.value().position.next_task == 12);
  CHECK(loaded.value().position.next_round == 3);
  CHECK(loaded.value().position.next_sequence == 12);
  CHECK(loaded.value().tasks == state.tasks);
  CHECK(loaded.value().task_seed_base == 200000);

  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto write = [&](const std::string& contents) {
    std::ofstream out(path, std::ios::trunc);
    out << contents;
  };
  const auto refused_with = [&](const std::string& contents, const std::string& why) {
    write(contents);
    auto result = generator::load_generator_state(path);
    REQUIRE_FALSE(result);
    CHECK_THAT(result.error().message, Catch::Contains("cannot resume from " + path) && Catch::Contains(why) &&
                                           Catch::Contains("without --resume"));
  };
  refused_with(text.substr(0, text.size() / 2), "not JSON");                         // truncated
  refused_with("", "not JSON");                                                      // empty
  refused_with("{\"format\": \"something else\"}", "not a generator state");        // another file
  auto json = nlohmann::json::parse(text);
  json["next_task"] = 2000000;  // data_epoch still 0
  refused_with(json.dump(), "does not match next_task");
  json = nlohmann::json::parse(text);
  json.erase("next_round");
  refused_with(json.dump(), "missing or of the wrong type");
  json = nlohmann::json::parse(text);
  json["next_task"] = -4;
  refused_with(json.dump(), "missing or of the wrong type");
  json = nlohmann::json::parse(text);
  json["format_version"] = 99;
  refused_with(json.dump(), "format_version 99");

  // Another stream: every difference is named, with both values.
  generator::GeneratorState other = state;
  other.id = 3;
  other.tasks = {"compositional:medium"};
  other.task_seed_base = 7;
  auto mismatch = generator::check_same_stream(state, other, path);
  REQUIRE_FALSE(mismatch);
  CHECK_THAT(mismatch.error().message,
             Catch::Contains("--id 2 in the file, 3 now") &&
                 Catch::Contains("--task compositional:easy in the file, compositional:medium now") &&
                 Catch::Contains("--task-seed-base 200000 in the file, 7 now") &&
                 Catch::Contains("without --resume"));
  other = state;
  other.sampling_seed = 5;
  CHECK_FALSE(generator::check_same_stream(state, other, path));
  CHECK(generator::check_same_stream(state, state, path));
  std::filesystem::remove_all(dir);
}

TEST_CASE("generator state: each generator's block of seeds is finite, and past it a new data epoch begins",
          "[rl][generator][resume]") {
  const auto first = generator::task_in_stream(200000, 3, 0);
  CHECK(first.seed == 3200000);
  CHECK(first.data_epoch == 0);
  const auto last = generator::task_in_stream(200000, 3, generator::kTasksPerGenerator - 1);
  CHECK(last.seed == 4199999);  // never generator 4's first seed
  CHECK(last.data_epoch == 0);
  const auto wrapped = generator::task_in_stream(200000, 3, generator::kTasksPerGenerator + 5);
  CHECK(wrapped.seed == 3200005);
  CHECK(wrapped.data_epoch == 1);
}
