// training/sft.h: the supervised warm start: the policy learns the tool
// protocol from synthesized demonstrations (rollout/demonstrations.h).
//
// Contract
// - Step s (0-based) trains on demonstrations [s * batch_size, (s + 1) *
//   batch_size) of the stream with the masked token loss
//   (training::masked_mean_nll: prompt and injected results masked out) and
//   one FlatAdamW update at learning_rate(options, s): linear warm-up over
//   warmup_steps, then cosine decay to min_lr_ratio * lr at `steps`. The
//   batch runs as `length_groups` micro-batches of similar lengths (sorted
//   by length, each padded only to its own longest); each one's loss is
//   divided by the whole batch's target count and the gradients add up, so
//   the update is the whole batch's mean to rounding, with less padding.
// - A checkpoint is a folder: policy.safetensors (policy::save_model, with
//   "sft.step" and "sft.options" (JSON) in its metadata; any safetensors
//   reader can load it) and optimizer.safetensors (the AdamW moments
//   exp_avg / exp_avg_sq and "step", "sft.step"). Both files are written
//   atomically, optimizer first; resume() refuses a folder whose two step
//   counts differ (a save cut in between) or whose options do not parse.
//   Resuming continues exactly where the run stopped: the data stream is
//   random access, so the continued run sees the batches the uninterrupted
//   one would have.
// - Errors are values (zorplex::Result); a torch failure inside step() is
//   caught and returned as an Error.
// - Thread: one thread drives a trainer; it uses torch's intra-op threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "policy/model_config.h"
#include "policy/transformer.h"
#include "rollout/demonstrations.h"
#include "training/flat_adamw.h"
#include "zorplex/result.h"

namespace training {

struct SftOptions {
  policy::ModelConfig model;
  std::uint64_t init_seed = 0;  // parameter initialisation
  rollout::DemonstrationOptions data;
  // The default budget (docs/results.md): about 7-8 minutes on 2 cores.
  int steps = 1000;
  int batch_size = 16;
  // Micro-batches of similar lengths per step (1: the batch padded as one;
  // more than batch_size count as batch_size). Only the rounding of the
  // update depends on it.
  int length_groups = 4;
  double lr = 3e-3;
  int warmup_steps = 30;
  double min_lr_ratio = 0.1;
  AdamWOptions adamw;

  std::string validate() const;  // "" when usable
  std::string to_json() const;
  static zorplex::Result<SftOptions> from_json(const std::string& text);
};

double learning_rate(const SftOptions& options, int step);

// The measured best warm start (docs/results.md, issue 19), the default of
// zorplex-sft and of the trainer's own warm start: rotary positions, no
// system prompt, column arithmetic, demonstrations of compositional medium
// tasks (+, - and *: 100% on held-out easy tasks and 82% on medium ones),
// 1500 steps. The plain SftOptions{} keeps the library's neutral defaults.
SftOptions recommended_warm_start();

struct SftStepReport {
  int step = 0;  // the step just taken (1-based count of completed steps)
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  bool applied = true;
  std::int64_t tokens = 0;         // tokens in the batch (padding excluded)
  std::int64_t target_tokens = 0;  // tokens in the loss
  double seconds = 0.0;            // wall time of the step
};

// The files of a checkpoint folder.
std::string policy_file(const std::string& dir);
std::string optimizer_file(const std::string& dir);

class SftTrainer {
 public:
  static zorplex::Result<std::unique_ptr<SftTrainer>> create(const SftOptions& options);
  static zorplex::Result<std::unique_ptr<SftTrainer>> resume(const std::string& dir);

  zorplex::Result<SftStepReport> step();
  // Creates dir if needed; returns the bytes written.
  zorplex::Result<std::uint64_t> save(const std::string& dir) const;

  int completed_steps() const { return completed_; }
  const SftOptions& options() const { return options_; }
  // Changes the planned total (extends a finished run; the schedule follows).
  void set_total_steps(int steps) { options_.steps = steps; }
  // Threads that share a step's length groups (1, the default: the calling
  // thread does them all). Each worker runs its groups' forward and backward
  // with one torch thread; every group's gradients are kept apart and added
  // in group order, so the update is bit-identical for any worker count
  // (against a calling thread with one torch thread too; more intra-op
  // threads change only the rounding).
  // On 2 cores two workers took 1.52x less time than one worker with 2 torch
  // threads (the model's matrices are too small for intra-op threads;
  // docs/results.md). Set it before step(), from the thread that steps.
  void set_workers(int workers) { workers_ = workers < 1 ? 1 : workers; }
  int workers() const { return workers_; }
  policy::Transformer& model() { return model_; }
  const rollout::DemonstrationStream& data() const { return data_; }

 private:
  SftTrainer(SftOptions options, policy::Transformer model);

  SftOptions options_;
  policy::Transformer model_;
  FlatAdamW optimizer_;
  rollout::DemonstrationStream data_;
  int completed_ = 0;
  int workers_ = 1;
};

}  // namespace training
