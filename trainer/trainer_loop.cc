#include "trainer/trainer_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "algorithms/dynamic_filter.h"
#include "channel/group_channel.h"
#include "loop/device.h"
#include "loop/policy_weights.h"
#include "rollout/eval_summary.h"
#include "rollout/evaluation.h"
#include "weightsync/fp8.h"
#include "weightsync/narrow.h"
#include "weightsync/publisher.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kPi = 3.14159265358979323846;

// The learning rate of step `step` (0-based) of `steps`.
double scheduled_lr(const TrainerOptions& options, int step) {
  if (options.lr_schedule != "cosine" || options.steps <= 1) return options.update.lr;
  const double progress = static_cast<double>(step) / static_cast<double>(options.steps - 1);
  const double cosine = 0.5 * (1.0 + std::cos(kPi * std::min(progress, 1.0)));
  return options.update.lr * (options.min_lr_ratio + (1.0 - options.min_lr_ratio) * cosine);
}

double steady_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace

TrainerLoop::TrainerLoop(TrainerOptions options, policy::Transformer model, policy::Metadata carried)
    : options_(std::move(options)),
      model_(std::move(model)),
      carried_(std::move(carried)),
      updater_(model_, options_.update),
      buffer_(options_.replay, static_cast<std::uint64_t>(model_.config().max_seq_len)),
      live_generators_(options_.generators),
      sampling_(options_.expected_temperature) {
  options_.batcher.max_seq_len = buffer_.max_seq_len();
  for (const auto& [environment, fraction] : options_.batcher.fractions) buffer_.declare(environment);
  if (options_.synthetic.groups > 0) {
    synthetic_ = std::make_unique<SyntheticGroups>(options_.synthetic, model_.config().vocab_size,
                                                   model_.config().max_seq_len);
  }
}

TrainerLoop::~TrainerLoop() = default;

void TrainerLoop::set_reference(policy::Transformer reference) {
  reference_.emplace(std::move(reference));
  updater_.set_reference(&*reference_);
}

zorplex::Result<bool> TrainerLoop::resume(const std::string& dir, const loop::RlProgress& progress) {
  auto restored = loop::restore_rl_optimizer(dir, updater_, progress);
  if (!restored) return restored.error();
  version_ = progress.version;
  step_ = progress.step;
  return true;
}

zorplex::Result<bool> TrainerLoop::start() {
  std::error_code ec;
  std::filesystem::create_directories(options_.out_dir, ec);
  if (ec) return zorplex::Error{"cannot create " + options_.out_dir + ": " + ec.message()};
  const bool append = step_ > 0;
  auto metrics = loop::JsonlFile::open(options_.out_dir + "/trainer.jsonl", append);
  if (!metrics) return metrics.error();
  metrics_ = std::move(metrics).value();
  auto timeline = loop::JsonlFile::open(options_.out_dir + "/timeline-trainer.jsonl", append);
  if (!timeline) return timeline.error();
  timeline_file_ = std::move(timeline).value();
  timeline_ = loop::Timeline(timeline_file_.get(), "trainer");

  if (options_.eval_every > 0) {
    auto format = loop::prompt_format_of(carried_);
    if (!format) return zorplex::Error{"periodic evaluation needs the policy's prompt format: " + format.error().message};
    eval_format_ = format.value();
  }

  auto layout = loop::policy_weight_layout(model_.config());
  if (!layout) return layout.error();
  if (options_.wire_dtype == weightsync::DType::kFloat32) {
    auto publisher = weightsync::Publisher::create(std::move(layout).value(), options_.publisher);
    if (!publisher.ok())
      return zorplex::Error{"cannot start the weight publisher: " + publisher.status().message()};
    publisher_ = std::move(publisher).value();
  } else {
    const char* wire = loop::wire_dtype_name(options_.wire_dtype);
    if (model_.device().is_cuda())
      return zorplex::Error{
          std::string("--wire-dtype ") + wire +
          " needs a host-resident policy (--device cpu): the conversion runs on the host, "
          "and the device publish path sends float32 (use --wire-dtype fp32 with --device cuda)"};
    if (options_.wire_dtype == weightsync::DType::kFloat8E4M3) {
      auto fp8 = weightsync::Fp8Publisher::create(layout.value(), {}, options_.publisher);
      if (!fp8.ok()) return zorplex::Error{"cannot start the fp8 weight publisher: " + fp8.status().message()};
      fp8_ = std::move(fp8).value();
    } else {
      auto narrowing =
          weightsync::NarrowingPublisher::create(layout.value(), options_.wire_dtype, options_.publisher);
      if (!narrowing.ok())
        return zorplex::Error{std::string("cannot start the ") + wire +
                              " weight publisher: " + narrowing.status().message()};
      narrowing_ = std::move(narrowing).value();
    }
  }
  weights_address_ = weights_publisher().address();

  channel::ChannelOptions channel_options;
  channel_options.secret = options_.secret;
  auto receiver = channel::GroupReceiver::bind(options_.trajectory_endpoint, channel_options);
  if (!receiver) return zorplex::Error{"cannot bind the trajectory endpoint: " + receiver.error().message};
  receiver_ = std::move(receiver).value();
  trajectory_endpoint_ = receiver_->endpoint();

  auto published = publish();
  if (!published) return published.error();
  return write_address_file();
}

zorplex::Result<bool> TrainerLoop::write_address_file() const {
  if (options_.address_file.empty()) return true;
  const nlohmann::json address{
      {"weights", weights_address_}, {"trajectories", trajectory_endpoint_}, {"version", version_}};
  const std::string temporary = options_.address_file + ".tmp";
  {
    std::ofstream out(temporary);
    out << address.dump() << "\n";
    if (!out) return zorplex::Error{"cannot write " + temporary};
  }
  std::error_code ec;
  std::filesystem::rename(temporary, options_.address_file, ec);
  if (ec) return zorplex::Error{"cannot write " + options_.address_file + ": " + ec.message()};
  return true;
}

weightsync::Publisher& TrainerLoop::weights_publisher() {
  if (fp8_) return fp8_->publisher();
  return narrowing_ ? narrowing_->publisher() : *publisher_;
}

zorplex::Result<bool> TrainerLoop::publish() {
  if (narrowing_ || fp8_) return publish_narrow();
  return model_.device().is_cuda() ? publish_device() : publish_host();
}

zorplex::Result<bool> TrainerLoop::publish_narrow() {
  const double start = loop::wall_clock_seconds();
  auto handed = fp8_ ? loop::publish_policy_narrow(*fp8_, version_, model_)
                     : loop::publish_policy_narrow(*narrowing_, version_, model_);
  if (!handed) return handed.error();
  const double end = loop::wall_clock_seconds();
  const weightsync::NarrowingStats converter = fp8_ ? fp8_->stats() : narrowing_->stats();
  timeline_.span("publish", start, end,
                 {{"version", version_}, {"wire_dtype", loop::wire_dtype_name(options_.wire_dtype)}});
  metrics_->write({{"event", "publish"},
                   {"version", version_},
                   {"bytes", weights_publisher().layout().payload_bytes()},
                   {"seconds", end - start},
                   {"xxh3", loop::weights_digest(model_)},
                   {"time", end},
                   {"wire_dtype", loop::wire_dtype_name(options_.wire_dtype)},
                   {"handoff_seconds", handed.value().copy_seconds},
                   {"replaced_version", handed.value().replaced_version},
                   {"versions_converted", converter.versions_converted},
                   {"versions_skipped", converter.versions_skipped},
                   {"last_conversion_seconds", converter.last_conversion_seconds},
                   {"conversion_seconds", converter.conversion_seconds}});
  return true;
}

zorplex::Result<bool> TrainerLoop::publish_host() {
  const double start = loop::wall_clock_seconds();
  auto published = loop::publish_policy(*publisher_, version_, model_);
  if (!published) return published.error();
  const double end = loop::wall_clock_seconds();
  timeline_.span("publish", start, end, {{"version", version_}});
  metrics_->write({{"event", "publish"},
                   {"version", version_},
                   {"bytes", publisher_->layout().payload_bytes()},
                   {"seconds", end - start},
                   {"xxh3", loop::weights_digest(model_)},
                   {"time", end}});
  return true;
}

zorplex::Result<bool> TrainerLoop::publish_device() {
  auto flushed = flush_publish();  // the library would wait for it anyway
  if (!flushed) return flushed.error();
  const double start = loop::wall_clock_seconds();
  auto enqueued =
      loop::publish_policy_from_device(*publisher_, version_, model_, loop::publish_stream(model_.device()));
  if (!enqueued) return enqueued.error();
  const double end = loop::wall_clock_seconds();
  timeline_.span("publish", start, end, {{"version", version_}, {"device", true}});
  pending_publish_ =
      PendingPublish{version_, loop::weights_digest(model_), enqueued.value().enqueue_seconds, end};
  return true;
}

zorplex::Result<bool> TrainerLoop::flush_publish() {
  if (!pending_publish_) return true;
  const PendingPublish pending = *pending_publish_;
  pending_publish_.reset();
  auto committed = publisher_->flush_device_publishes();
  if (!committed.ok())
    return zorplex::Error{"publishing version " + std::to_string(pending.version) +
                          " from the device: " + committed.status().message()};
  const weightsync::PublishResult& r = committed.value();
  metrics_->write({{"event", "publish"},
                   {"version", pending.version},
                   {"bytes", publisher_->layout().payload_bytes()},
                   {"seconds", r.copy_seconds},
                   {"xxh3", pending.digest},
                   {"time", pending.time},
                   {"device", "cuda"},
                   {"enqueue_seconds", pending.enqueue_seconds},
                   {"commit_copy_seconds", r.copy_seconds}});
  return true;
}

zorplex::Result<bool> TrainerLoop::checkpoint() {
  const double start = loop::wall_clock_seconds();
  auto saved = loop::save_rl_checkpoint(options_.out_dir, model_, updater_, {version_, step_},
                                        options_.options_json, carried_);
  if (!saved) return zorplex::Error{"checkpoint: " + saved.error().message};
  timeline_.span("checkpoint", start, loop::wall_clock_seconds(), {{"version", version_}});
  return true;
}

zorplex::Result<bool> TrainerLoop::evaluate_held_out() {
  for (const zorplex::Difficulty difficulty : options_.eval_difficulties) {
    rollout::EvalOptions eval;  // greedy, held-out seed 42
    eval.difficulty = difficulty;
    eval.count = options_.eval_tasks;
    eval.batch_size = std::min(options_.eval_tasks, 64);  // larger batches: about 20% faster than 16 on a CPU
    eval.rollout.format = eval_format_;
    const char* name = zorplex::difficulty_name(difficulty);
    const double start = loop::wall_clock_seconds();
    auto result = rollout::evaluate(model_, eval);
    if (!result) {
      return zorplex::Error{"held-out evaluation (" + std::string(name) + ") at step " + std::to_string(step_) +
                            ": " + result.error().message};
    }
    const double end = loop::wall_clock_seconds();
    const rollout::EvalSummary& summary = result.value().summary;
    timeline_.span("eval", start, end, {{"version", version_}, {"tasks", summary.tasks}, {"difficulty", name}});
    metrics_->write({{"event", "eval"},
                     {"step", step_},
                     {"version", version_},
                     {"difficulty", name},
                     {"tasks", summary.tasks},
                     {"correct", summary.correct},
                     {"accuracy", summary.accuracy},
                     {"seconds", end - start},
                     {"time", end}});
    std::printf("trainer: eval at step %d (version %llu): %.1f%% of %d held-out %s tasks (greedy, %.1f s)\n", step_,
                static_cast<unsigned long long>(version_), 100.0 * summary.accuracy, summary.tasks, name,
                end - start);
    std::fflush(stdout);
  }
  return true;
}

TrainerLoop::Arrival TrainerLoop::receive_one(bool sync) {
  auto message = receiver_->receive(std::chrono::milliseconds(200));
  if (!message) {
    rejection_log_.flush();
    return {};
  }
  if (!*message) {
    ++rejected_messages_;
    rejection_log_.note(message->error().message);
    return {};
  }
  algorithms::TrajectoryGroup group = std::move(*message).value();
  last_arrival_ = steady_seconds();
  if (group.pull_bytes > 0) {
    pulls_.push_back({{"generator", group.generator},
                      {"version", group.version_start},
                      {"seconds", group.pull_seconds},
                      {"bytes", group.pull_bytes}});
  }
  // Sampled with a version this trainer never published (from before a
  // restart), or in sync mode with any version but the current one.
  if (group.version_start > version_ || (sync && group.version_start != version_)) {
    ++dropped_off_version_;
    return {};
  }
  // Sampled at another temperature: its log-probs do not match the ones
  // this trainer recomputes. Refused, and its generator told once why.
  if (auto agreed = sampling_.accept(group); !agreed) {
    if (told_about_sampling_.insert(group.generator).second) {
      std::fprintf(stderr, "trainer: refusing trajectories: %s\n", agreed.error().message.c_str());
    }
    return {};
  }
  // Filtered at the source while this trainer trains on zero-variance
  // groups: a biased stream. Refused, and its generator told once why.
  if (auto unfiltered = algorithms::accept_filtered(group, !options_.replay.drop_zero_variance); !unfiltered) {
    ++refused_filtered_;
    if (told_about_filter_.insert(group.generator).second) {
      std::fprintf(stderr, "trainer: refusing trajectories: %s\n", unfiltered.error().message.c_str());
    }
    return {};
  }
  const Arrival arrival{true, group.generator, group.round_groups};
  arrived_.add(group);
  buffer_.add(std::move(group));
  return arrival;
}

zorplex::Result<std::vector<algorithms::TrajectoryGroup>> TrainerLoop::collect_round(
    const std::atomic<bool>& stop) {
  const double round_start = steady_seconds();
  double first_arrival = 0.0;
  std::set<std::uint32_t> delivered;
  // Per generator: groups of this round delivered, and how many its round sends.
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> progress;
  std::uint64_t round_groups = 0;
  while (!stop.load()) {
    int complete = 0;
    for (const auto& [generator, counts] : progress) complete += counts.first >= counts.second ? 1 : 0;
    if (complete >= std::max(live_generators_, 1)) break;
    const double now = steady_seconds();
    // Generators of one round run in parallel: one that has not delivered
    // well after the first is gone or stuck.
    if (round_groups > 0 &&
        now > first_arrival + std::max(options_.round_timeout_s, first_arrival - round_start)) {
      std::printf(
          "trainer: %zu of %d generators delivered version %llu's round in time; training on %llu groups\n",
          delivered.size(), live_generators_, static_cast<unsigned long long>(version_),
          static_cast<unsigned long long>(round_groups));
      std::fflush(stdout);
      live_generators_ = static_cast<int>(delivered.size());
      break;
    }
    if (round_groups == 0 && now - round_start > options_.idle_timeout_s) {
      return zorplex::Error{"no trajectories of version " + std::to_string(version_) + " for " +
                            std::to_string(static_cast<int>(options_.idle_timeout_s)) +
                            " s: are the generators running (scripts/rl-run.sh starts them)?"};
    }
    const Arrival arrival = receive_one(true);
    if (!arrival.group) continue;
    if (round_groups == 0) first_arrival = steady_seconds();
    ++round_groups;
    delivered.insert(arrival.generator);
    auto& counts = progress[arrival.generator];
    ++counts.first;
    counts.second = arrival.round_groups;
    // A generator that was left out (or restarted) is counted back in.
    live_generators_ = std::max(live_generators_, static_cast<int>(delivered.size()));
  }
  if (options_.batcher.token_budget > 0) {  // the budget caps what of the round is trained on
    return take_plan(algorithms::plan_batch(buffer_.supply(version_), options_.batcher));
  }
  return buffer_.take(std::numeric_limits<std::size_t>::max(), version_);
}

zorplex::Result<std::vector<algorithms::TrajectoryGroup>> TrainerLoop::collect_batch(
    const std::atomic<bool>& stop) {
  std::vector<algorithms::TrajectoryGroup> batch;
  last_arrival_ = std::max(last_arrival_, steady_seconds() - 1.0);
  // A batch is the next batch_groups groups sampled, those without a
  // learning signal consumed too (ReplayBuffer::take): as many sampled
  // trajectories per step as a sync round of batch_groups prompts.
  const std::size_t want = static_cast<std::size_t>(options_.batch_groups);
  const algorithms::ReplayCounters& counters = buffer_.counters();
  std::size_t consumed = 0;
  while (!stop.load()) {
    const std::uint64_t before = counters.groups_consumed;
    for (algorithms::TrajectoryGroup& g : buffer_.take(want - consumed, version_)) batch.push_back(std::move(g));
    consumed += static_cast<std::size_t>(counters.groups_consumed - before);
    if (consumed >= want) break;
    if (steady_seconds() - last_arrival_ > options_.idle_timeout_s) {
      return zorplex::Error{"no trajectories for " +
                            std::to_string(static_cast<int>(options_.idle_timeout_s)) +
                            " s: are the generators running (scripts/rl-run.sh starts them)?"};
    }
    (void)receive_one(false);
  }
  return batch;
}

}  // namespace trainer

namespace trainer {

zorplex::Result<bool> TrainerLoop::wait_for_readers(const std::atomic<bool>& stop) {
  const std::uint64_t want = static_cast<std::uint64_t>(options_.synthetic.wait_readers);
  const double start = steady_seconds();
  std::printf("trainer: waiting for %llu readers to pull version %llu\n", static_cast<unsigned long long>(want),
              static_cast<unsigned long long>(version_));
  std::fflush(stdout);
  while (!stop.load()) {
    const std::uint64_t granted = weights_publisher().stats().leases_granted;
    if (granted >= want) return true;
    if (steady_seconds() - start > options_.idle_timeout_s) {
      return zorplex::Error{"only " + std::to_string(granted) + " of " + std::to_string(want) +
                            " readers pulled version " + std::to_string(version_) + " within " +
                            std::to_string(static_cast<int>(options_.idle_timeout_s)) +
                            " s (--synthetic-wait-readers): are they pointed at " + weights_address_ + "?"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

zorplex::Result<TrainerSummary> TrainerLoop::run(const std::atomic<bool>& stop) {
  TrainerSummary summary;
  if (synthetic_ && options_.synthetic.wait_readers > 0) {
    auto readers = wait_for_readers(stop);
    if (!readers) return readers.error();
  }
  const double run_start = steady_seconds();
  while (step_ < options_.steps && !stop.load()) {
    const double step_start = steady_seconds();
    const double wait_start = loop::wall_clock_seconds();
    using Groups = zorplex::Result<std::vector<algorithms::TrajectoryGroup>>;
    auto collected = synthetic_                           ? Groups(synthetic_->next(version_))
                     : options_.sync                      ? collect_round(stop)
                     : options_.batcher.token_budget > 0 ? collect_budget(stop)
                                                         : collect_batch(stop);
    if (!collected) {
      (void)checkpoint();
      return collected.error();
    }
    if (stop.load()) break;
    std::vector<algorithms::TrajectoryGroup> groups = std::move(collected).value();
    // Marin's metrics per environment, when the batch is made.
    const std::map<std::string, algorithms::EnvironmentMetrics> environments =
        buffer_.step_metrics(groups, version_, spilled_);
    spilled_.clear();
    // Sampled for this step: the groups it consumed, and what their
    // generators filtered before sending them (algorithms/dynamic_filter.h).
    const std::uint64_t filtered = buffer_.counters().trajectories_filtered_at_source - filtered_before_;
    const std::uint64_t filtered_groups = buffer_.counters().groups_filtered_at_source - filtered_groups_before_;
    std::uint64_t sampled = buffer_.counters().trajectories_consumed - consumed_before_ + filtered;
    if (synthetic_) {  // made up here, never in the buffer
      for (const algorithms::TrajectoryGroup& g : groups) sampled += g.trajectories.size();
    }
    consumed_before_ = buffer_.counters().trajectories_consumed;
    filtered_before_ = buffer_.counters().trajectories_filtered_at_source;
    filtered_groups_before_ = buffer_.counters().groups_filtered_at_source;
    const double train_start = loop::wall_clock_seconds();
    timeline_.span("wait", wait_start, train_start, {{"version", version_}});

    std::vector<rollout::Trajectory> used;
    double staleness_sum = 0.0;
    std::uint64_t staleness_max = 0;
    for (const algorithms::TrajectoryGroup& g : groups) {
      const std::uint64_t staleness = version_ - g.version_start;
      staleness_max = std::max(staleness_max, staleness);
      staleness_sum += static_cast<double>(staleness * g.trajectories.size());
      used.insert(used.end(), g.trajectories.begin(), g.trajectories.end());
    }
    training::RlUpdateReport report;
    report.applied = false;
    const double lr = scheduled_lr(options_, step_);
    updater_.set_lr(lr);
    // The previous version's device copy must have read the parameters
    // before the update writes them: the update's stream waits for it on the
    // GPU (the host never blocks). Its metrics line is written at the next
    // publish (flush_publish).
    if (pending_publish_) {
      const weightsync::Status ordered =
          publisher_->order_after_device_publish(loop::publish_stream(model_.device()));
      if (!ordered.ok())
        return zorplex::Error{"ordering the update after the device publish: " + ordered.message()};
    }
    if (!groups.empty()) {
      auto updated = updater_.update(groups);
      if (!updated) {
        (void)checkpoint();
        return zorplex::Error{"policy update at step " + std::to_string(step_ + 1) + ": " +
                              updated.error().message};
      }
      report = updated.value();
    } else {
      std::printf(
          "trainer: no usable group for version %llu (all zero-variance or below --min-group-size); "
          "publishing it unchanged\n",
          static_cast<unsigned long long>(version_));
    }
    const double train_end = loop::wall_clock_seconds();
    timeline_.span("train", train_start, train_end, {{"version", version_}, {"trajectories", used.size()}});
    const std::uint64_t trained_version = version_;
    ++version_;
    ++step_;
    auto published = publish();
    if (!published) return published.error();
    const double publish_end = loop::wall_clock_seconds();

    const double step_seconds = steady_seconds() - step_start;
    trajectories_trained_ += used.size();
    const rollout::EvalSummary outcome = rollout::summarize(used, 0, 0.0);
    const algorithms::ReplayCounters& counters = buffer_.counters();
    const double n = std::max<double>(1.0, static_cast<double>(used.size()));
    metrics_->write({{"event", "step"},
                     {"step", step_},
                     {"version", version_},
                     {"trained_on_version", trained_version},
                     {"mode", options_.sync ? "sync" : "async"},
                     {"algorithm", options_.algorithm},
                     {"applied", report.applied},
                     {"lr", lr},
                     {"loss", report.loss},
                     {"grad_norm", report.grad_norm},
                     {"groups", groups.size()},
                     {"trajectories", used.size()},
                     {"trajectories_sampled", sampled},
                     {"trajectories_filtered", filtered},
                     {"groups_filtered", filtered_groups},
                     {"trajectories_trained", used.size()},
                     {"tokens", report.tokens},
                     {"uncredited_tokens", report.uncredited_tokens},
                     {"real_tokens", report.real_tokens},
                     {"padded_tokens", report.padded_tokens},
                     {"reward_mean", report.reward_mean},
                     {"reward_std", report.reward_std},
                     {"correct_rate", report.correct_rate},
                     {"correct_rate_before_filter", arrived_.correct_rate()},
                     {"reward_mean_before_filter", arrived_.reward_mean()},
                     {"trajectories_arrived", arrived_.trajectories()},
                     {"format_rate", report.format_rate},
                     {"failure_modes", outcome.failure_modes},
                     {"clipped_fraction", report.clipped_fraction},
                     {"minibatches", report.minibatches},
                     {"mean_ratio", report.mean_ratio},
                     {"mean_behaviour_weight", report.mean_behaviour_weight},
                     {"kl", report.kl},
                     {"temperature", report.temperature},
                     {"staleness_mean", staleness_sum / n},
                     {"staleness_max", staleness_max},
                     {"dropped",
                      {{"zero_variance_groups", counters.groups_dropped_zero_variance},
                       {"undersized_groups", counters.groups_dropped_undersized},
                       {"undersized_trajectories", counters.trajectories_dropped_undersized},
                       {"stale_groups", counters.groups_dropped_stale},
                       {"overflow_groups", counters.groups_dropped_overflow},
                       {"off_version_groups", dropped_off_version_},
                       {"sampling_mismatch_groups", sampling_.refused()},
                       {"filtered_refused_groups", refused_filtered_},
                       {"rejected_messages", rejected_messages_}}},
                     {"groups_received",
                      counters.groups_received + dropped_off_version_ + sampling_.refused() + refused_filtered_},
                     {"trajectories_per_second", static_cast<double>(used.size()) / step_seconds},
                     {"tokens_per_second", static_cast<double>(report.tokens) / step_seconds},
                     {"wait_seconds", train_start - wait_start},
                     {"train_seconds", train_end - train_start},
                     {"publish_seconds", publish_end - train_end},
                     {"step_seconds", step_seconds},
                     {"pulls", pulls_},
                     {"live_generators", live_generators_},
                     {"token_budget", options_.batcher.token_budget},
                     {"environments", environments_json(environments)},
                     {"time", publish_end}});
    pulls_.clear();
    std::printf(
        "trainer: step %3d/%d  version %llu  groups %zu  sampled %llu filtered %llu trained %zu  reward %.3f  "
        "correct %.2f (all %.2f)  loss %+.4f  staleness %.1f/%llu  wait %.1fs train %.1fs  elapsed %.0fs"
        "%s\n",
        step_, options_.steps, static_cast<unsigned long long>(version_), groups.size(),
        static_cast<unsigned long long>(sampled), static_cast<unsigned long long>(filtered), used.size(),
        report.reward_mean, report.correct_rate, arrived_.correct_rate(), report.loss, staleness_sum / n,
        static_cast<unsigned long long>(staleness_max), train_start - wait_start, train_end - train_start,
        steady_seconds() - run_start, environments_console(environments).c_str());
    std::fflush(stdout);
    arrived_.reset();
    if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0 && step_ < options_.steps) {
      auto saved = checkpoint();
      if (!saved) return saved.error();
    }
    if (options_.eval_every > 0 && (step_ % options_.eval_every == 0 || step_ == options_.steps)) {
      auto evaluated = evaluate_held_out();
      if (!evaluated) return evaluated.error();
    }
  }
  auto flushed = flush_publish();
  if (!flushed) return flushed.error();
  if (narrowing_ || fp8_) {
    auto converted = fp8_ ? fp8_->flush() : narrowing_->flush();
    if (!converted.ok())
      return zorplex::Error{"publishing version " + std::to_string(version_) + " in " +
                            loop::wire_dtype_name(options_.wire_dtype) + ": " + converted.status().message()};
    const weightsync::NarrowingStats converter = fp8_ ? fp8_->stats() : narrowing_->stats();
    std::printf(
        "trainer: %s on the wire: %llu versions converted off this thread (%.1f ms each on average), "
        "%llu skipped\n",
        loop::wire_dtype_name(options_.wire_dtype),
        static_cast<unsigned long long>(converter.versions_converted),
        converter.versions_converted > 0
            ? 1000.0 * converter.conversion_seconds / static_cast<double>(converter.versions_converted)
            : 0.0,
        static_cast<unsigned long long>(converter.versions_skipped));
  }
  auto saved = checkpoint();
  if (!saved) return saved.error();
  summary.steps = step_;
  summary.version = version_;
  summary.trajectories_trained = trajectories_trained_;
  summary.trajectories_filtered = buffer_.counters().trajectories_filtered_at_source;
  summary.trajectories_sampled = synthetic_ ? trajectories_trained_
                                            : buffer_.counters().trajectories_consumed + summary.trajectories_filtered;
  summary.trajectories_received = buffer_.counters().trajectories_received;
  summary.wall_seconds = steady_seconds() - run_start;
  summary.stopped = stop.load();
  return summary;
}

}  // namespace trainer
