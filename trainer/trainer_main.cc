// trainer: the RL trainer. Improves the Zorplex policy with REINFORCE, GRPO,
// RLOO or AReaL's decoupled PPO on trajectories from generator processes, and
// publishes every new version through libweightsync.
//
//   trainer --start DIR --out DIR [--mode sync|async] [--steps N]
//           [--algorithm grpo|rloo|reinforce|decoupled] ...
//   trainer --start DIR --out DIR --resume ...      continue from DIR's checkpoint
//   trainer ... --device cuda                       the policy on the GPU (loop/device.h)
//   trainer ... --wire-dtype bf16                   publish a bfloat16 image (float16: fp16; fp8: e4m3 blocks)
//   trainer ... --token-budget 4096 [--env-fractions compositional:easy=0.3,compositional:medium=0.7]
//                                                   Marin's token-budget batcher (docs/rl_loop.md)
//
// --start is the SFT checkpoint folder; when it has no policy yet the trainer
// runs the SFT warm start into it first. Generators connect to the addresses
// written to --address-file (scripts/rl-run.sh does all of this).
// --device cuda checks at start-up that libtorch and libweightsync can both
// use a GPU, and otherwise exits 1 naming why, before any other work (the SFT
// warm start, when it runs, stays on the CPU).
// Exit codes: 0 done, 1 a failure, 2 bad usage, 130 stopped by a signal
// (after checkpointing).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "loop/device.h"
#include "metrics_flag.h"
#include "loop/policy_weights.h"
#include "loop/rl_checkpoint.h"
#include "policy/cpu_threads.h"
#include "policy/safetensors.h"
#include "trainer/algorithm_choice.h"
#include "trainer/batcher_choice.h"
#include "trainer/trainer_loop.h"
#include "trainer/warm_start.h"
#include "training/sft.h"
#include "zorplex/kinds.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "trainer: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) try {
  trainer::TrainerOptions options;
  std::string start_dir;
  std::string mode = "async";
  bool resume = false;
  int sft_steps = training::recommended_warm_start().steps;
  int threads = 0;
  double lr = 5e-5;
  double clip = 0.2;
  double weight_cap = 5.0;
  std::string baseline = "group";
  std::string bind = "127.0.0.1";
  std::uint16_t weights_port = 0;
  std::uint16_t trajectory_port = 0;
  std::string device_name = "cpu";
  std::string wire_dtype = "fp32";
  CLI::App app{
      "RL trainer for the Zorplex policy: trains on generator trajectories (REINFORCE, GRPO, RLOO or "
      "decoupled PPO) and "
      "publishes every version through libweightsync. Started by scripts/rl-run.sh; see docs/rl_loop.md."};
  app.option_defaults()->always_capture_default();  // --help shows each default
  app.add_option("--start", start_dir,
                 "SFT checkpoint folder to start from (the warm start runs if it is empty)")
      ->required();
  app.add_option("--out", options.out_dir, "Folder for the RL checkpoint, trainer.jsonl and the timeline")
      ->required();
  app.add_flag("--resume", resume, "Continue from the checkpoint in --out if there is one");
  app.add_option("--sft-steps", sft_steps, "Steps of the warm start when --start has no policy")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--mode", mode, "sync: generate, train, publish, pull, repeat; async: generators never wait")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--steps", options.steps, "Optimizer steps in total")->check(CLI::Range(1, 1000000));
  app.add_option(
         "--algorithm", options.algorithm,
         "grpo (group-normalised advantages, PPO clip on behaviour log-probs), rloo (Marin's: "
         "leave-one-out advantages, r minus the mean of the other rewards of its group, not normalised, "
         "PPO clip; needs groups of 2 or more), reinforce (baseline, no ratio) or decoupled (AReaL: "
         "proximal log-probs from the current weights, capped behaviour weight)")
      ->check(CLI::IsMember({"grpo", "rloo", "reinforce", "decoupled"}));
  app.add_option("--baseline", baseline, "reinforce's baseline: group (group mean) or running (running mean)")
      ->check(CLI::IsMember({"group", "running"}));
  app.add_option("--lr", lr, "Peak learning rate (AdamW)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--lr-schedule", options.lr_schedule,
                 "cosine (from --lr down to --min-lr-ratio of it at the last step) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--min-lr-ratio", options.min_lr_ratio, "cosine: the last step's share of --lr")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--clip", clip, "PPO clip epsilon")->check(CLI::Range(0.0, 10.0));
  app.add_option("--minibatches", options.update.minibatches,
                 "PPO minibatches: optimizer steps per batch (the batch split in this many); with more than "
                 "one the clip and the decoupled proximal policy come into play")
      ->check(CLI::Range(1, 64));
  std::string credit = "outcome";
  app.add_option("--credit", credit,
                 "Which tokens a trajectory's advantage reaches: outcome (every generated token) or first-error "
                 "(step credit: the environment checks every arithmetic step the model wrote, e.g. 8*7+4=60; a "
                 "negative advantage applies from the first wrong step on, a positive one before it only; "
                 "docs/rl_loop.md)")
      ->check(CLI::IsMember({"outcome", "first-error"}))
      ->capture_default_str();
  app.add_flag("--pack-sequences", options.update.pack_sequences,
               "Pack each minibatch's trajectories back to back into rows with segment ids (attention "
               "and positions restart per trajectory) instead of right-padding them to the longest: the "
               "same loss and update, fewer padding slots (trainer.jsonl: real_tokens, padded_tokens). "
               "Off by default: on a CPU it can be slower (docs/rl_loop.md, \"Sequence packing\")");
  app.add_option("--kl-coef", options.update.loss.kl_coef,
                 "Weight of a KL term towards the warm start (--start's policy, also when resuming): "
                 "keeps what the start had right; 0: none")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--behaviour-weight-cap", weight_cap, "decoupled: cap on the behaviour importance weight")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--temperature", options.expected_temperature,
                 "The generators' sampling temperature; groups sampled at another are refused. Default: "
                 "the temperature the first group carries (every group says what it was sampled at)")
      ->check(CLI::Range(0.05, 5.0));
  app.add_option("--generators", options.generators, "sync: generators that deliver each round")
      ->check(CLI::Range(1, 4096));
  app.add_option("--prompts-per-round", options.prompts_per_round,
                 "sync: prompts of each generator's round (for the record: the trainer waits for the groups "
                 "each round says it sends, fewer when a generator's dynamic filter hit its cap)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--batch-groups", options.batch_groups, "async: groups per optimizer step (with the generators' dynamic filter on, groups with a signal; "
                 "zero-variance ones that arrive count, as in a sync round)")
      ->check(CLI::Range(1, 4096));
  trainer::BatcherFlags batcher;
  app.add_option(
      "--token-budget", batcher.token_budget,
      "Marin's token-budget batcher: tokens (prompt, generated and tool results) per optimizer step, "
      "whole groups, newest first, shared among environments (task kind:difficulty) by "
      "--env-fractions, round-robin by token deficit. async: waits for an environment short of its "
      "share for at most --spill-wait, then the others fill the rest; sync: the round decides what "
      "arrives and the budget caps what of it is trained on. 0: off (batches of --batch-groups "
      "groups, sync rounds). At least the policy's max_seq_len. docs/rl_loop.md");
  app.add_option(
      "--env-fractions", batcher.env_fractions,
      "With --token-budget: target shares of the tokens, e.g. "
      "compositional:easy=0.3,compositional:medium=0.7 (names as the generators' --task; summing to "
      "at most 1, the rest to whichever environments have groups). Default: equal shares of the "
      "environments seen");
  CLI::Option* spill_wait_option =
      app.add_option("--spill-wait", batcher.spill_wait_s,
                     "async, with --token-budget: seconds a step waits for an environment short of its share "
                     "while others already have groups in the batch; then it trains on what the others filled "
                     "in (the shortfall: spilled_tokens in trainer.jsonl). Never longer than --idle-timeout");
  app.add_option("--max-staleness", options.replay.max_staleness,
                 "async: drop groups sampled more than this many versions ago");
  bool keep_zero_variance = false;
  app.add_flag("--keep-zero-variance", keep_zero_variance,
               "Train on groups whose rewards are all equal too (always so with --baseline running, "
               "where they carry signal)");
  std::size_t min_group_size = 2;
  CLI::Option* min_group_size_option =
      app.add_option("--min-group-size", min_group_size,
                     "Drop (and count) groups of fewer trajectories: a group-relative advantage from one "
                     "trajectory carries no signal. Default 2, or 1 with --baseline running (r - b carries "
                     "signal in a group of one); rloo needs 2 or more")
          ->check(CLI::Range(1, 4096));
  app.add_option("--round-timeout", options.round_timeout_s,
                 "sync: seconds after a round's first group to wait for the other generators");
  app.add_option("--idle-timeout", options.idle_timeout_s,
                 "Give up when no trajectory arrives for this long (s)");
  app.add_option("--checkpoint-every", options.checkpoint_every, "Checkpoint every N steps (and at the end)");
  app.add_option("--eval-every", options.eval_every,
                 "Greedy evaluation on a fixed held-out subset every N steps and after the last (0: never); "
                 "an \"eval\" line in trainer.jsonl each time")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--eval-tasks", options.eval_tasks, "Tasks of that subset (the first N of the 200 held out)")
      ->check(CLI::Range(1, 200));
  std::string eval_difficulties = "easy";
  app.add_option("--eval-difficulty", eval_difficulties,
                 "Compositional difficulties of that evaluation, comma-separated (easy, medium, hard): one eval line "
                 "each")
      ->capture_default_str();
  app.add_option("--bind", bind,
                 "Address to serve weights and take trajectories on (needs WEIGHTSYNC_SECRET "
                 "unless loopback)");
  app.add_option("--weights-port", weights_port, "Weight publisher port (0: any free one)");
  app.add_option("--trajectory-port", trajectory_port, "Trajectory port (0: any free one)");
  app.add_option("--address-file", options.address_file,
                 "Write the addresses generators need here (JSON: weights, trajectories)");
  app.add_option("--threads", threads, "Torch CPU threads (0: all CPUs)")->check(CLI::Range(0, 256));
  app.add_option("--device", device_name,
                 "Where the policy trains: cpu, or cuda (the first visible GPU; versions are published "
                 "from device memory without blocking the step)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--wire-dtype", wire_dtype,
                 "The dtype versions travel in: fp32 (as trained), or bf16 / fp16, rounded to nearest even "
                 "from the float32 weights once per version on a converter thread (not this one); "
                 "generators widen it back to fp32 on arrival; or fp8: e4m3 in 128x128 blocks with float32 "
                 "scales, embeddings and 1-D tensors in bf16, which generators dequantize. bf16/fp16/fp8 need "
                 "--device cpu")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  std::string metrics_address;
  app.add_option("--metrics-address", metrics_address, weightsync::tools::kMetricsAddressHelp);
  app.add_option("--synthetic-groups", options.synthetic.groups,
                 "Train on N made-up groups per step (random tokens, rewards 1/0), no generators: times the "
                 "step and publish alone, e.g. against the same run with readers pulling every version "
                 "(scripts/gpu-check.sh). 0: off")
      ->check(CLI::Range(0, 4096));
  app.add_option("--synthetic-group-size", options.synthetic.group_size,
                 "--synthetic-groups: trajectories per group (each 64 prompt + 96 generated tokens)")
      ->check(CLI::Range(2, 4096));
  app.add_option("--synthetic-wait-readers", options.synthetic.wait_readers,
                 "--synthetic-groups: before the first step, wait (up to --idle-timeout) until N readers have "
                 "pulled the starting version")
      ->check(CLI::Range(0, 4096));
  CLI11_PARSE(app, argc, argv);
  auto device = loop::select_device(device_name);
  if (!device) return fail(device.error().message);
  if (device.value().is_cuda()) {
    std::printf("trainer: policy on %s\n", loop::describe_device(device.value()).c_str());
    std::fflush(stdout);
  }

  options.update.step_credit = credit == "first-error";
  options.eval_difficulties.clear();
  for (std::size_t begin = 0; begin <= eval_difficulties.size();) {
    const std::size_t end = std::min(eval_difficulties.find(',', begin), eval_difficulties.size());
    auto difficulty = zorplex::parse_difficulty(eval_difficulties.substr(begin, end - begin));
    if (!difficulty) return fail("--eval-difficulty " + eval_difficulties + ": " + difficulty.error().message);
    options.eval_difficulties.push_back(difficulty.value());
    begin = end + 1;
  }

  auto wire = loop::parse_wire_dtype(wire_dtype);
  if (!wire) return fail(wire.error().message);
  options.wire_dtype = wire.value();
  if (options.wire_dtype != weightsync::DType::kFloat32 && device.value().is_cuda())
    return fail("--wire-dtype " + wire_dtype +
                " needs a host-resident policy (--device cpu): the device publish path sends float32");
  options.sync = mode == "sync";
  if (options.sync) options.replay.max_staleness = 0;
  batcher.sync = options.sync;
  batcher.spill_wait_given = spill_wait_option->count() > 0;
  batcher.idle_timeout_s = options.idle_timeout_s;
  auto batcher_options = trainer::batcher_options_from_flags(batcher);
  if (!batcher_options) {
    std::fprintf(stderr, "trainer: %s\n", batcher_options.error().message.c_str());
    return 2;
  }
  options.batcher = batcher_options.value();
  options.update.lr = lr;
  trainer::AlgorithmChoice choice;
  choice.algorithm = options.algorithm;
  choice.baseline = baseline;
  choice.clip = clip;
  choice.behaviour_weight_cap = weight_cap;
  choice.keep_zero_variance = keep_zero_variance;
  if (min_group_size_option->count() > 0) choice.min_group_size = min_group_size;
  auto chosen = trainer::apply_algorithm_choice(choice, options);
  if (!chosen) return fail(chosen.error().message);
  if (const char* secret = std::getenv("WEIGHTSYNC_SECRET")) options.secret = secret;
  options.publisher.bind_address = bind;
  options.publisher.port = weights_port;
  options.trajectory_endpoint =
      "tcp://" + bind + ":" + (trajectory_port == 0 ? std::string("*") : std::to_string(trajectory_port));
  nlohmann::json settings{{"mode", mode},
                          {"algorithm", options.algorithm},
                          {"baseline", baseline},
                          {"lr", lr},
                          {"lr_schedule", options.lr_schedule},
                          {"min_lr_ratio", options.min_lr_ratio},
                          {"clip", clip},
                          {"minibatches", options.update.minibatches},
                          {"credit", credit},
                          {"kl_coef", options.update.loss.kl_coef},
                          {"pack_sequences", options.update.pack_sequences},
                          {"eval_every", options.eval_every},
                          {"eval_tasks", options.eval_tasks},
                          {"eval_difficulty", eval_difficulties},
                          {"temperature", options.expected_temperature ? nlohmann::json(*options.expected_temperature)
                                                                       : nlohmann::json("from the groups")},
                          {"steps", options.steps},
                          {"generators", options.generators},
                          {"prompts_per_round", options.prompts_per_round},
                          {"batch_groups", options.batch_groups},
                          {"max_staleness", options.replay.max_staleness},
                          {"drop_zero_variance", options.replay.drop_zero_variance},
                          {"min_group_size", options.replay.min_group_size}};
  settings["token_budget"] = options.batcher.token_budget;
  settings["env_fractions"] = batcher.env_fractions;
  settings["spill_wait"] = options.batcher.spill_wait_s;
  if (options.synthetic.groups > 0) {
    options.synthetic.temperature = options.expected_temperature.value_or(1.0);
    settings["synthetic_groups"] = options.synthetic.groups;
    settings["synthetic_group_size"] = options.synthetic.group_size;
  }
  settings["device"] = device_name;
  settings["wire_dtype"] = wire_dtype;
  options.options_json = settings.dump();

  policy::configure_cpu_threads(threads);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  auto warm = trainer::ensure_warm_start(start_dir, sft_steps, g_stop);
  if (!warm)
    return g_stop.load() ? (std::fprintf(stderr, "trainer: %s\n", warm.error().message.c_str()), 130)
                         : fail(warm.error().message);

  const bool resuming = resume && loop::has_rl_checkpoint(options.out_dir);
  const std::string policy_path =
      resuming ? loop::rl_policy_file(options.out_dir) : training::policy_file(start_dir);
  auto contents = policy::read_safetensors(policy_path);
  if (!contents) return fail(contents.error().message);
  auto model = policy::load_model(policy_path, device.value());
  if (!model) return fail(policy_path + ": " + model.error().message);
  const policy::Metadata metadata = contents.value().metadata;

  const policy::ModelConfig loop_model_config = model.value().config();
  if (auto budget = trainer::check_token_budget(options.batcher,
                                                static_cast<std::uint64_t>(loop_model_config.max_seq_len));
      !budget) {
    std::fprintf(stderr, "trainer: %s\n", budget.error().message.c_str());
    return 2;
  }
  trainer::TrainerLoop loop_(options, std::move(model).value(), loop::carried_metadata(metadata));
  if (options.update.loss.kl_coef > 0.0) {
    const std::string reference_path = training::policy_file(start_dir);
    auto reference = policy::load_model(reference_path, device.value());
    if (!reference) return fail(reference_path + " (the KL term's reference): " + reference.error().message);
    if (!(reference.value().config() == loop_model_config))
      return fail(reference_path + " (the KL term's reference) is a policy of another shape than " + policy_path +
                  ": resume with the --start the run began from");
    loop_.set_reference(std::move(reference).value());
  }
  if (resuming) {
    auto progress = loop::read_rl_progress(metadata);
    if (!progress) return fail(policy_path + ": " + progress.error().message);
    auto resumed = loop_.resume(options.out_dir, progress.value());
    if (!resumed) return fail(resumed.error().message);
    std::printf("trainer: resuming from %s at step %d, version %llu\n", options.out_dir.c_str(),
                progress.value().step, static_cast<unsigned long long>(progress.value().version));
  }
  auto started = loop_.start();
  if (!started) return fail(started.error().message);
  // Declared after loop_: destroyed first, so no scrape reads its publisher as it goes.
  auto metrics = weightsync::tools::start_metrics_flag(metrics_address, "trainer");
  if (!metrics.ok()) return fail(metrics.status().to_string());
  if (*metrics) (*metrics)->add_publisher(loop_.weights_publisher(), "trainer");
  std::printf("trainer: %s %s, serving weights at %s, trajectories at %s\n", mode.c_str(),
              options.algorithm.c_str(), loop_.weights_address().c_str(),
              loop_.trajectory_endpoint().c_str());
  std::fflush(stdout);

  auto summary = loop_.run(g_stop);
  if (!summary) return fail(summary.error().message);
  const trainer::TrainerSummary& s = summary.value();
  std::printf(
      "trainer: %s after %d steps (version %llu): %llu trajectories trained on (of %llu sampled, %llu filtered by "
      "the generators), %llu received, %.0f s\n",
      s.stopped ? "stopped" : "done", s.steps, static_cast<unsigned long long>(s.version),
      static_cast<unsigned long long>(s.trajectories_trained), static_cast<unsigned long long>(s.trajectories_sampled),
      static_cast<unsigned long long>(s.trajectories_filtered),
      static_cast<unsigned long long>(s.trajectories_received), s.wall_seconds);
  return s.stopped ? 130 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trainer: %s\n", e.what());
  return 1;
}
