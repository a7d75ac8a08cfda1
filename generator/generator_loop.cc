#include "generator/generator_loop.h"

#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/dynamic_filter.h"
#include "channel/group_channel.h"
#include "generator/staged_policy.h"
#include "generator/weight_source.h"
#include "loop/policy_weights.h"
#include "weightsync/subscriber.h"
#include "zorplex/tasks.h"

namespace generator {
namespace {

using Clock = std::chrono::steady_clock;
// Longest wait for the pacing allowance before sending anyway (seconds).
constexpr double kPacingPatience = 10.0;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::uint64_t> round_task_seeds(const std::vector<TaskInStream>& tasks) {
  std::vector<std::uint64_t> seeds;
  for (const TaskInStream& task : tasks) seeds.push_back(task.seed);
  return seeds;
}

}  // namespace

GeneratorLoop::GeneratorLoop(GeneratorOptions options, policy::Transformer model, policy::PromptFormat format,
                             loop::JsonlFile* metrics, loop::JsonlFile* timeline,
                             rollout::TranscriptWriter* transcripts)
    : options_(std::move(options)),
      model_(std::move(model)),
      format_(std::move(format)),
      metrics_(metrics),
      timeline_(timeline, "generator-" + std::to_string(options_.id)),
      transcripts_(transcripts),
      next_task_(options_.start.next_task),
      next_round_(options_.start.next_round),
      next_sequence_(options_.start.next_sequence),
      prometheus_(options_.metrics_endpoint) {}

zorplex::Result<bool> GeneratorLoop::save_state() {
  if (options_.state_file.empty()) return true;
  GeneratorState state;
  state.id = options_.id;
  for (const rollout::TaskMix& mix : options_.tasks) state.tasks.push_back(rollout::task_mix_name(mix));
  state.task_seed_base = options_.task_seed_base;
  state.sampling_seed = options_.sampling_seed;
  state.position = GeneratorPosition{next_task_, next_round_, next_sequence_};
  auto saved = save_generator_state(options_.state_file, state);
  if (!saved) return zorplex::Error{"saving the generator's state: " + saved.error().message};
  return true;
}

GeneratorLoop::~GeneratorLoop() = default;

zorplex::Result<bool> GeneratorLoop::connect(const std::atomic<bool>& stop) {
  const auto deadline = Clock::now() + options_.trainer_timeout;
  if (!source_) {
    WeightSourceOptions source;
    source.upstreams = options_.weights_addresses;
    source.relay_bind = options_.relay_bind;
    source.relay_address_file = options_.relay_address_file;
    source.subscriber.secret = options_.secret;
    source.subscriber.transport = options_.transport;
    source.subscriber.client_name = "generator-" + std::to_string(options_.id);
    // From a pipelined relay: start reading a version while it still arrives.
    source.subscriber.accept_streaming = true;
    source_ = std::make_unique<WeightSource>(std::move(source));
  }
  std::string last_error;
  while (!stop.load()) {
    prometheus_.track_relay(nullptr);  // connect() may replace a stopped relay
    auto subscriber = source_->connect();
    prometheus_.track_relay(source_->relay());
    if (subscriber.ok()) {
      const weightsync::WeightLayout& offered = subscriber.value()->layout();
      if (!pull_target_ || pull_target_->offered() != offered) {
        auto target = loop::PolicyPullTarget::create(offered, model_);
        if (!target) return target.error();
        pull_target_ = std::move(target).value();
      }
      if (pull_target_->widens() && !options_.sync && options_.staged_updates && !narrow_wire_) {
        std::printf(
            "generator %u: the weights arrive narrowed: pulled between rounds (in-flight updates need "
            "fp32 in flight)\n",
            options_.id);
        narrow_wire_ = true;
      }
      prometheus_.track_subscriber(nullptr);
      subscriber_ = std::move(subscriber).value();
      prometheus_.track_subscriber(subscriber_.get());
      const std::string wire =
          pull_target_->widens() ? std::string(", weights in ") +
                                       loop::wire_dtype_name(pull_target_->wire_dtype()) + ", widened to fp32"
                                 : std::string();
      std::printf("generator %u: connected to %s (transport %s%s)\n", options_.id,
                  source_->describe().c_str(), subscriber_->transport().c_str(), wire.c_str());
      std::fflush(stdout);
      return true;
    }
    const weightsync::Status& status = subscriber.status();
    if (status.action() == weightsync::Action::kFixConfiguration ||
        status.action() == weightsync::Action::kFixCall) {
      return zorplex::Error{"cannot connect to " + source_->describe() + ": " + status.message()};
    }
    if (last_error.empty()) {
      std::printf("generator %u: waiting for %s (%s)\n", options_.id, source_->describe().c_str(),
                  status.message().c_str());
      std::fflush(stdout);
    }
    last_error = status.message();
    if (Clock::now() >= deadline) {
      return zorplex::Error{"nothing to pull from at " + source_->describe() + " for " +
                            std::to_string(options_.trainer_timeout.count()) + " s (last error: " +
                            last_error + "); start the trainer first or check --trainer"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

zorplex::Result<GeneratorLoop::Pulled> GeneratorLoop::pull_newest(bool wait_for_newer,
                                                                  const std::atomic<bool>& stop) {
  const auto deadline = Clock::now() + options_.trainer_timeout;
  const double wait_start = loop::wall_clock_seconds();
  while (!stop.load()) {
    if (!subscriber_ || !subscriber_->status().ok()) {
      if (subscriber_) {
        std::printf("generator %u: lost the trainer (%s); reconnecting\n", options_.id,
                    subscriber_->status().message().c_str());
        std::fflush(stdout);
        prometheus_.track_subscriber(nullptr);
        subscriber_.reset();
        ++totals_.reconnects;
      }
      auto connected = connect(stop);
      if (!connected) return connected.error();
      if (!connected.value()) break;
    }
    weightsync::PullOptions pull;
    // A new connection (held_version() 0) takes whatever the trainer has,
    // even an older version than ours: a restarted trainer resumes from its
    // last checkpoint.
    if (subscriber_->held_version() != 0) pull.newer_than = version_;
    pull.wait = (wait_for_newer || version_ == 0 || !buffer_intact_) ? std::chrono::milliseconds(500)
                                                                     : std::chrono::milliseconds(0);
    // The destination still holds version_ (nothing writes it between
    // pulls): a publisher with deltas (WEIGHTSYNC_DELTAS=1) can send the
    // difference; anything else falls back to a full pull in the library.
    if (subscriber_->publisher_deltas() && buffer_intact_ && version_ != 0) pull.delta_base = version_;
    const bool first_on_connection = subscriber_->held_version() == 0;
    auto pulled = subscriber_->pull(pull_target_->destination(model_), pull);
    // A failed pull may have written part of a version into the buffer:
    // sample nothing until a pull succeeds.
    if (!pulled.ok() && pulled.status().code() != weightsync::ErrorCode::kNotReady &&
        pulled.status().code() != weightsync::ErrorCode::kTimeout) {
      buffer_intact_ = false;
    }
    if (pulled.ok()) {
      const weightsync::PullResult& r = pulled.value();
      auto widened = pull_target_->finish(model_);
      if (!widened) return widened.error();
      if (first_on_connection) rebase_pacing(r.version);
      version_ = r.version;
      buffer_intact_ = true;
      ++totals_.pulls;
      const double end = loop::wall_clock_seconds();
      prometheus_.count_blocked(r.seconds);  // a foreground pull's whole time (as rl-report counts it)
      if (r.wait_seconds > 0.001) timeline_.span("wait", wait_start, end - r.seconds);
      timeline_.span("pull", end - r.seconds, end, {{"version", r.version}, {"bytes", r.bytes}});
      if (metrics_ != nullptr) {
        metrics_->write({{"event", "pull"},
                         {"generator", options_.id},
                         {"version", r.version},
                         {"bytes", r.bytes},
                         {"seconds", r.seconds},
                         {"wait_seconds", r.wait_seconds},
                         {"retries", r.retries},
                         {"transport", subscriber_->transport()},
                         {"staged", r.staged},
                         {"wire_dtype", loop::wire_dtype_name(pull_target_->wire_dtype())},
                         {"delta", r.delta},
                         {"signed", r.signature_verified},
                         {"wire_bytes", r.wire_bytes},
                         {"xxh3", loop::weights_digest(model_)},
                         {"time", end}});
      }
      return Pulled{true, r.seconds, r.bytes};
    }
    const weightsync::ErrorCode code = pulled.status().code();
    const bool nothing_newer =
        code == weightsync::ErrorCode::kNotReady || code == weightsync::ErrorCode::kTimeout;
    if (nothing_newer && subscriber_->status().ok()) {
      if (!wait_for_newer && version_ != 0 && buffer_intact_) return Pulled{};
      if (Clock::now() >= deadline) {
        return zorplex::Error{"the trainer published no version after " + std::to_string(version_) + " for " +
                              std::to_string(options_.trainer_timeout.count()) + " s"};
      }
      continue;
    }
    if (subscriber_->status().ok()) {
      return zorplex::Error{"pulling weights failed: " + pulled.status().to_string()};
    }
    // Sticky connection error: reconnect at the top of the loop.
  }
  return Pulled{};
}

void GeneratorLoop::rebase_pacing(std::uint64_t version) {
  pace_base_version_ = version;
  pace_sent_groups_ = 0;
  pace_base_pending_ = false;
}

zorplex::Result<bool> GeneratorLoop::prepare_staged(const std::atomic<bool>& stop) {
  const auto deadline = Clock::now() + options_.trainer_timeout;
  while (!stop.load()) {
    if (!staged_ || !staged_->status().ok()) {
      if (staged_) {
        std::printf("generator %u: lost the trainer (%s); reconnecting, version %llu keeps generating\n",
                    options_.id, staged_->status().message().c_str(),
                    static_cast<unsigned long long>(staged_->version()));
        std::fflush(stdout);
        ++totals_.reconnects;
      }
      auto connected = connect(stop);
      if (!connected) return connected.error();
      if (!connected.value()) return false;
      if (narrow_wire_) return true;  // the round-boundary path takes over
      prometheus_.track_subscriber(nullptr);  // the staged updates own it now
      if (!staged_) {
        auto made = StagedPolicy::create(std::move(subscriber_), model_, options_.id, metrics_, &timeline_);
        if (!made) return made.error();
        staged_ = std::move(made).value();
        prometheus_.track_staged(&staged_->updates());
      } else if (weightsync::Status s = staged_->reconnect(std::move(subscriber_)); !s.ok()) {
        if (s.code() == weightsync::ErrorCode::kInvalidArgument) {
          return zorplex::Error{"the trainer now serves another layout: " + s.message()};
        }
        continue;  // the new connection failed at once: try again
      }
      pace_base_pending_ = true;
    }
    if (staged_->version() != 0) {
      auto installed = staged_->install_if_staged();
      if (!installed) return installed.error();
      if (!pace_base_pending_ || installed.value()) {
        if (pace_base_pending_) rebase_pacing(staged_->version());
        version_ = staged_->version();
        return true;
      }
    }
    // The first version of this generator, or of this connection.
    auto installed = staged_->wait_and_install(std::chrono::milliseconds(500));
    if (!installed) return installed.error();
    if (installed.value()) {
      rebase_pacing(staged_->version());
      version_ = staged_->version();
      return true;
    }
    if (staged_->version() != 0 && staged_->status().ok()) {
      // Reconnected, nothing newer yet: go on with the version installed.
      rebase_pacing(staged_->version());
      return true;
    }
    if (Clock::now() >= deadline) {
      return zorplex::Error{"the trainer published no version for " +
                            std::to_string(options_.trainer_timeout.count()) + " s"};
    }
  }
  return false;
}

std::optional<std::uint64_t> GeneratorLoop::newest_version() {
  if (staged_) {
    if (!staged_->status().ok()) return std::nullopt;
    return staged_->newest_known();
  }
  if (!subscriber_ || !subscriber_->status().ok()) return std::nullopt;
  auto latest = subscriber_->latest_version();
  if (!latest.ok()) return std::nullopt;
  return latest.value();
}

void GeneratorLoop::wait_for_newer(std::uint64_t than) {
  if (staged_) {
    // A round boundary: a staged version may be installed here.
    (void)staged_->wait_and_install(std::chrono::milliseconds(500));
    return;
  }
  (void)subscriber_->wait_for_version(than, std::chrono::milliseconds(500));
}

zorplex::Result<bool> GeneratorLoop::wait_for_allowance(const std::atomic<bool>& stop) {
  const auto deadline = Clock::now() + options_.trainer_timeout;
  const double start = loop::wall_clock_seconds();
  bool waited = false;
  while (!stop.load()) {
    auto latest = newest_version();
    if (!latest) break;  // the pull (or prepare_staged) that follows reconnects
    const std::uint64_t published =
        latest.value() >= pace_base_version_ ? latest.value() - pace_base_version_ : 0;
    const std::uint64_t allowed = (published + static_cast<std::uint64_t>(options_.max_ahead_versions)) *
                                  static_cast<std::uint64_t>(options_.groups_per_version);
    if (pace_sent_groups_ + static_cast<std::uint64_t>(options_.prompts) <= allowed) break;
    if (Clock::now() >= deadline) {
      return zorplex::Error{"the trainer published no version after " + std::to_string(latest.value()) +
                            " for " + std::to_string(options_.trainer_timeout.count()) + " s"};
    }
    // A safety valve: if the trainer publishes nothing for a while it is
    // short of groups the allowance does not foresee (e.g. stale drops).
    if (waited && loop::wall_clock_seconds() - start > kPacingPatience) break;
    waited = true;
    wait_for_newer(latest.value());
  }
  if (waited) timeline_.span("wait", start, loop::wall_clock_seconds(), {{"why", "pacing"}});
  return true;
}

zorplex::Result<bool> GeneratorLoop::send(const algorithms::TrajectoryGroup& group,
                                          const std::atomic<bool>& stop) {
  const auto deadline = Clock::now() + options_.trainer_timeout;
  while (!stop.load()) {
    auto sent = sender_->send(group);
    // A stop signal may interrupt the send (EINTR): that is a stop, not a failure.
    if (!sent && stop.load()) return false;
    if (!sent) return zorplex::Error{"sending trajectories: " + sent.error().message};
    if (sent.value()) return true;
    if (Clock::now() >= deadline) {
      return zorplex::Error{"the trainer at " + options_.trajectory_endpoint + " took no trajectories for " +
                            std::to_string(options_.trainer_timeout.count()) + " s"};
    }
  }
  return false;
}

zorplex::Result<GeneratorTotals> GeneratorLoop::run(const std::atomic<bool>& stop) {
  if (options_.tasks.empty())
    return zorplex::Error{"no task kind to sample (GeneratorOptions::tasks is empty)"};
  // The position is on disk before the first round: --resume always finds a state.
  if (auto saved = save_state(); !saved) return saved.error();
  channel::ChannelOptions channel_options;
  channel_options.secret = options_.secret;
  auto sender = channel::GroupSender::connect(options_.trajectory_endpoint, channel_options);
  if (!sender) return sender.error();
  sender_ = std::move(sender).value();

  const auto run_start = Clock::now();
  for (std::uint64_t rounds_run = 0; !stop.load(); ++rounds_run) {
    if (options_.max_rounds > 0 && rounds_run >= static_cast<std::uint64_t>(options_.max_rounds)) break;
    if (!options_.sync && options_.groups_per_version > 0 && rounds_run > 0) {
      auto allowed = wait_for_allowance(stop);
      if (!allowed) return allowed.error();
    }
    Pulled pulled_now;
    if (staged_mode()) {
      auto ready = prepare_staged(stop);
      if (!ready) return ready.error();
      if (!ready.value()) break;
    }
    if (!staged_) {
      auto pulled = pull_newest(options_.sync || rounds_run == 0, stop);
      if (!pulled) return pulled.error();
      pulled_now = pulled.value();
    }
    if (stop.load()) break;
    const std::uint64_t round = next_round_++;

    // The round: one batch of --prompts prompts, and with the dynamic filter
    // further batches until --prompts groups carry a signal or the
    // over-sampling cap is reached (algorithms/dynamic_filter.h).
    RoundTally tally;
    tally.version = version_;
    algorithms::DynamicFilterOptions filter;
    filter.enabled = options_.dynamic_filter;
    filter.prompts = options_.prompts;
    filter.oversample_cap = options_.oversample_cap;
    auto filled = algorithms::fill_round(filter, [&](int prompts) {
      return sample_batch(prompts, round, tally, stop);
    });
    if (!filled) return filled.error();
    algorithms::FilledRound& usable = filled.value();
    algorithms::stamp_round(usable);

    std::uint64_t latest = std::max(version_, newest_version().value_or(version_));
    for (std::size_t p = 0; p < usable.groups.size(); ++p) {
      algorithms::TrajectoryGroup& group = usable.groups[p];
      group.version_end = std::max(latest, version_);
      group.generator = options_.id;
      group.sequence = next_sequence_ + p;
      if (p == 0 && pulled_now.pulled) {
        group.pull_seconds = pulled_now.seconds;
        group.pull_bytes = pulled_now.bytes;
      }
    }
    const double send_start = loop::wall_clock_seconds();
    std::size_t sent_groups = 0;
    for (const algorithms::TrajectoryGroup& group : usable.groups) {
      if (stop.load()) break;
      auto sent = send(group, stop);
      if (!sent) return sent.error();
      if (!sent.value()) break;
      ++sent_groups;
      ++totals_.groups_sent;
      // Pacing counts sent groups: the trainer's batch is the groups it gets
      // (with the filter on, those with a signal; off, every group).
      ++pace_sent_groups_;
    }
    // Sequences stay unique: an unsent group's number is not reused.
    next_sequence_ += usable.groups.size();
    const double send_end = loop::wall_clock_seconds();
    if (send_end - send_start > 0.01) timeline_.span("send", send_start, send_end);
    if (transcripts_ != nullptr) {
      // Every trajectory sampled: the groups sent, then the ones filtered.
      auto write = [&](const algorithms::TrajectoryGroup& group, bool sent) {
        rollout::TranscriptContext context;
        context.generator = options_.id;
        context.round = round;
        context.group_sequence = group.sequence;
        context.task_seed = group.task_seed;
        context.data_epoch = tally.data_epochs[group.task_seed];
        context.task_index = group.task_index;
        context.temperature = group.temperature;
        context.sent = sent;
        // Pulled between rounds, every token has the round's version.
        if (!staged_) context.version = tally.version;
        for (std::size_t g = 0; g < group.trajectories.size(); ++g) {
          context.index_in_group = g;
          transcripts_->add(rollout::transcript_line(context, group.trajectories[g]));
        }
      };
      for (std::size_t p = 0; p < usable.groups.size(); ++p) write(usable.groups[p], p < sent_groups);
      for (const algorithms::TrajectoryGroup& group : usable.filtered) write(group, false);
      transcripts_->flush();
    }
    if (auto saved = save_state(); !saved) return saved.error();
    ++totals_.rounds;
    if (staged_) totals_.pulls = staged_->stats().installs;
    totals_.trajectories += tally.trajectories;
    totals_.tokens += tally.tokens;
    const double n = static_cast<double>(std::max<std::uint64_t>(tally.trajectories, 1));
    if (metrics_ != nullptr) {
      metrics_->write({{"event", "round"},
                       {"generator", options_.id},
                       {"round", round},
                       {"version", tally.version},
                       {"version_after", version_},
                       {"trajectories", tally.trajectories},
                       {"operators", tally.operators},
                       {"carries_in", tally.carries},
                       {"task_seeds", round_task_seeds(tally.tasks)},
                       {"data_epoch", tally.tasks.empty() ? 0 : tally.tasks.front().data_epoch},
                       {"tokens", tally.tokens},
                       {"generation_seconds", tally.generation_seconds},
                       {"tokens_per_second", tally.tokens / std::max(tally.generation_seconds, 1e-9)},
                       {"reward_mean", tally.reward_sum / n},
                       {"correct_rate", tally.correct / n},
                       {"dynamic_filter", options_.dynamic_filter},
                       {"prompts_sampled", usable.prompts_sampled},
                       {"batches", usable.batches},
                       {"groups_filtered", usable.groups_filtered},
                       {"trajectories_filtered", usable.trajectories_filtered},
                       {"groups_sent", sent_groups},
                       {"cap_hit", usable.cap_hit},
                       {"send_seconds", send_end - send_start},
                       {"time", send_end}});
    }
    std::printf(
        "generator %u: round %llu  version %llu  %llu episodes  reward %.3f  correct %.2f  %.0f tok/s  "
        "prompts %llu  filtered %llu  sent %zu%s  elapsed %.0fs\n",
        options_.id, static_cast<unsigned long long>(round), static_cast<unsigned long long>(version_),
        static_cast<unsigned long long>(tally.trajectories), tally.reward_sum / n, tally.correct / n,
        tally.tokens / std::max(tally.generation_seconds, 1e-9),
        static_cast<unsigned long long>(usable.prompts_sampled),
        static_cast<unsigned long long>(usable.groups_filtered), sent_groups,
        usable.cap_hit ? " (over-sampling cap hit: fewer groups than --prompts)" : "", seconds_since(run_start));
    std::fflush(stdout);
  }
  return totals_;
}

zorplex::Result<std::vector<algorithms::TrajectoryGroup>> GeneratorLoop::sample_batch(
    int prompts, std::uint64_t round, RoundTally& tally, const std::atomic<bool>& stop) {
  std::vector<algorithms::TrajectoryGroup> groups;
  if (stop.load()) return groups;  // stopped: the round ends with what it has
  const std::uint64_t batch = tally.batches++;
  // Tasks from this generator's own stream; the TaskGenerators own the
  // toolboxes the requests borrow, so they live until the rollouts end.
  std::vector<zorplex::TaskGenerator> sources;
  sources.reserve(static_cast<std::size_t>(prompts));
  std::vector<TaskInStream> task_seeds;
  std::vector<rollout::RolloutRequest> requests;
  for (int p = 0; p < prompts; ++p) {
    const rollout::TaskMix& kind = options_.tasks[next_task_ % options_.tasks.size()];
    const TaskInStream task = task_in_stream(options_.task_seed_base, options_.id, next_task_++);
    task_seeds.push_back(task);
    tally.tasks.push_back(task);
    tally.data_epochs[task.seed] = task.data_epoch;
    sources.emplace_back(kind.kind, kind.difficulty, static_cast<std::int64_t>(task.seed));
  }
  std::vector<std::uint64_t> task_indices;
  for (int p = 0; p < prompts; ++p) {
    zorplex::TaskGenerator& source = sources[static_cast<std::size_t>(p)];
    zorplex::Task task = source.next();
    std::uint64_t index = 0;
    int carries = rollout::carries_in(task, source.tools());
    for (int c = 1; c < options_.carry_candidates; ++c) {
      zorplex::Task candidate = source.next();
      const int candidate_carries = rollout::carries_in(candidate, source.tools());
      if (candidate_carries > carries) {
        task = std::move(candidate);
        carries = candidate_carries;
        index = static_cast<std::uint64_t>(c);
      }
    }
    task_indices.push_back(index);
    tally.operators += task.op != 0 ? task.op : '.';
    tally.carries += carries;
    for (int g = 0; g < options_.group_size; ++g) requests.push_back({task, &source.tools()});
  }
  rollout::RolloutOptions rollout_options;
  rollout_options.format = format_;
  rollout_options.sampling.temperature = options_.temperature;
  // The first batch of a round keeps the seed it had before over-sampling;
  // further batches of the round get seeds of their own.
  rollout_options.sampling.seed = options_.sampling_seed * 1000003u + std::uint64_t{options_.id} * 7919u + round +
                                  batch * 0x9E3779B97F4A7C15ull;
  // In-flight mode: new weights are installed at token boundaries.
  if (staged_) rollout_options.step_hook = staged_->hook();
  const std::uint64_t batch_version = version_;
  rollout::RolloutStats stats;
  const double generate_start = loop::wall_clock_seconds();
  const auto generate_clock = Clock::now();
  auto trajectories =
      rollout::run_rollouts(staged_ ? staged_->model() : model_, requests, rollout_options, &stats);
  if (!trajectories) return zorplex::Error{"rollouts failed: " + trajectories.error().message};
  const double generation_seconds = seconds_since(generate_clock);
  if (staged_) version_ = staged_->version();
  timeline_.span(
      "generate", generate_start, loop::wall_clock_seconds(),
      {{"version", batch_version}, {"version_after", version_}, {"trajectories", requests.size()}});
  tally.trajectories += requests.size();
  tally.tokens += stats.generated_tokens;
  tally.generation_seconds += generation_seconds;
  for (const rollout::Trajectory& t : trajectories.value()) {
    tally.reward_sum += t.score.reward;
    tally.correct += t.score.correct ? 1 : 0;
  }
  for (int p = 0; p < prompts; ++p) {
    algorithms::TrajectoryGroup group;
    for (int g = 0; g < options_.group_size; ++g) {
      group.trajectories.push_back(
          std::move(trajectories.value()[static_cast<std::size_t>(p * options_.group_size + g)]));
    }
    // Staleness counts a trajectory by its oldest token (in-flight mode:
    // tokens after an install carry the newer version).
    std::uint64_t oldest = version_;
    for (const rollout::Trajectory& t : group.trajectories) {
      if (t.generated_tokens() == 0) continue;  // no token, no version
      oldest = std::min(oldest, staged_ ? t.oldest_version() : batch_version);
    }
    group.version_start = oldest;
    group.task_seed = task_seeds[static_cast<std::size_t>(p)].seed;
    group.task_index = task_indices[static_cast<std::size_t>(p)];
    group.generation_seconds = generation_seconds / prompts;
    group.temperature = rollout_options.sampling.temperature;
    group.top_p = rollout_options.sampling.top_p;
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace generator
