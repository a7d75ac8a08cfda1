// generator: one RL rollout worker. Pulls the trainer's newest policy version
// through libweightsync straight into its parameter buffer, rolls out Zorplex
// episodes with it, and sends them to the trainer (ZeroMQ, see
// docs/rl_protocol.md).
//
//   generator --trainer HOST:PORT[,HOST:PORT...] --trajectories tcp://HOST:PORT --checkpoint FILE
//             [--relay HOST[:PORT] [--relay-address-file FILE]]
//             [--id K] [--mode sync|async] [--prompts P] [--group-size G] [--device cpu|cuda]
//             [--dynamic-filter on|off] [--oversample-cap K] ...
//
// --checkpoint is the trainer's starting policy file: it gives the model's
// shape and prompt format (its weights are replaced by the first pull).
// --device cuda keeps the policy on the GPU and pulls straight into its device
// buffer; it checks at start-up that libtorch and libweightsync can both use
// a GPU, and otherwise exits 1 naming why, before any other work.
// --out keeps generator-K-state.json, the generator's place in its task
// stream (generator/generator_state.h), saved after every round; --resume
// continues from it. --transcripts FILE|DIR writes every sampled trajectory
// as a JSON line (rollout/transcript_writer.h).
// Exit codes: 0 stopped (signal or --rounds reached), 1 a failure (lost
// trainer past --trainer-timeout, bad checkpoint, ...), 2 bad usage.
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "generator/generator_loop.h"
#include "generator/generator_state.h"
#include "generator/weight_source.h"
#include "loop/device.h"
#include "metrics_flag.h"
#include "loop/rl_checkpoint.h"
#include "loop/run_log.h"
#include "policy/cpu_threads.h"
#include "policy/safetensors.h"
#include "rollout/transcript_writer.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "generator: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) try {
  generator::GeneratorOptions options;
  std::string checkpoint;
  std::string out_dir;
  std::string mode = "async";
  std::vector<std::string> tasks{"compositional:easy"};
  int threads = 1;
  int trainer_timeout_s = 60;
  std::string device_name = "cpu";
  CLI::App app{
      "RL rollout worker: pulls the trainer's newest policy through libweightsync, rolls out Zorplex "
      "episodes "
      "and sends them to the trainer. Started by scripts/rl-run.sh; see docs/rl_loop.md."};
  app.option_defaults()->always_capture_default();  // --help shows each default
  std::string trainer_addresses;
  app.add_option("--trainer", trainer_addresses,
                 "The trainer's weight publisher, host:port; or a comma-separated list of sources (the "
                 "trainer, relays) tried in order, the next one taking over when one is lost")
      ->required();
  app.add_option("--relay", options.relay_bind,
                 "Also serve the weights to other generators: run a relay at HOST[:PORT] that pulls from "
                 "--trainer (docs/relays.md); this generator then pulls from its own relay");
  app.add_option("--relay-address-file", options.relay_address_file,
                 "Write the relay's host:port here once it serves (with --relay)");
  app.add_option("--trajectories", options.trajectory_endpoint,
                 "The trainer's trajectory endpoint, tcp://host:port")
      ->required();
  app.add_option(
         "--checkpoint", checkpoint,
         "The trainer's starting policy (a .safetensors file or a checkpoint folder): model shape and "
         "prompt format")
      ->required();
  app.add_option("--id", options.id, "This generator's number (task stream and logs)");
  app.add_option("--mode", mode, "sync: wait for a new version after every round; async: never wait")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--prompts", options.prompts, "Prompts per round")->check(CLI::Range(1, 256));
  app.add_option("--group-size", options.group_size, "Episodes per prompt (G)")->check(CLI::Range(1, 256));
  app.add_option("--temperature", options.temperature, "Sampling temperature (the trainer must use the same)")
      ->check(CLI::Range(0.05, 5.0));
  app.add_option(
         "--task", tasks,
         "Task kind[:difficulty]; several (repeated, or a comma-separated list) alternate prompt by prompt")
      ->delimiter(',');
  app.add_option(
         "--carry-candidates", options.carry_candidates,
         "Prompts weighted towards carries: draw N tasks per prompt, keep the one whose column working "
         "takes the most carries or borrows in (1: off)")
      ->check(CLI::Range(1, 64));
  app.add_option("--task-seed-base", options.task_seed_base,
                 "Task seeds are base + id * 1000000 + n (keep them away from SFT and evaluation seeds)");
  app.add_option("--seed", options.sampling_seed, "Sampling seed");
  app.add_option("--groups-per-version", options.groups_per_version,
                 "async pacing: this generator's share of the groups of one trainer step (0: no pacing)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-ahead", options.max_ahead_versions,
                 "async pacing: how many trainer steps' worth of groups it may send ahead")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", options.max_rounds, "Stop after this many rounds (0: run until stopped)");
  app.add_option("--trainer-timeout", trainer_timeout_s,
                 "Seconds to wait for an absent, restarting or stalled trainer before giving up")
      ->check(CLI::Range(1, 86400));
  app.add_option("--transport", options.transport, "Weight transport: auto, ucx, shm, tcp, verbs");
  std::string in_flight = "on";
  app.add_option("--in-flight-updates", in_flight,
                 "async: pull new weights in the background and install them at the next token boundary, so "
                 "generation never stops for a pull (off: pull between rounds, generation waits)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  std::string dynamic_filter = "on";
  app.add_option("--dynamic-filter", dynamic_filter,
                 "SLIME's dynamic sampling: do not send groups whose rewards are all equal (no signal under "
                 "group-relative advantages) and sample further prompts of the round until --prompts groups "
                 "carry a signal or --oversample-cap x --prompts prompts were sampled; each group tells the "
                 "trainer what was filtered. Use off with a trainer that trains on such groups (REINFORCE "
                 "--baseline running, --keep-zero-variance): it refuses filtered groups")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--oversample-cap", options.oversample_cap,
                 "With --dynamic-filter on: a round samples at most this many times --prompts prompts, then "
                 "sends the usable groups it has (fewer than --prompts: the round's line says so)")
      ->check(CLI::Range(1, 64));
  app.add_option("--out", out_dir,
                 "Folder for generator-K.jsonl (metrics), timeline-generator-K.jsonl and generator-K-state.json "
                 "(its place in the task stream, saved after every round)");
  bool resume = false;
  app.add_flag("--resume", resume,
               "Continue the task stream (next task, round, sampling seed, group sequence) from "
               "OUT/generator-K-state.json instead of starting at task 0; needs --out. A missing or corrupt "
               "file, or one of another --id, --task list, --task-seed-base or --seed, is an error");
  std::string transcripts_arg;
  app.add_option("--transcripts", transcripts_arg,
                 "Append every sampled trajectory as one JSON line to FILE, or to "
                 "DIR/transcripts-generator-K.jsonl for a folder: ids, round, group, task seed, kind, "
                 "prompt, each turn's model text, tool calls and tool result, reward, correct, oldest and "
                 "newest version, tokens, temperature; flushed after every round. A line is 1-2 KB here, "
                 "at most about 1 KB + 18 bytes per token of the model's context (off by default)")
      ->type_name("FILE|DIR");
  app.add_option("--threads", threads, "Torch CPU threads")->check(CLI::Range(1, 256));
  app.add_option("--device", device_name,
                 "Where the policy samples: cpu, or cuda (the first visible GPU; pulls land in device "
                 "memory)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  std::string metrics_address;
  app.add_option("--metrics-address", metrics_address, weightsync::tools::kMetricsAddressHelp);
  CLI11_PARSE(app, argc, argv);
  options.staged_updates = in_flight == "on";
  options.dynamic_filter = dynamic_filter == "on";
  auto device = loop::select_device(device_name);
  if (!device) return fail(device.error().message);
  if (device.value().is_cuda()) {
    std::printf("generator %u: policy on %s\n", options.id, loop::describe_device(device.value()).c_str());
    std::fflush(stdout);
  }
  options.weights_addresses = generator::split_addresses(trainer_addresses);
  if (options.weights_addresses.empty()) {
    std::fprintf(stderr, "generator: --trainer: give at least one host:port\n");
    return 2;
  }
  if (!options.relay_address_file.empty() && options.relay_bind.empty()) {
    std::fprintf(stderr, "generator: --relay-address-file needs --relay\n");
    return 2;
  }
  options.sync = mode == "sync";
  options.trainer_timeout = std::chrono::seconds(trainer_timeout_s);
  if (const char* secret = std::getenv("WEIGHTSYNC_SECRET")) options.secret = secret;
  options.tasks.clear();
  std::string task_names;
  for (const std::string& task : tasks) {
    auto mix = rollout::parse_task_mix(task);
    if (!mix) {
      std::fprintf(stderr, "generator: --task: %s\n", mix.error().message.c_str());
      return 2;
    }
    options.tasks.push_back(mix.value());
    task_names += (task_names.empty() ? "" : " and ") + rollout::task_mix_name(mix.value());
  }
  std::printf("generator %u: sampling %s tasks\n", options.id, task_names.c_str());
  if (options.dynamic_filter) {
    std::printf("generator %u: dynamic filter on: zero-variance groups are not sent (at most %d x %d prompts a round)\n",
                options.id, options.oversample_cap, options.prompts);
  } else {
    std::printf("generator %u: dynamic filter off: every group is sent\n", options.id);
  }
  if (resume && out_dir.empty()) {
    std::fprintf(stderr, "generator: --resume needs --out (the folder with generator-K-state.json)\n");
    return 2;
  }
  if (!out_dir.empty()) {
    options.state_file = generator::generator_state_file(out_dir, options.id);
    generator::GeneratorState wanted;
    wanted.id = options.id;
    for (const rollout::TaskMix& mix : options.tasks) wanted.tasks.push_back(rollout::task_mix_name(mix));
    wanted.task_seed_base = options.task_seed_base;
    wanted.sampling_seed = options.sampling_seed;
    if (resume) {
      auto saved = generator::load_generator_state(options.state_file);
      if (!saved) return fail(saved.error().message);
      auto same = generator::check_same_stream(saved.value(), wanted, options.state_file);
      if (!same) return fail(same.error().message);
      options.start = saved.value().position;
      std::printf("generator %u: resuming its task stream at task %llu (data epoch %llu), round %llu\n",
                  options.id, static_cast<unsigned long long>(options.start.next_task),
                  static_cast<unsigned long long>(options.start.next_task / generator::kTasksPerGenerator),
                  static_cast<unsigned long long>(options.start.next_round));
    } else if (std::filesystem::exists(options.state_file)) {
      std::printf("generator %u: starting its task stream at task 0 (--resume would continue %s)\n",
                  options.id, options.state_file.c_str());
    }
  }

  policy::configure_cpu_threads(threads);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  std::string policy_path = checkpoint;
  if (std::filesystem::is_directory(checkpoint)) policy_path = loop::rl_policy_file(checkpoint);
  auto contents = policy::read_safetensors(policy_path);
  if (!contents) return fail(contents.error().message);
  auto format = loop::prompt_format_of(contents.value().metadata);
  if (!format) return fail(policy_path + ": " + format.error().message);
  auto model = policy::load_model(policy_path, device.value());
  if (!model) return fail(policy_path + ": " + model.error().message);

  std::unique_ptr<loop::JsonlFile> metrics;
  std::unique_ptr<loop::JsonlFile> timeline;
  if (!out_dir.empty()) {
    std::filesystem::create_directories(out_dir);
    const std::string name = "generator-" + std::to_string(options.id);
    auto m = loop::JsonlFile::open(out_dir + "/" + name + ".jsonl", true);
    if (!m) return fail(m.error().message);
    metrics = std::move(m).value();
    auto t = loop::JsonlFile::open(out_dir + "/timeline-" + name + ".jsonl", true);
    if (!t) return fail(t.error().message);
    timeline = std::move(t).value();
  }

  std::unique_ptr<rollout::TranscriptWriter> transcripts;
  if (!transcripts_arg.empty()) {
    auto opened = rollout::TranscriptWriter::open(rollout::transcripts_file(transcripts_arg, options.id));
    if (!opened) return fail(opened.error().message);
    transcripts = std::move(opened).value();
    std::printf("generator %u: transcripts to %s\n", options.id, transcripts->path().c_str());
  }

  // Declared before loop_: it outlives the loop, which removes its sources as it goes.
  auto prometheus = weightsync::tools::start_metrics_flag(metrics_address, "generator " + std::to_string(options.id));
  if (!prometheus.ok()) return fail(prometheus.status().to_string());
  options.metrics_endpoint = prometheus.value().get();
  generator::GeneratorLoop loop_(options, std::move(model).value(), format.value(), metrics.get(),
                                 timeline.get(), transcripts.get());
  auto totals = loop_.run(g_stop);
  if (!totals) return fail(totals.error().message);
  std::printf("generator %u: stopped after %llu rounds, %llu groups sent, %llu pulls, %llu reconnects\n",
              options.id, static_cast<unsigned long long>(totals.value().rounds),
              static_cast<unsigned long long>(totals.value().groups_sent),
              static_cast<unsigned long long>(totals.value().pulls),
              static_cast<unsigned long long>(totals.value().reconnects));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "generator: %s\n", e.what());
  return 1;
}
