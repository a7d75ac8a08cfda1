// StagedUpdates: the background pull into the staging area and the install
// that makes it live (weightsync/staged_updates.h, staged_updates_impl.h).
#include "staged/staged_updates_impl.h"

#include <string>
#include <utility>

#include "common/log.h"

namespace weightsync {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A pull that found no version to take (nothing newer yet): nothing was
// written, and the subscriber is as it was.
bool nothing_new(const Status& s) {
  return s.code() == ErrorCode::kNotReady;
}

}  // namespace

const char* to_string(InstallMode mode) noexcept {
  switch (mode) {
    case InstallMode::kSwap: return "swap";
    case InstallMode::kCopy: return "copy";
  }
  return "unknown";
}

// ---- the background pull ----

StagedUpdates::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cancel.cancel();
  changed.notify_all();
  if (worker.joinable()) worker.join();
}

void StagedUpdates::Impl::run() {
  for (;;) {
    PullOptions pull_options;
    std::size_t target = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return stopping || !ready; });
      if (stopping) return;
      target = staging_index();
      const std::uint64_t live = live_version.load();
      if (options.every_version && !skip_to_newest && live > 0) {
        pull_options.version = live + 1;
      } else {
        pull_options.newer_than = live;
      }
      skip_to_newest = false;
      if (options.deltas && staging_holds != 0 && !pull_options.version && subscriber->publisher_deltas()) {
        pull_options.delta_base = staging_holds;
      }
      pulling = true;
    }
    pull_options.wait = options.poll;
    pull_options.cancel.token = &cancel;
    pull_options.on_progress = options.on_progress;
    auto result = subscriber->pull(plans[target], pull_options);
    if (result.ok() && options.require_checksum && !result->checksum_verified) {
      result = Status(ErrorCode::kChecksumMismatch,
                      "version " + std::to_string(result->version) + " arrived without a verified checksum");
    }
    const SubscriberStats now_stats = subscriber->stats();
    const Status connection = subscriber->status();
    std::unique_lock<std::mutex> lock(mu);
    pulling = false;
    subscriber_stats = now_stats;
    if (result.ok()) {
      staging_holds = result->version;
      ++counters.staged;
      counters.pull_seconds += result->seconds;
      ready = Staged{*result, std::chrono::steady_clock::now()};
      changed.notify_all();
      continue;
    }
    const Status& error = result.status();
    if (nothing_new(error) && connection.ok()) continue;
    if (error.code() == ErrorCode::kCancelled && stopping) return;
    staging_holds = 0;  // its bytes are undefined now
    if (error.code() == ErrorCode::kVersionRevoked && options.every_version) skip_to_newest = true;
    ++counters.failed_pulls;
    last_failure = error;
    if (!connection.ok()) {
      stopped = connection;
      WS_WARN("staged updates: the background pull stopped: {} (the live weights keep version {})",
              connection.to_string(), live_version.load());
      changed.notify_all();
      return;
    }
    WS_DEBUG("staged updates: pull failed, live version {} kept: {}", live_version.load(), error.to_string());
    changed.wait_for(lock, options.retry_backoff, [&] { return stopping; });
  }
}

// ---- install ----

std::string StagedUpdates::Impl::nothing_staged() const {
  std::string why =
      "nothing staged to install (version " + std::to_string(live_version.load()) + " stays live): ";
  if (!stopped.ok()) return why + "the background pull stopped: " + stopped.to_string();
  if (pulling) return why + "a pull is in progress or waiting for a newer version";
  if (!last_failure.ok()) return why + "the last pull failed: " + last_failure.to_string();
  return why + "no newer version has been pulled yet";
}

Result<InstallResult> StagedUpdates::Impl::install() {
  const auto start = std::chrono::steady_clock::now();
  InstallResult out;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!ready) {
      ++counters.not_ready;
      return Status(ErrorCode::kNotReady, nothing_staged());
    }
    out.mode = options.mode;
    out.previous = live_version.load();
    out.version = ready->pull.version;
    out.pull = ready->pull;
    out.staged_seconds = std::chrono::duration<double>(start - ready->at).count();
    if (options.mode == InstallMode::kSwap) {
      live_index.store(1 - live_index.load());
      staging_holds = out.previous;  // the old live buffer, untouched by the engine
    } else if (Status s = area.copy_to_live(); !s.ok()) {
      ready.reset();
      live_version.store(0);  // neither version: the copy stopped part-way
      last_failure = s;
      changed.notify_all();
      return s;
    }
    live_version.store(out.version);
    ready.reset();
    ++counters.installs;
  }
  // Outside the lock: the woken thread does not wait for this one to let go.
  changed.notify_all();
  // The engine's pause is the whole call: the lock, the swap or copy, the wake-up.
  out.blocked_seconds = seconds_since(start);
  std::lock_guard<std::mutex> lock(pauses_mu);
  pauses.add(out.blocked_seconds);
  return out;
}

// ---- StagedUpdates ----

Result<std::unique_ptr<StagedUpdates>> StagedUpdates::create(std::unique_ptr<Subscriber> subscriber,
                                                             StagedUpdatesOptions options) {
  if (!subscriber)
    return Status(ErrorCode::kInvalidArgument, "StagedUpdates::create needs a connected Subscriber");
  if (Status s = subscriber->status(); !s.ok()) return s;
  if (options.require_checksum && !subscriber->publisher_checksums()) {
    return Status(ErrorCode::kInvalidConfig,
                  "the publisher computes no checksums, so no staged version could be verified: turn its "
                  "checksums on, or set StagedUpdatesOptions::require_checksum = false");
  }
  if (options.poll.count() <= 0) options.poll = std::chrono::milliseconds(1);
  auto area = detail::StagingArea::create(subscriber->layout(), options);
  if (!area.ok()) return area.status();
  std::vector<PullPlan> plans;
  for (std::size_t i = 0; i < area->buffer_count(); ++i) {
    auto plan = subscriber->prepare(area->destination(i));
    if (!plan.ok()) return plan.status();
    plans.push_back(*plan);
  }
  auto impl = std::make_unique<Impl>(std::move(subscriber), std::move(options), std::move(*area));
  impl->plans = std::move(plans);
  impl->start();
  return std::unique_ptr<StagedUpdates>(new StagedUpdates(std::move(impl)));
}

StagedUpdates::StagedUpdates(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StagedUpdates::~StagedUpdates() = default;

const WeightLayout& StagedUpdates::layout() const noexcept {
  return impl_->subscriber->layout();
}
InstallMode StagedUpdates::mode() const noexcept {
  return impl_->options.mode;
}
std::string StagedUpdates::transport() const {
  return impl_->subscriber->transport();
}

void* StagedUpdates::live_data() const noexcept {
  if (impl_->options.mode != InstallMode::kSwap) return nullptr;
  return impl_->area.buffer(impl_->live_index.load());
}
std::size_t StagedUpdates::live_bytes() const noexcept {
  return impl_->options.mode == InstallMode::kSwap ? impl_->area.buffer_bytes() : 0;
}
void* StagedUpdates::tensor(const std::string& name) const noexcept {
  if (impl_->options.mode != InstallMode::kSwap || impl_->area.partial()) return nullptr;
  const TensorEntry* t = layout().find(name);
  if (t == nullptr) return nullptr;
  return static_cast<char*>(live_data()) + t->offset;
}
Result<std::uint64_t> StagedUpdates::slice_offset(std::size_t index) const {
  const auto& offsets = impl_->area.slice_offsets();
  if (index >= offsets.size()) {
    return Status(ErrorCode::kInvalidArgument, "slice " + std::to_string(index) + " of " +
                                                   std::to_string(offsets.size()) + " staged slices");
  }
  return offsets[index];
}

std::uint64_t StagedUpdates::live_version() const noexcept {
  return impl_->live_version.load();
}
std::uint64_t StagedUpdates::staged_version() const noexcept {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->ready ? impl_->ready->pull.version : 0;
}

Result<std::uint64_t> StagedUpdates::wait_staged(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const bool done =
      impl_->changed.wait_for(lock, timeout, [&] { return impl_->ready || !impl_->stopped.ok(); });
  if (impl_->ready) return impl_->ready->pull.version;
  if (!impl_->stopped.ok()) return impl_->stopped;
  (void)done;
  return Status(ErrorCode::kTimeout, "no version staged within " + std::to_string(timeout.count()) + " ms (" +
                                         impl_->nothing_staged() + ")");
}

Result<InstallResult> StagedUpdates::install() {
  return impl_->install();
}

Status StagedUpdates::status() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stopped;
}
Status StagedUpdates::last_failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_failure;
}
StagedUpdatesStats StagedUpdates::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  StagedUpdatesStats out = impl_->counters;
  {
    std::lock_guard<std::mutex> pauses_lock(impl_->pauses_mu);
    out.blocked = impl_->pauses.summary();
  }
  out.subscriber = impl_->subscriber_stats;
  return out;
}

}  // namespace weightsync
