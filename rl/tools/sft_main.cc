// zorplex-sft: the supervised warm start of the Zorplex policy.
//
//   zorplex-sft --out DIR [--steps N] [--batch B] [--lr X] [--task K[:D]]...
//   zorplex-sft --out DIR --resume [--steps N]     continue a run
//
// Trains the policy (rl/policy) on synthesized demonstrations
// (rl/rollout/demonstrations.h) with the masked token loss and writes the
// checkpoint folder DIR (policy.safetensors + optimizer.safetensors, see
// rl/training/sft.h) every --save-every steps, at the end, and on Ctrl-C.
// A line of progress every --log-every steps; DIR/train_log.jsonl gets one
// JSON object per step.
//
// Exit codes: 0 done, 2 bad usage or unusable checkpoint, 1 a failure while
// training or writing, 130 interrupted (after saving).
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policy/cpu_threads.h"
#include "policy/model_config.h"
#include "training/sft.h"

namespace {

constexpr int kUsageError = 2;
std::atomic<bool> g_interrupted{false};

void on_signal(int) {
  g_interrupted.store(true);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string duration_text(double seconds) {
  char buffer[32];
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 60) {
    std::snprintf(buffer, sizeof buffer, "%dm%02ds", s / 60, s % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1fs", seconds);
  }
  return buffer;
}

}  // namespace

int main(int argc, char** argv) try {
  // The defaults are the measured best warm start (docs/results.md, issue 19):
  // rotary positions (62% -> 98.5% on held-out easy tasks), no system prompt
  // (it was 31% of every sequence; SFT 40% faster, accuracy the same), and
  // medium tasks in columns (easy 99.5% -> 100%, medium 36% -> 82%).
  training::SftOptions options = training::recommended_warm_start();
  CLI::App app{
      "Supervised warm start of the Zorplex policy: trains on synthesized tool-use demonstrations and writes "
      "a "
      "safetensors checkpoint folder (policy.safetensors + optimizer.safetensors). Evaluate it with "
      "zorplex-eval."};
  std::string out;
  bool resume = false;
  int save_every = 100;
  int log_every = 10;
  int threads = 0;
  std::vector<std::string> tasks;
  for (const rollout::TaskMix& mix : options.data.mix) tasks.push_back(rollout::task_mix_name(mix));
  std::string positions = policy::position_encoding_name(options.model.positions);
  std::string arithmetic = rollout::arithmetic_name(options.data.arithmetic);
  app.add_option("--out", out, "Checkpoint folder to write (created if missing)")->required();
  app.add_flag("--resume", resume,
               "Continue the run saved in --out (its options are used; --steps may extend it)");
  auto* steps_opt =
      app.add_option("--steps", options.steps, "Optimizer steps in total")->capture_default_str();
  app.add_option("--batch", options.batch_size, "Demonstrations per step")->capture_default_str();
  app.add_option("--length-groups", options.length_groups,
                 "Micro-batches of similar lengths per step (less padding; the update is the same to rounding)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--lr", options.lr, "Peak learning rate (AdamW)")->capture_default_str();
  app.add_option("--warmup", options.warmup_steps, "Linear warm-up steps, then cosine decay")
      ->capture_default_str();
  app.add_option("--min-lr-ratio", options.min_lr_ratio, "Final learning rate as a share of the peak")
      ->capture_default_str();
  app.add_option("--weight-decay", options.adamw.weight_decay, "AdamW weight decay (matrices only)")
      ->capture_default_str();
  app.add_option("--clip", options.adamw.max_grad_norm, "Gradient norm clip (0: off)")->capture_default_str();
  app.add_option("--task", tasks, "Task kind[:difficulty] to demonstrate, repeatable (round robin per seed)")
      ->capture_default_str();
  app.add_option("--imperfect", options.data.imperfect_fraction,
                 "Share of demonstrations with a deliberate flaw (wrong answer, no tag, extra call, guess)")
      ->capture_default_str();
  app.add_option(
         "--arithmetic", arithmetic,
         "How demonstrations write arithmetic: columns (digit sums with carries, digit differences with "
         "borrows, partial products; then the total), padded (the same with the operands of + and - "
         "zero-padded to one width) or plain")
      ->capture_default_str();
  app.add_option("--first-task-seed", options.data.first_task_seed,
                 "Task seeds used for training start here (keep evaluation seeds outside)")
      ->capture_default_str();
  app.add_option("--tasks-per-seed", options.data.tasks_per_seed, "Demonstrations drawn from each task seed")
      ->capture_default_str();
  app.add_option("--seed", options.data.seed, "Seed of the flaws and guesses")->capture_default_str();
  app.add_option("--init-seed", options.init_seed, "Seed of the parameter initialisation")
      ->capture_default_str();
  app.add_option("--system-prompt", options.data.format.system_prompt,
                 std::string("System prompt text (default: none; the old default was \"") +
                     policy::kDefaultSystemPrompt + "\")");
  app.add_option("--d-model", options.model.d_model, "Model width")->capture_default_str();
  app.add_option("--layers", options.model.n_layers, "Transformer layers")->capture_default_str();
  app.add_option("--heads", options.model.n_heads, "Attention heads")->capture_default_str();
  app.add_option("--d-ff", options.model.d_ff, "MLP width")->capture_default_str();
  app.add_option("--max-seq-len", options.model.max_seq_len, "Context length")->capture_default_str();
  app.add_option("--positions", positions, "Position encoding: learned or rotary")->capture_default_str();
  app.add_option("--save-every", save_every, "Save a checkpoint every N steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--log-every", log_every, "Print progress every N steps")->capture_default_str();
  app.add_option("--threads", threads,
                 "CPU threads (0: all CPUs). With length groups, that many workers of one torch thread each "
                 "share a step's groups (the update does not depend on it); with one group, torch threads")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  policy::configure_cpu_threads(threads);
  std::unique_ptr<training::SftTrainer> trainer;
  const bool have_checkpoint = file_exists(training::policy_file(out));
  if (resume) {
    if (!have_checkpoint) {
      std::cerr << "zorplex-sft: --resume: no checkpoint in " << out << " (" << training::policy_file(out)
                << " is missing); run without --resume to start one\n";
      return kUsageError;
    }
    auto resumed = training::SftTrainer::resume(out);
    if (!resumed) {
      std::cerr << "zorplex-sft: cannot resume: " << resumed.error().message << "\n";
      return kUsageError;
    }
    trainer = std::move(resumed).value();
    if (steps_opt->count() > 0) trainer->set_total_steps(options.steps);
    std::printf("resuming %s at step %d of %d (the checkpoint's options)\n", out.c_str(),
                trainer->completed_steps(), trainer->options().steps);
  } else {
    if (have_checkpoint) {
      std::cerr << "zorplex-sft: " << out << " already holds a checkpoint; pass --resume to continue it or "
                << "choose another --out\n";
      return kUsageError;
    }
    options.data.mix.clear();
    for (const std::string& t : tasks) {
      auto mix = rollout::parse_task_mix(t);
      if (!mix) {
        std::cerr << "zorplex-sft: --task " << t << ": " << mix.error().message << "\n";
        return kUsageError;
      }
      options.data.mix.push_back(mix.value());
    }
    auto style = rollout::parse_arithmetic(arithmetic);
    if (!style) {
      std::cerr << "zorplex-sft: --arithmetic: " << style.error().message << "\n";
      return kUsageError;
    }
    options.data.arithmetic = style.value();
    if (positions == "rotary") {
      options.model.positions = policy::PositionEncoding::kRotary;
    } else if (positions != "learned") {
      std::cerr << "zorplex-sft: --positions must be learned or rotary\n";
      return kUsageError;
    }
    if (std::string problem = options.validate(); !problem.empty()) {
      std::cerr << "zorplex-sft: " << problem << "\n";
      return kUsageError;
    }
    auto created = training::SftTrainer::create(options);
    if (!created) {
      std::cerr << "zorplex-sft: " << created.error().message << "\n";
      return kUsageError;
    }
    trainer = std::move(created).value();
  }
  const training::SftOptions& run = trainer->options();
  // The model's matrices are too small for torch's intra-op threads to pay
  // (1 thread 24.7 s, 2 threads 23.1 s for 40 steps); workers over the
  // length groups took 1.52x less time (docs/results.md).
  const int cpu_threads = torch::get_num_threads();
  if (run.length_groups > 1 && cpu_threads > 1) {
    trainer->set_workers(std::min(cpu_threads, run.length_groups));
    torch::set_num_threads(1);
  }
  const std::string threading =
      trainer->workers() > 1 ? std::to_string(trainer->workers()) + " workers of 1 torch thread"
                             : std::to_string(torch::get_num_threads()) + " torch threads";
  std::printf(
      "policy: %lld parameters (d_model %lld, %lld layers, %lld heads); %d steps x %d demonstrations; "
      "task seeds %lld..%lld; imperfect %.0f%%; %s%s\n",
      static_cast<long long>(policy::parameter_count(run.model)), static_cast<long long>(run.model.d_model),
      static_cast<long long>(run.model.n_layers), static_cast<long long>(run.model.n_heads), run.steps,
      run.batch_size, static_cast<long long>(run.data.first_task_seed),
      static_cast<long long>(trainer->data().last_task_seed(static_cast<std::uint64_t>(run.steps) *
                                                            static_cast<std::uint64_t>(run.batch_size))),
      100.0 * run.data.imperfect_fraction, threading.c_str(),
      policy::openblas_configured() ? ", OpenBLAS single-threaded" : "");
  std::fflush(stdout);

  if (::mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) {
    std::cerr << "zorplex-sft: cannot create " << out << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::ofstream log(out + "/train_log.jsonl", std::ios::app);
  const auto start = std::chrono::steady_clock::now();
  const int first_step = trainer->completed_steps();
  double window_loss = 0.0;
  int window_steps = 0;
  std::int64_t window_tokens = 0;
  double window_seconds = 0.0;
  auto save = [&]() -> bool {
    auto bytes = trainer->save(out);
    if (!bytes) {
      std::cerr << "zorplex-sft: saving " << out << " failed: " << bytes.error().message << "\n";
      return false;
    }
    return true;
  };
  while (trainer->completed_steps() < run.steps) {
    if (g_interrupted.load()) {
      std::printf("interrupted at step %d: saving %s\n", trainer->completed_steps(), out.c_str());
      return save() ? 130 : 1;
    }
    auto report = trainer->step();
    if (!report) {
      std::cerr << "zorplex-sft: " << report.error().message << "\n";
      return 1;
    }
    const training::SftStepReport& r = report.value();
    log << nlohmann::json{{"step", r.step},
                          {"loss", r.loss},
                          {"lr", r.lr},
                          {"grad_norm", r.grad_norm},
                          {"applied", r.applied},
                          {"tokens", r.tokens},
                          {"target_tokens", r.target_tokens},
                          {"seconds", r.seconds}}
               .dump()
        << "\n";
    window_loss += r.loss;
    window_tokens += r.tokens;
    window_seconds += r.seconds;
    ++window_steps;
    const bool last = r.step == run.steps;
    if (r.step % std::max(1, log_every) == 0 || last || r.step == first_step + 1) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double per_step = elapsed / (r.step - first_step);
      std::printf("step %5d/%d  loss %.4f  lr %.2e  |g| %.3f  %6.0f tok/s  elapsed %s  eta %s%s\n", r.step,
                  run.steps, window_loss / window_steps, r.lr, r.grad_norm, window_tokens / window_seconds,
                  duration_text(elapsed).c_str(), duration_text(per_step * (run.steps - r.step)).c_str(),
                  r.applied ? "" : "  (non-finite gradient: update skipped)");
      std::fflush(stdout);
      window_loss = 0.0;
      window_steps = 0;
      window_tokens = 0;
      window_seconds = 0.0;
    }
    if (save_every > 0 && r.step % save_every == 0 && !last && !save()) return 1;
  }
  if (!save()) return 1;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("done: %d steps in %s; checkpoint %s\nevaluate it with: zorplex-eval --checkpoint %s\n",
              trainer->completed_steps() - first_step, duration_text(elapsed).c_str(),
              training::policy_file(out).c_str(), out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::cerr << "zorplex-sft: internal error: " << e.what() << "\n";
  return 1;
}
