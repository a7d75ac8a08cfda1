// trainer/trainer_loop.h: the RL trainer's loop: collect trajectory groups
// from the generators, take a policy-gradient step, publish the new version
// through libweightsync, log, checkpoint.
//
// Contract
// - start(): creates the Publisher over the policy's layout (one slot per
//   version, 3 slots) and the trajectory receiver, publishes the starting
//   weights as the starting version (1 for a fresh run, the checkpoint's
//   version on resume) and writes the address file (JSON: "weights",
//   "trajectories", "version"; temporary file + rename).
// - run(): for every step up to options.steps:
//   * sync: waits for the round of the current version, i.e. every group of
//     it from each live generator (each group carries round_groups, how many
//     its round sends: fewer than the generator's prompts when its dynamic
//     filter hit the over-sampling cap); a generator that has not delivered
//     round_timeout_s after the first group of the round arrived is left out
//     (and counted back in when it delivers again). Trains on every usable
//     group of the round.
//   * async: consumes the next batch_groups groups from the replay buffer,
//     waiting for more as needed, and trains on the usable ones among them:
//     a step stands for as many sampled groups as a sync round of
//     batch_groups prompts (zero-variance and undersized groups count, stale
//     ones do not).
//   * with a token budget (batcher.token_budget > 0, Marin's batcher), in
//     either mode a step's batch is planned by algorithms::plan_batch
//     (shares, deficit order, newest first, whole groups, never over the
//     budget) once stale groups are dropped; a planned group without a
//     signal takes its tokens and is dropped and counted, as in a
//     group-count batch. async: waits for more groups until no environment
//     is short of its share, or, once another has tokens in the plan, for at
//     most the spill wait, then trains on the plan (the shortfall reported
//     as spilled_tokens). sync: the round still decides what arrives; the
//     plan caps what of it is trained on, without waiting. Groups not taken
//     stay queued until stale. A group larger than the budget is never
//     taken (one line on stderr); an async step whose queued groups all are,
//     for idle_timeout_s, ends run() with an Error.
//   The replay buffer is one queue per environment (task kind and
//   difficulty, algorithms/environment_buffers.h); without a token budget
//   the queues are read together in arrival order, as one buffer.
//   Every step line carries "environments": per environment, Marin's
//   buffer, arrival and batch metrics (EnvironmentBuffers::step_metrics),
//   with the token budget on or off.
//   Groups sampled with a version newer than the current one (from before a
//   trainer restart) or, in sync, with any other version are dropped and
//   counted; so are groups sampled at another temperature than the trainer's
//   (--temperature, else the first group's: algorithms::SamplingAgreement),
//   with one line on stderr per generator saying what to change; so are
//   groups whose generator filtered zero-variance groups while this trainer
//   keeps them (!replay.drop_zero_variance: algorithms::accept_filtered,
//   "--dynamic-filter off"); the replay buffer drops stale, undersized
//   (below replay.min_group_size) and zero-variance groups and counts them
//   (the step line's "dropped"). Every step's line reports the trajectories
//   sampled (of the groups consumed, plus what their generators filtered
//   before sending them), filtered and trained. Then one RlUpdater step at
//   the scheduled learning rate, version + 1, publish, one metrics line
//   (trainer.jsonl) and timeline spans. Versions only increase.
// - Publishing, by the model's device. CPU: Publisher::publish(), one copy
//   into a slot, committed before publish() returns; one "publish" line.
//   CUDA: Publisher::publish_from_device() enqueues the copy (ordered after
//   libtorch's queued kernels, loop/device.h) and returns; the version commits
//   on the Publisher's thread while this one goes on. The result is collected
//   (flush_device_publishes) before the next write to the parameters, i.e.
//   before the next optimizer step, before the next publish and at the end;
//   only then is its "publish" line written, with enqueue_seconds and
//   commit_copy_seconds added. A failed device publish ends run() with its
//   Error.
// - Wire dtype (options.wire_dtype, --wire-dtype): kFloat32 publishes the
//   float32 buffer as above. kBFloat16 / kFloat16 publish through a
//   weightsync::NarrowingPublisher over the narrowed layout: publish() copies
//   the buffer into its staging (one memcpy on this thread) and its converter
//   thread rounds it (to nearest even) into a slot and commits it, while this
//   thread goes on. A version still waiting for the converter when the next
//   is published is skipped (newest wins; sync mode never gets there: it
//   waits for the round of each version). The converter's errors end run()
//   at the next publish or at the end. Host policies only: a CUDA policy with
//   a narrow wire dtype is refused by start(). The publish line adds
//   wire_dtype, handoff_seconds, replaced_version and the converter's
//   counters so far; its xxh3 is that of the float32 master weights (the
//   generators' digests are of the widened bfloat16/float16 weights).
//   kFloat8E4M3 (--wire-dtype fp8) does the same through a
//   weightsync::Fp8Publisher over the policy's fp8 layout (fp8_layout's
//   default rule: the matrices in 128x128 e4m3 blocks with their
//   "_scale_inv" scales, embeddings and 1-D tensors in bfloat16); generators
//   dequantize it into their float32 parameters.
// - Synthetic groups (options.synthetic.groups > 0, --synthetic-groups):
//   each step trains on groups made up on the trainer (synthetic_groups.h)
//   instead of the generators' groups, with no wait: the step's compute and
//   publish alone, to time them against the same step while generators pull
//   every version (scripts/gpu-check.sh). Every other part of the step is
//   as above; the groups bypass the replay buffer.
// - Checkpoints (loop/rl_checkpoint.h) every checkpoint_every steps, at the
//   end and when stopped; resume() continues from one.
// - Errors: no trajectory for idle_timeout_s, a failed update or publish,
//   or a failed checkpoint end run() with an Error (after trying to save).
// - Threads: one thread; the Publisher serves pulls (and commits device
//   publishes) on its own threads while this one trains. The Publisher is
//   destroyed before the model, so an in-flight device copy never reads
//   freed memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "algorithms/environment_buffers.h"
#include "algorithms/outcome_tally.h"
#include "algorithms/sampling_agreement.h"
#include "channel/rejection_log.h"
#include "loop/rl_checkpoint.h"
#include "loop/run_log.h"
#include "policy/transformer.h"
#include "trainer/synthetic_groups.h"
#include "training/rl_update.h"
#include "weightsync/layout.h"
#include "weightsync/options.h"
#include "zorplex/result.h"

namespace weightsync {
class Publisher;
class NarrowingPublisher;
class Fp8Publisher;
}  // namespace weightsync
namespace channel {
class GroupReceiver;
}

namespace trainer {

struct TrainerOptions {
  bool sync = false;
  int steps = 30;
  int generators = 2;         // sync: generators expected per round
  int prompts_per_round = 4;  // sync: prompts of a generator round (for the record: groups say how many a round sends)
  int batch_groups = 8;       // async: groups per optimizer step
  double round_timeout_s = 15.0;
  double idle_timeout_s = 120.0;
  algorithms::ReplayOptions replay;
  // Marin's token-budget batcher (algorithms/token_budget_batcher.h);
  // batcher.token_budget 0: off, batches by group count (batch_groups, sync
  // rounds). max_seq_len is set from the model.
  algorithms::BatcherOptions batcher;
  // The sampling temperature groups must carry (--temperature); nullopt:
  // the first group's, pinned (algorithms::SamplingAgreement).
  std::optional<double> expected_temperature;
  training::RlUpdateOptions update;  // update.lr is the peak learning rate
  // "cosine": from update.lr down to min_lr_ratio * update.lr at the last
  // step (a run ends on small steps, not in the middle of an oscillation);
  // "constant": update.lr throughout.
  std::string lr_schedule = "cosine";
  double min_lr_ratio = 0.1;
  std::string algorithm = "grpo";  // for the record
  int checkpoint_every = 10;
  // Greedy evaluation on a fixed held-out subset every eval_every steps and
  // after the last: the first eval_tasks tasks of the held-out set (seed 42,
  // compositional, as zorplex-eval) of each of eval_difficulties, in the
  // policy's prompt format. One "eval" line in trainer.jsonl per difficulty
  // (step, version, difficulty, tasks, correct, accuracy, seconds) and an
  // "eval" span. Not inside any step's time. 0: never.
  int eval_every = 0;
  int eval_tasks = 50;
  // The compositional difficulties evaluated each time, in this order (one
  // "eval" line each, with its "difficulty"); default easy alone.
  std::vector<zorplex::Difficulty> eval_difficulties{zorplex::Difficulty::kEasy};
  std::string out_dir;  // checkpoint, trainer.jsonl, timeline-trainer.jsonl
  weightsync::PublisherOptions publisher;
  // The dtype versions travel in: kFloat32 (as trained), kBFloat16 or kFloat16.
  weightsync::DType wire_dtype = weightsync::DType::kFloat32;
  std::string trajectory_endpoint = "tcp://127.0.0.1:*";
  std::string secret;
  std::string address_file;  // "" : none
  std::string options_json;  // the command line's settings, stored in checkpoints
  // groups > 0: train on made-up groups, no generators (see the contract).
  SyntheticGroupOptions synthetic;
};

struct TrainerSummary {
  int steps = 0;
  std::uint64_t version = 0;
  std::uint64_t trajectories_trained = 0;
  // Of the groups the steps consumed, zero-variance and undersized ones too,
  // plus what the generators filtered before sending them.
  std::uint64_t trajectories_sampled = 0;
  std::uint64_t trajectories_filtered = 0;  // by the generators' dynamic filter
  std::uint64_t trajectories_received = 0;
  double wall_seconds = 0.0;
  bool stopped = false;  // by a signal
};

class TrainerLoop {
 public:
  // model: the starting policy; carried: its checkpoint metadata (prompt
  // format, SFT options) to keep in RL checkpoints.
  TrainerLoop(TrainerOptions options, policy::Transformer model, policy::Metadata carried);
  ~TrainerLoop();

  // The policy the KL term (options.update.loss.kl_coef > 0) pulls towards:
  // the warm start, also when resuming. Same config and device as the model.
  void set_reference(policy::Transformer reference);
  // Continue from an RL checkpoint already loaded into the model.
  zorplex::Result<bool> resume(const std::string& dir, const loop::RlProgress& progress);
  zorplex::Result<bool> start();
  zorplex::Result<TrainerSummary> run(const std::atomic<bool>& stop);

  const std::string& weights_address() const { return weights_address_; }
  const std::string& trajectory_endpoint() const { return trajectory_endpoint_; }
  // The Publisher subscribers pull from (the NarrowingPublisher's or
  // Fp8Publisher's, if any); after start(), alive as long as this loop.
  weightsync::Publisher& weights_publisher();

 private:
  // Synthetic groups: waits until options_.synthetic.wait_readers leases
  // were granted (Error after idle_timeout_s).
  zorplex::Result<bool> wait_for_readers(const std::atomic<bool>& stop);
  zorplex::Result<std::vector<algorithms::TrajectoryGroup>> collect_round(const std::atomic<bool>& stop);
  zorplex::Result<std::vector<algorithms::TrajectoryGroup>> collect_batch(const std::atomic<bool>& stop);
  // The token-budget batcher (budget_batch.cc): async, waits for a full
  // plan or the spill wait; the plan's groups taken, shortfalls in spilled_.
  zorplex::Result<std::vector<algorithms::TrajectoryGroup>> collect_budget(const std::atomic<bool>& stop);
  std::vector<algorithms::TrajectoryGroup> take_plan(const algorithms::BatchPlan& plan);
  // The step line's "environments" object and the console's part, from
  // metrics of the batch (EnvironmentBuffers::step_metrics).
  static nlohmann::json environments_json(
      const std::map<std::string, algorithms::EnvironmentMetrics>& metrics);
  static std::string environments_console(
      const std::map<std::string, algorithms::EnvironmentMetrics>& metrics);
  // What receive_one() got.
  struct Arrival {
    bool group = false;  // a group of an acceptable version arrived (queued or zero-variance)
    std::uint32_t generator = 0;
    std::uint32_t round_groups = 1;  // the groups its generator's round sends
  };
  // Receives one message (waits up to 200 ms).
  Arrival receive_one(bool sync);
  // Publishes the model as version_ (host or device path, see the contract).
  zorplex::Result<bool> publish();
  zorplex::Result<bool> publish_host();
  zorplex::Result<bool> publish_device();
  zorplex::Result<bool> publish_narrow();
  // Collects the in-flight device publish, if any, and logs it.
  zorplex::Result<bool> flush_publish();
  zorplex::Result<bool> checkpoint();
  zorplex::Result<bool> evaluate_held_out();
  zorplex::Result<bool> write_address_file() const;

  TrainerOptions options_;
  // A device publish enqueued and not yet collected.
  struct PendingPublish {
    std::uint64_t version = 0;
    std::string digest;
    double enqueue_seconds = 0.0;
    double time = 0.0;  // wall clock when the enqueue returned
  };

  policy::Transformer model_;  // declared before publisher_: outlives it
  std::optional<policy::Transformer> reference_;  // declared before updater_, which borrows it
  policy::Metadata carried_;
  policy::PromptFormat eval_format_;  // the policy's, for evaluate_held_out()
  training::RlUpdater updater_;
  algorithms::EnvironmentBuffers buffer_;                      // one queue per environment
  std::unique_ptr<weightsync::Publisher> publisher_;           // float32 on the wire
  std::unique_ptr<weightsync::NarrowingPublisher> narrowing_;  // or bfloat16 / float16
  std::unique_ptr<weightsync::Fp8Publisher> fp8_;              // or fp8 e4m3 blocks + scales
  std::optional<PendingPublish> pending_publish_;
  std::unique_ptr<channel::GroupReceiver> receiver_;
  std::unique_ptr<SyntheticGroups> synthetic_;  // set when options_.synthetic.groups > 0
  std::unique_ptr<loop::JsonlFile> metrics_;
  std::unique_ptr<loop::JsonlFile> timeline_file_;
  loop::Timeline timeline_{nullptr, "trainer"};
  std::string weights_address_;
  std::string trajectory_endpoint_;
  std::uint64_t version_ = 1;
  int step_ = 0;
  int live_generators_ = 0;
  std::uint64_t dropped_off_version_ = 0;
  std::uint64_t consumed_before_ = 0;  // ReplayCounters::trajectories_consumed at the last step
  std::uint64_t filtered_before_ = 0;  // ReplayCounters::trajectories_filtered_at_source at the last step
  std::uint64_t filtered_groups_before_ = 0;  // and groups_filtered_at_source
  // Groups refused because their generator filtered while this trainer keeps
  // zero-variance groups (algorithms::accept_filtered), and who was told.
  std::uint64_t refused_filtered_ = 0;
  std::set<std::uint32_t> told_about_filter_;
  std::uint64_t rejected_messages_ = 0;
  // At most 10 rejection lines per 10 s on stderr, then one "suppressed" summary.
  channel::RejectionLog rejection_log_{stderr, "trainer: rejected a trajectory message: "};
  algorithms::SamplingAgreement sampling_;
  algorithms::OutcomeTally arrived_;  // this step's arrivals, before the zero-variance filter
  std::set<std::uint32_t> told_about_sampling_;  // generators already told why they are refused
  double last_arrival_ = 0.0;  // steady seconds
  // Per-generator pull reports seen since the last step.
  std::vector<nlohmann::json> pulls_;
  // This step's shortfalls per environment (the token budget's spill).
  std::map<std::string, std::uint64_t> spilled_;
  bool told_oversized_ = false;  // a group larger than the token budget was reported
  std::uint64_t trajectories_trained_ = 0;
};

}  // namespace trainer
