// The time of an RL update with and without sequence packing on a realistic
// batch (docs/rl_loop.md, "Sequence packing"): 64 trajectories sampled by the
// cached SFT policy (4 groups of 8 from easy tasks, compositional and then
// simple, and 4 from medium compositional ones), updated padded
// and packed (rows as wide as the longest trajectory, and rows of
// max_seq_len) in turn, each repetition from the same weights. Hidden (not in
// ctest: it samples for a minute or two); run it on a quiet machine:
//   ws_training_tests "[packing-perf]"
// WS_PACKING_CHECKPOINT: the policy file (default
// ~/.cache/weightsync/sft-v3-1200/policy.safetensors); WS_PACKING_REPS:
// repetitions (default 5); WS_POLICY_THREADS: torch threads (default 2).
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "policy/safetensors.h"
#include "rollout/rollout.h"
#include "training/packed_batch.h"
#include "training/rl_update.h"
#include "training/sft.h"
#include "training/token_batch.h"
#include "zorplex/kinds.h"
#include "zorplex/tasks.h"

using namespace training;

namespace {

// The 1-minute load average (Linux), to judge whether others' work disturbed a run; -1 elsewhere.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1.0;
  in >> load;
  return load;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// 8 groups of 8 episodes at temperature 0.7: 4 tasks of `short_kind` (easy)
// and 4 medium compositional ones.
std::vector<algorithms::TrajectoryGroup> sample_batch(const policy::Transformer& model,
                                                      const policy::PromptFormat& format,
                                                      zorplex::TaskKind short_kind) {
  std::deque<zorplex::TaskGenerator> generators;
  std::vector<rollout::RolloutRequest> requests;
  for (int g = 0; g < 8; ++g) {
    const bool short_task = g < 4;
    generators.emplace_back(short_task ? short_kind : zorplex::TaskKind::kCompositional,
                            short_task ? zorplex::Difficulty::kEasy : zorplex::Difficulty::kMedium,
                            700000 + g);
    const zorplex::Task task = generators.back().next();
    for (int i = 0; i < 8; ++i) requests.push_back(rollout::RolloutRequest{task, &generators.back().tools()});
  }
  rollout::RolloutOptions options;
  options.format = format;
  options.sampling.temperature = 0.7;
  options.sampling.seed = 5;
  auto sampled = rollout::run_rollouts(model, requests, options);
  REQUIRE(sampled.ok());
  std::vector<algorithms::TrajectoryGroup> groups(8);
  for (std::size_t i = 0; i < sampled.value().size(); ++i) {
    groups[i / 8].trajectories.push_back(sampled.value()[i]);
    groups[i / 8].temperature = 0.7;
  }
  return groups;
}

struct Condition {
  const char* name;
  bool pack;
  std::int64_t row_tokens;
};

// Times update() on `groups` under each condition, interleaved, each from `start`.
void measure_batch(policy::Transformer& model, const policy::Transformer& reference,
                   const torch::Tensor& start, const std::vector<algorithms::TrajectoryGroup>& groups,
                   int reps) {
  std::vector<std::int64_t> lengths;
  for (const auto& g : groups) {
    for (const auto& t : g.trajectories) lengths.push_back(static_cast<std::int64_t>(t.tokens.size()));
  }
  std::sort(lengths.begin(), lengths.end());
  std::printf("threads %d, %zu trajectories; tokens min %lld median %lld max %lld\n",
              torch::get_num_threads(), lengths.size(), static_cast<long long>(lengths.front()),
              static_cast<long long>(lengths[lengths.size() / 2]), static_cast<long long>(lengths.back()));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::printf("  group %zu (%s): lengths", g, g < 4 ? "easy" : "medium");
    for (const auto& t : groups[g].trajectories) std::printf(" %zu", t.tokens.size());
    std::printf("\n");
  }

  const std::vector<Condition> conditions = {
      {"padded", false, 0},
      {"packed, rows as wide as the longest", true, 0},
      {"packed, rows of max_seq_len", true, model.config().max_seq_len}};
  struct Setup {
    const char* name;
    bool decoupled;
    int minibatches;
    double kl;
  };
  const std::vector<Setup> setups = {{"grpo, 1 minibatch", false, 1, 0.0},
                                     {"decoupled, 2 minibatches, KL 0.1", true, 2, 0.1}};
  for (const Setup& setup : setups) {
    std::vector<std::vector<double>> seconds(conditions.size());
    std::vector<RlUpdateReport> reports(conditions.size());
    std::vector<torch::Tensor> after(conditions.size());
    double max_load = load_average();
    for (int rep = 0; rep < reps; ++rep) {
      for (std::size_t c = 0; c < conditions.size(); ++c) {
        model.flat_parameters().copy_(start);
        RlUpdateOptions options;
        options.lr = 1e-5;
        options.minibatches = setup.minibatches;
        options.loss.decoupled = setup.decoupled;
        options.loss.behaviour_weight_cap = setup.decoupled ? 5.0 : 0.0;
        options.loss.kl_coef = setup.kl;
        options.pack_sequences = conditions[c].pack;
        options.pack_row_tokens = conditions[c].row_tokens;
        RlUpdater updater(model, options);
        updater.set_reference(&reference);
        const auto begin = std::chrono::steady_clock::now();
        auto report = updater.update(groups);
        seconds[c].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
        REQUIRE(report.ok());
        reports[c] = report.value();
        after[c] = model.flat_parameters().clone();
      }
      max_load = std::max(max_load, load_average());
    }
    std::printf("%s (%d repetitions, interleaved; 1-min load average up to %.2f):\n", setup.name, reps,
                max_load);
    for (std::size_t c = 0; c < conditions.size(); ++c) {
      const RlUpdateReport& r = reports[c];
      std::vector<double> sorted = seconds[c];
      std::sort(sorted.begin(), sorted.end());
      std::printf(
          "  %-36s median %.3f s (min %.3f, max %.3f)  real %lld + padding %lld slots (%.0f%% waste)  "
          "loss %+.6f  max |w - w_padded| %.2e\n",
          conditions[c].name, median(seconds[c]), sorted.front(), sorted.back(),
          static_cast<long long>(r.real_tokens), static_cast<long long>(r.padded_tokens),
          100.0 * static_cast<double>(r.padded_tokens) / static_cast<double>(r.real_tokens + r.padded_tokens),
          r.loss, (after[c] - after[0]).abs().max().item<double>());
    }
  }
}

}  // namespace

TEST_CASE("packing: RL update time per step, padded and packed, on a sampled batch", "[.][packing-perf]") {
  if (const char* threads = std::getenv("WS_POLICY_THREADS")) torch::set_num_threads(std::atoi(threads));
  const char* home = std::getenv("HOME");
  const std::string path =
      std::getenv("WS_PACKING_CHECKPOINT") != nullptr
          ? std::getenv("WS_PACKING_CHECKPOINT")
          : std::string(home ? home : "") + "/.cache/weightsync/sft-v3-1200/policy.safetensors";
  if (!std::filesystem::exists(path)) {
    WARN("no checkpoint at " << path << ": nothing measured");
    return;
  }
  const int reps = std::getenv("WS_PACKING_REPS") ? std::atoi(std::getenv("WS_PACKING_REPS")) : 5;
  auto contents = policy::read_safetensors(path);
  REQUIRE(contents.ok());
  auto loaded = policy::load_model(path);
  REQUIRE(loaded.ok());
  policy::Transformer& model = loaded.value();
  policy::PromptFormat format;
  if (contents.value().metadata.count("sft.options") != 0) {
    auto sft = SftOptions::from_json(contents.value().metadata.at("sft.options"));
    REQUIRE(sft.ok());
    format = sft.value().data.format;
  }
  auto reference = policy::Transformer::wrap(model.config(), model.flat_parameters().clone());
  REQUIRE(reference.ok());
  const torch::Tensor start = model.flat_parameters().clone();

  for (const zorplex::TaskKind short_kind : {zorplex::TaskKind::kCompositional, zorplex::TaskKind::kSimple}) {
    model.flat_parameters().copy_(start);
    std::printf("== batch: 4 groups of easy %s tasks, 4 of medium compositional ==\n",
                zorplex::kind_name(short_kind));
    measure_batch(model, reference.value(), start, sample_batch(model, format, short_kind), reps);
  }
  model.flat_parameters().copy_(start);
}
