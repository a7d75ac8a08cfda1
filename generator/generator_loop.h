// generator/generator_loop.h: one generator process's work: pull the newest
// policy version straight into the model's parameter buffer, roll out
// Zorplex episodes with it, and send them to the trainer as groups.
//
// Contract
// - A round: (1) pull the newest version if it is newer than the one held
//   (sync mode, and before the first round: wait for one); (2) draw
//   `prompts` tasks from this generator's own seeded stream (task seed
//   task_seed_base + id * 1,000,000 + n mod 1,000,000, data epoch n /
//   1,000,000: generator_state.h; task n is of kind tasks[n %
//   tasks.size()], so a mix alternates) and sample `group_size` episodes of
//   each at `temperature`; with dynamic_filter on, a group whose rewards
//   are all equal is not sent and more prompts are sampled until `prompts`
//   groups carry a signal or oversample_cap * prompts prompts were sampled
//   (algorithms/dynamic_filter.h: the groups carry what was filtered, and
//   the round's line says prompts_sampled, groups_filtered, cap_hit);
//   (3) send one TrajectoryGroup per usable prompt, tagged
//   with the version it was sampled with (version_start), the newest version
//   published when it is sent (version_end), and the pull that preceded it.
//   The parameters change only in (1), between rounds: a group never mixes
//   versions.
// - In-flight updates (async, staged_updates on, the policy's float32 layout
//   in flight): the weights never stop generation. A background pull stages
//   each new version while the generator samples (generator/staged_policy.h);
//   it is installed at the next token boundary, so a sequence in flight
//   finishes under the new weights with its KV cache kept, and every token
//   records the version it was sampled with (Trajectory::token_versions). A
//   group's version_start is its oldest token's version: staleness counts a
//   trajectory by its oldest token. A trainer lost mid-round stops nothing:
//   the round finishes on the installed version, and the next round first
//   reconnects (below), then takes that trainer's newest version, even an
//   older one (a trainer resumed from a checkpoint). Sync mode and a narrowed
//   wire keep the round-boundary pulls below.
// - Faults: a lost trainer (the Subscriber's sticky error) is answered by
//   connecting again, for up to trainer_timeout; a new connection takes the
//   newest version the (restarted) trainer offers. After a failed pull
//   (the buffer may hold part of a version) nothing is sampled until a
//   pull succeeds. Sending waits while the
//   trainer's queue is full (backpressure). Waiting longer than
//   trainer_timeout for the trainer in any of these ends run() with an
//   Error that says so.
// - Async pacing (groups_per_version > 0): see GeneratorOptions; it keeps
//   the trainer's queue, hence the staleness of what it trains on, short.
// - stop (set from a signal handler) is checked between every blocking step;
//   run() then returns promptly (within about a second plus the rollout in
//   progress).
// - Wire dtype: the generator follows the publisher's layout. The policy's
//   own float32 layout is pulled straight into the model's buffer; a narrowed
//   form (a trainer with --wire-dtype bf16|fp16) into a host image of it,
//   allocated once, then widened into the buffer after each successful pull
//   (loop::PolicyPullTarget); the pull line's "wire_dtype" says which.
// - Device: pulls land in the model's buffer wherever it lives; for a CUDA
//   model straight in device memory (loop::policy_destination; the library
//   stages through page-locked host chunks unless the transport writes device
//   memory itself), and the pull line's "staged" says which.
// - Position in the task stream (generator/generator_state.h): run() starts
//   at options.start (task, round, group sequence; all 0 for a new stream,
//   a saved state's with --resume) and, when options.state_file is set,
//   saves the position there at start-up and after every round, a round cut
//   short by a stop included (its tasks were drawn: a resumed run never
//   draws them again). A generator killed mid-round resumes at that round's
//   start, so it may repeat the groups of that one round it had sent. A
//   state file that cannot be written ends run() with an Error (resuming
//   from a stale one would repeat prompts). options.max_rounds counts the
//   rounds of this run().
// - Transcripts (rollout/transcript_writer.h; transcripts may be null): one
//   line per sampled trajectory, unsent ones too ("sent": false), flushed
//   at the end of each round, before the state is saved.
// - Threads: run() on one thread; the model uses torch's intra-op threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/replay_buffer.h"
#include "generator/generator_metrics.h"
#include "generator/generator_state.h"
#include "loop/run_log.h"
#include "policy/transformer.h"
#include "rollout/demonstrations.h"
#include "rollout/rollout.h"
#include "rollout/transcript_writer.h"
#include "zorplex/result.h"

namespace weightsync {
class MetricsEndpoint;
class Subscriber;
}
namespace loop {
class PolicyPullTarget;
}
namespace channel {
class GroupSender;
}

namespace generator {

class WeightSource;
class StagedPolicy;

struct GeneratorOptions {
  // The trainer's Publisher (or relays), host:port, in order of preference:
  // a lost source is replaced by the next that answers.
  std::vector<std::string> weights_addresses;
  // "HOST[:PORT]": also serve the weights to other generators from a relay
  // at this address (generator/weight_source.h); empty: no relay.
  std::string relay_bind;
  std::string relay_address_file;   // the relay's address is written here once it serves
  std::string trajectory_endpoint;  // the trainer's GroupReceiver, tcp://host:port
  std::string secret;
  std::uint32_t id = 0;
  bool sync = false;
  int prompts = 4;     // prompts per round
  int group_size = 8;  // episodes per prompt (G)
  double temperature = 0.7;
  std::vector<rollout::TaskMix> tasks{rollout::TaskMix{}};  // not empty
  // Prompts weighted towards carries: each prompt draws this many tasks from
  // its stream and keeps the first with the most columns that take a carry or
  // borrow in (rollout::carries_in). 1: every prompt's first task.
  int carry_candidates = 1;
  std::int64_t task_seed_base = 200000;
  std::uint64_t sampling_seed = 1;
  int max_rounds = 0;  // rounds of this run(); 0: until stopped
  // Where the task stream starts (a saved state's position with --resume).
  GeneratorPosition start;
  // Saved here after every round (generator/generator_state.h); empty: nowhere.
  std::string state_file;
  // async pacing (AReaL's staleness control at the source): this
  // generator's share of the groups of one trainer step; it starts a round
  // only while the groups it sent since it connected, plus this round's,
  // fit in (versions published since + max_ahead_versions) * groups_per_version,
  // and otherwise waits for the next version (at most 10 s: a safety valve).
  // Every sent group counts (the trainer's batch is the groups it gets; with
  // the dynamic filter on, zero-variance groups are not sent). 0: no pacing.
  int groups_per_version = 0;
  int max_ahead_versions = 2;
  std::chrono::seconds trainer_timeout{60};
  std::string transport = "auto";
  // Async: pull in the background and install at token boundaries (above).
  bool staged_updates = true;
  // SLIME's dynamic sampling (algorithms/dynamic_filter.h): groups whose
  // rewards are all equal are not sent; the round samples further prompts
  // until `prompts` groups carry a signal or oversample_cap * prompts
  // prompts were sampled. Off: one batch of `prompts`, every group sent.
  bool dynamic_filter = true;
  int oversample_cap = 4;
  // A Prometheus /metrics endpoint the caller started (--metrics-address)
  // and keeps alive past the loop: the loop registers its subscriber,
  // in-flight updates and relay there (generator_metrics.h). nullptr: none.
  weightsync::MetricsEndpoint* metrics_endpoint = nullptr;
};

struct GeneratorTotals {
  std::uint64_t rounds = 0;
  std::uint64_t groups_sent = 0;
  std::uint64_t trajectories = 0;
  std::uint64_t tokens = 0;
  std::uint64_t pulls = 0;
  std::uint64_t reconnects = 0;
};

class GeneratorLoop {
 public:
  // model: built from the starting checkpoint (its config and prompt format);
  // its buffer is overwritten by every pull. metrics, timeline and
  // transcripts may be null; they are borrowed and must outlive run().
  GeneratorLoop(GeneratorOptions options, policy::Transformer model, policy::PromptFormat format,
                loop::JsonlFile* metrics, loop::JsonlFile* timeline,
                rollout::TranscriptWriter* transcripts = nullptr);
  ~GeneratorLoop();

  zorplex::Result<GeneratorTotals> run(const std::atomic<bool>& stop);

 private:
  struct Pulled {
    bool pulled = false;
    double seconds = 0.0;
    std::uint64_t bytes = 0;
  };
  // What a round's batches sampled, for its log line.
  struct RoundTally {
    std::uint64_t version = 0;  // the version the round started on
    std::uint64_t batches = 0;
    std::uint64_t trajectories = 0;
    std::uint64_t tokens = 0;
    double generation_seconds = 0.0;
    double reward_sum = 0.0;
    int correct = 0;
    std::string operators;  // each prompt's operator ('.' for kinds without one)
    int carries = 0;
    std::vector<TaskInStream> tasks;                         // every prompt sampled, in order
    std::map<std::uint64_t, std::uint64_t> data_epochs;      // by task seed, for transcripts
  };
  zorplex::Result<bool> connect(const std::atomic<bool>& stop);
  // One batch of a round: the next `prompts` prompts of this generator's task
  // stream, group_size episodes each, as groups (version_start, task and
  // sampling fields set; not sent). Nothing when stopped.
  zorplex::Result<std::vector<algorithms::TrajectoryGroup>> sample_batch(int prompts, std::uint64_t round,
                                                                         RoundTally& tally,
                                                                         const std::atomic<bool>& stop);
  zorplex::Result<Pulled> pull_newest(bool wait_for_newer, const std::atomic<bool>& stop);
  // Async pacing: waits until the next round fits the allowance.
  zorplex::Result<bool> wait_for_allowance(const std::atomic<bool>& stop);
  zorplex::Result<bool> send(const algorithms::TrajectoryGroup& group, const std::atomic<bool>& stop);
  // In-flight mode: (re)connects the staged policy, and before the first
  // round of a connection waits for a version; false when stopped.
  zorplex::Result<bool> prepare_staged(const std::atomic<bool>& stop);
  // The first version of a connection: pacing counts versions and groups from here.
  void rebase_pacing(std::uint64_t version);
  bool staged_mode() const {
    return staged_ != nullptr || (!options_.sync && options_.staged_updates && !narrow_wire_);
  }
  // The newest version known (pacing, version_end), or nullopt if the trainer is unreachable now.
  std::optional<std::uint64_t> newest_version();
  void wait_for_newer(std::uint64_t than);
  // Saves the stream position to options_.state_file (if set).
  zorplex::Result<bool> save_state();

  GeneratorOptions options_;
  policy::Transformer model_;
  policy::PromptFormat format_;
  loop::JsonlFile* metrics_;
  loop::Timeline timeline_;
  rollout::TranscriptWriter* transcripts_;
  std::unique_ptr<WeightSource> source_;
  std::unique_ptr<weightsync::Subscriber> subscriber_;
  // Where pulls land: the model's buffer, or a narrow image widened into it
  // (the trainer's --wire-dtype; kept across reconnects to the same layout).
  std::unique_ptr<loop::PolicyPullTarget> pull_target_;
  std::unique_ptr<channel::GroupSender> sender_;
  std::unique_ptr<StagedPolicy> staged_;  // in-flight mode
  bool narrow_wire_ = false;              // the trainer sends a narrowed form: no in-flight mode
  bool pace_base_pending_ = false;  // in-flight mode: the first install of a connection sets the pace base
  std::uint64_t version_ = 0;       // the version in the model's buffer; 0 before the first pull
  bool buffer_intact_ = true;       // false after a failed pull until one succeeds
  std::uint64_t next_task_ = 0;      // the next task of the stream (options_.start on entry)
  std::uint64_t next_round_ = 0;     // the round counter, also the sampling seed's position
  std::uint64_t next_sequence_ = 0;  // the next group's TrajectoryGroup::sequence
  std::uint64_t pace_base_version_ = 0;  // first version pulled on this connection
  std::uint64_t pace_sent_groups_ = 0;   // groups sent on this connection
  GeneratorTotals totals_;
  // Last: destroyed first, so no scrape reads the objects above as they go.
  GeneratorMetrics prometheus_;
};

}  // namespace generator
