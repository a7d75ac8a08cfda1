// zorplex-eval: greedy evaluation of a Zorplex policy checkpoint on held-out
// tasks.
//
//   zorplex-eval --checkpoint DIR|FILE [--kind K] [--difficulty D] [--seed S]
//                [--count N] [--batch B] [--json out.json] [--show N]
//
// Loads policy.safetensors (or the file given), plays --count tasks of one
// kind/difficulty/seed with the multi-turn tool protocol (rl/rollout), and
// prints accuracy, format rate, turns, tool calls, failure modes and
// generation speed; --json writes the same as JSON (rollout/eval_summary.h).
// Warns when the seed lies inside the checkpoint's SFT training seeds.
//
// Exit codes: 0 done, 2 bad usage or unreadable checkpoint, 1 a failure
// while evaluating or writing.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "policy/cpu_threads.h"
#include "policy/safetensors.h"
#include "rollout/evaluation.h"
#include "training/sft.h"

namespace {

constexpr int kUsageError = 2;

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Warns when seed is among the task seeds the checkpoint's SFT run used.
void warn_if_not_held_out(const policy::Metadata& metadata, const rollout::EvalOptions& options) {
  if (metadata.count("sft.options") == 0 || metadata.count("sft.step") == 0) return;
  auto sft = training::SftOptions::from_json(metadata.at("sft.options"));
  if (!sft) return;
  const rollout::DemonstrationStream stream(sft.value().data);
  const auto examples = static_cast<std::uint64_t>(std::stoll(metadata.at("sft.step"))) *
                        static_cast<std::uint64_t>(sft.value().batch_size);
  const std::int64_t first = sft.value().data.first_task_seed;
  const std::int64_t last = stream.last_task_seed(examples);
  if (options.seed >= first && options.seed <= last) {
    std::fprintf(
        stderr,
        "zorplex-eval: warning: seed %lld is one of the task seeds this policy was trained on (%lld..%lld); "
        "the tasks are not held out\n",
        static_cast<long long>(options.seed), static_cast<long long>(first), static_cast<long long>(last));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{
      "Greedy evaluation of a Zorplex policy checkpoint on held-out tasks: accuracy, format rate, turns, "
      "tool calls, failure modes, generation tokens/s."};
  std::string checkpoint;
  std::string kind_name = "compositional";
  std::string difficulty_name = "easy";
  std::string shaping_name = "original";
  std::string json_path;
  int show = 0;
  int threads = 0;
  rollout::EvalOptions options;
  app.add_option("--checkpoint", checkpoint,
                 "SFT/RL checkpoint folder (its policy.safetensors) or a policy file")
      ->required();
  app.add_option("--kind", kind_name, "Task kind: " + zorplex::valid_kind_names())->capture_default_str();
  app.add_option("--difficulty", difficulty_name,
                 "Compositional difficulty: " + zorplex::valid_difficulty_names())
      ->capture_default_str();
  app.add_option("--seed", options.seed,
                 "Task seed (held out: training uses seeds from 100000 up by default)")
      ->capture_default_str();
  app.add_option("--count", options.count, "Tasks to play")->capture_default_str();
  app.add_option("--batch", options.batch_size, "Episodes generated together")->capture_default_str();
  app.add_option("--temperature", options.rollout.sampling.temperature, "0: greedy")->capture_default_str();
  app.add_option("--shaping", shaping_name, "Reward shaping: original or tag_needs_correct")
      ->capture_default_str();
  app.add_option("--system-prompt", options.rollout.format.system_prompt,
                 "System prompt (default: the one in the checkpoint's SFT options, else the built-in one)");
  app.add_option("--json", json_path, "Write the summary as JSON here");
  app.add_option("--show", show, "Print the first N transcripts")->capture_default_str();
  app.add_option("--threads", threads, "Torch CPU threads (0: all CPUs)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto kind = zorplex::parse_kind(kind_name);
  auto difficulty = zorplex::parse_difficulty(difficulty_name);
  auto shaping = zorplex::parse_shaping(shaping_name);
  for (const zorplex::Error* error :
       {kind ? nullptr : &kind.error(), difficulty ? nullptr : &difficulty.error(),
        shaping ? nullptr : &shaping.error()}) {
    if (error != nullptr) {
      std::cerr << "zorplex-eval: " << error->message << "\n";
      return kUsageError;
    }
  }
  options.kind = kind.value();
  options.difficulty = difficulty.value();
  options.rollout.shaping = shaping.value();
  policy::configure_cpu_threads(threads);

  const std::string file = is_directory(checkpoint) ? training::policy_file(checkpoint) : checkpoint;
  auto contents = policy::read_safetensors(file);
  if (!contents) {
    std::cerr << "zorplex-eval: " << file << ": " << contents.error().message << "\n";
    return kUsageError;
  }
  auto model = policy::load_model(file);
  if (!model) {
    std::cerr << "zorplex-eval: " << file << ": " << model.error().message << "\n";
    return kUsageError;
  }
  const policy::Metadata& metadata = contents.value().metadata;
  // The policy is evaluated with the prompt it was trained on. SFT options
  // this build cannot read (a newer zorplex-sft's) are an error: the
  // built-in prompt instead would score a prompt the policy never saw.
  if (app.get_option("--system-prompt")->count() == 0 && metadata.count("sft.options") != 0) {
    auto sft = training::SftOptions::from_json(metadata.at("sft.options"));
    if (!sft) {
      std::cerr << "zorplex-eval: " << file << ": the checkpoint's SFT options cannot be read ("
                << sft.error().message
                << "); rebuild zorplex-eval from the source that wrote it, or pass --system-prompt to say which "
                   "prompt to evaluate with\n";
      return kUsageError;
    }
    options.rollout.format = sft.value().data.format;
  }
  warn_if_not_held_out(metadata, options);
  std::printf("evaluating %s on %d %s tasks (seed %lld), batch %d, %s\n", file.c_str(), options.count,
              rollout::task_mix_name({options.kind, options.difficulty}).c_str(),
              static_cast<long long>(options.seed), options.batch_size,
              options.rollout.sampling.temperature > 0 ? "sampled" : "greedy");
  std::fflush(stdout);
  int last_percent = -1;
  auto result = rollout::evaluate(model.value(), options, [&](int done, int total) {
    const int percent = total > 0 ? 100 * done / total : 100;
    if (percent / 10 != last_percent / 10 || done == total) {
      std::fprintf(stderr, "  %d/%d episodes\n", done, total);
      last_percent = percent;
    }
  });
  if (!result) {
    std::cerr << "zorplex-eval: " << result.error().message << "\n";
    return 1;
  }
  rollout::EvalSummary& summary = result.value().summary;
  summary.settings = {{"checkpoint", file},
                      {"kind", zorplex::kind_name(options.kind)},
                      {"difficulty", zorplex::difficulty_name(options.difficulty)},
                      {"seed", std::to_string(options.seed)},
                      {"batch", std::to_string(options.batch_size)},
                      {"temperature", std::to_string(options.rollout.sampling.temperature)},
                      {"shaping", zorplex::shaping_name(options.rollout.shaping)},
                      {"threads", std::to_string(torch::get_num_threads())}};
  if (metadata.count("sft.step") != 0) summary.settings["sft_step"] = metadata.at("sft.step");
  for (int i = 0; i < show && i < static_cast<int>(result.value().trajectories.size()); ++i) {
    const rollout::Trajectory& t = result.value().trajectories[static_cast<std::size_t>(i)];
    std::printf("--- task %d: %s (answer %lld) -> %s\n%s\n", i, t.task.question.c_str(),
                static_cast<long long>(t.task.answer.value_or(0)),
                zorplex::failure_mode_name(t.score.failure_mode), t.transcript.c_str());
  }
  std::fputs(rollout::table(summary).c_str(), stdout);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << rollout::to_json(summary) << "\n";
    if (!out) {
      std::cerr << "zorplex-eval: cannot write " << json_path << "\n";
      return 1;
    }
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "zorplex-eval: internal error: " << e.what() << "\n";
  return 1;
}
