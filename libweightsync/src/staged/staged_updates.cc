// StagedUpdates: the background pull into the staging areas, creation and
// the accessors (weightsync/staged_updates.h, staged_updates_impl.h). The
// install side is in staged_install.cc.
#include "staged/staged_updates_impl.h"

#include <string>
#include <utility>

#include "common/log.h"

namespace weightsync {

const char* to_string(InstallMode mode) noexcept {
  switch (mode) {
    case InstallMode::kSwap: return "swap";
    case InstallMode::kCopy: return "copy";
  }
  return "unknown";
}

// ---- the background pull ----

StagedUpdates::Impl::~Impl() {
  stop_worker();
}

void StagedUpdates::Impl::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cancel.cancel();
  changed.notify_all();
  if (worker.joinable()) worker.join();
}

detail::SourcePull StagedUpdates::Impl::next_request() const {
  detail::SourcePull request;
  const std::uint64_t live = live_version.load();
  if (options.pull_on_request) {
    request.version = *requested;
  } else if (accept_older) {
    request.newer_than = 0;  // the new source's newest, even an older one than the live
  } else if (options.every_version && !skip_to_newest && live > 0) {
    request.version = live + 1;
  } else {
    request.newer_than = live;
  }
  if (options.deltas && staging_holds != 0 && !request.version && source->deltas()) {
    request.delta_base = staging_holds;
  }
  request.wait = options.poll;
  request.cancel = &cancel;
  request.on_progress = options.on_progress;
  return request;
}

void StagedUpdates::Impl::run() {
  std::unique_lock<std::mutex> lock(mu);
  while (pull_once(lock)) {
  }
}

bool StagedUpdates::Impl::pull_once(std::unique_lock<std::mutex>& lock) {
  changed.wait(lock, [&] {
    return stopping ||
           (!ready && !installing && (!options.pull_on_request || (requested && request_failed.ok())));
  });
  if (stopping) return false;
  const std::size_t target = staging_index();
  const detail::SourcePull request = next_request();
  skip_to_newest = false;
  pulling = true;
  lock.unlock();
  auto result = source->pull(plans[target], request);
  if (result.ok() && options.require_checksum && !result->checksum_verified) {
    result = Status(ErrorCode::kChecksumMismatch,
                    "version " + std::to_string(result->version) + " arrived without a verified checksum");
  }
  const SubscriberStats now_stats = source->stats();
  const Status connection = source->status();
  lock.lock();
  pulling = false;
  subscriber_stats = now_stats;
  if (result.ok()) {
    staging_holds = result->version;
    accept_older = false;
    ++counters.staged;
    counters.pull_seconds += result->seconds;
    // A request changed during the pull (stage() of another version): this one is not wanted.
    if (!options.pull_on_request || requested == result->version) {
      ready = Staged{*result, std::chrono::steady_clock::now()};
    }
    changed.notify_all();
    return true;
  }
  const Status& error = result.status();
  if (error.code() == ErrorCode::kNotReady && connection.ok())
    return true;  // nothing newer yet: nothing written
  if (error.code() == ErrorCode::kCancelled && stopping) return false;
  staging_holds = 0;  // its bytes are undefined now
  if (error.code() == ErrorCode::kVersionRevoked && options.every_version) skip_to_newest = true;
  if (options.pull_on_request && requested == request.version) request_failed = error;
  ++counters.failed_pulls;
  last_failure = error;
  if (!connection.ok()) {
    stopped = connection;
    WS_WARN("staged updates: the background pull stopped: {} (the live weights keep version {})",
            connection.to_string(), live_version.load());
    changed.notify_all();
    return false;
  }
  WS_DEBUG("staged updates: pull failed, live version {} kept: {}", live_version.load(), error.to_string());
  changed.notify_all();
  changed.wait_for(lock, options.retry_backoff, [&] { return stopping; });
  return true;
}

// ---- creation ----

Status StagedUpdates::Impl::make_areas() {
  const std::size_t members = source->members();
  if (!options.members.empty() && options.members.size() != members) {
    return Status(ErrorCode::kInvalidArgument, "StagedUpdatesOptions::members names " +
                                                   std::to_string(options.members.size()) +
                                                   " members; the group has " + std::to_string(members));
  }
  for (std::size_t m = 0; m < members; ++m) {
    StagedUpdatesOptions member_options = options;
    if (!options.members.empty()) {
      member_options.live = options.members[m].live;
      member_options.slices = options.members[m].slices;
    }
    auto area = detail::StagingArea::create(source->layout(m), member_options);
    if (!area.ok()) {
      if (members == 1) return area.status();
      return Status(area.status().code(),
                    "trainer rank " + std::to_string(m) + ": " + area.status().message());
    }
    areas.push_back(std::move(*area));
  }
  auto made = make_plans(*source);
  if (!made.ok()) return made.status();
  plans = std::move(*made);
  return Status();
}

Result<std::vector<std::vector<PullPlan>>> StagedUpdates::Impl::make_plans(detail::PullSource& with) const {
  std::vector<std::vector<PullPlan>> made(areas[0].buffer_count(), std::vector<PullPlan>(areas.size()));
  for (std::size_t b = 0; b < made.size(); ++b) {
    for (std::size_t m = 0; m < areas.size(); ++m) {
      auto plan = with.prepare(m, areas[m].destination(b));
      if (!plan.ok()) return plan.status();
      made[b][m] = *plan;
    }
  }
  return made;
}

Status StagedUpdates::Impl::replace_source(std::unique_ptr<detail::PullSource> next, bool take_older) {
  if (Status s = next->status(); !s.ok()) return s;
  if (next->members() != areas.size()) {
    return Status(ErrorCode::kInvalidArgument, "the new source has " + std::to_string(next->members()) +
                                                   " members; these staged updates have " +
                                                   std::to_string(areas.size()));
  }
  for (std::size_t m = 0; m < areas.size(); ++m) {
    if (!(next->layout(m) == source->layout(m))) {
      return Status(ErrorCode::kInvalidArgument,
                    "the new source serves another layout (member " + std::to_string(m) +
                        "): the live weights cannot take its versions; create new StagedUpdates");
    }
  }
  if (options.require_checksum && !next->checksums()) {
    return Status(ErrorCode::kInvalidConfig,
                  "the new publisher computes no checksums (StagedUpdatesOptions::require_checksum)");
  }
  auto made = make_plans(*next);  // the worker does not touch the new source
  if (!made.ok()) return made.status();
  stop_worker();
  source = std::move(next);  // the old one goes with its plans
  plans = std::move(*made);
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = false;
    stopped = Status();
    ready.reset();
    requested.reset();
    request_failed = Status();
    staging_holds = 0;
    pulling = false;
    accept_older = take_older;
  }
  cancel.reset();
  start();
  return Status();
}

namespace {

Result<std::unique_ptr<StagedUpdates::Impl>> make_impl(std::unique_ptr<detail::PullSource> source,
                                                       StagedUpdatesOptions options) {
  if (Status s = source->status(); !s.ok()) return s;
  if (options.require_checksum && !source->checksums()) {
    return Status(ErrorCode::kInvalidConfig,
                  "the publisher computes no checksums, so no staged version could be verified: turn its "
                  "checksums on, or set StagedUpdatesOptions::require_checksum = false");
  }
  if (options.poll.count() <= 0) options.poll = std::chrono::milliseconds(1);
  auto impl = std::make_unique<StagedUpdates::Impl>(std::move(source), std::move(options));
  if (Status s = impl->make_areas(); !s.ok()) return s;
  impl->start();
  return impl;
}

}  // namespace

Result<std::unique_ptr<StagedUpdates>> StagedUpdates::create(std::unique_ptr<Subscriber> subscriber,
                                                             StagedUpdatesOptions options) {
  if (!subscriber)
    return Status(ErrorCode::kInvalidArgument, "StagedUpdates::create needs a connected Subscriber");
  if (!options.members.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  "StagedUpdatesOptions::members is for a SubscriberGroup; use live and slices");
  }
  auto impl = make_impl(detail::subscriber_source(std::move(subscriber)), std::move(options));
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<StagedUpdates>(new StagedUpdates(std::move(*impl)));
}

Result<std::unique_ptr<StagedUpdates>> StagedUpdates::create(std::unique_ptr<SubscriberGroup> group,
                                                             StagedUpdatesOptions options) {
  if (!group)
    return Status(ErrorCode::kInvalidArgument, "StagedUpdates::create needs a connected SubscriberGroup");
  if (options.live || !options.slices.empty()) {
    return Status(
        ErrorCode::kInvalidArgument,
        "a SubscriberGroup's live destinations and slices go in StagedUpdatesOptions::members, one per "
        "trainer rank");
  }
  if (options.members.empty() && options.mode == InstallMode::kCopy) {
    return Status(ErrorCode::kInvalidArgument,
                  "kCopy needs each member's live destination (StagedUpdatesOptions::members)");
  }
  auto impl = make_impl(detail::group_source(std::move(group)), std::move(options));
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<StagedUpdates>(new StagedUpdates(std::move(*impl)));
}

Status StagedUpdates::reconnect(std::unique_ptr<Subscriber> subscriber, bool accept_older) {
  if (!subscriber) return Status(ErrorCode::kInvalidArgument, "reconnect needs a connected Subscriber");
  if (impl_->source->is_group()) {
    return Status(ErrorCode::kInvalidArgument,
                  "these staged updates pull from a SubscriberGroup: reconnect one");
  }
  return impl_->replace_source(detail::subscriber_source(std::move(subscriber)), accept_older);
}

Status StagedUpdates::reconnect(std::unique_ptr<SubscriberGroup> group, bool accept_older) {
  if (!group) return Status(ErrorCode::kInvalidArgument, "reconnect needs a connected SubscriberGroup");
  if (!impl_->source->is_group()) {
    return Status(ErrorCode::kInvalidArgument, "these staged updates pull from a Subscriber: reconnect one");
  }
  return impl_->replace_source(detail::group_source(std::move(group)), accept_older);
}

StagedUpdates::StagedUpdates(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StagedUpdates::~StagedUpdates() = default;

// ---- accessors ----

const WeightLayout& StagedUpdates::layout() const noexcept {
  return impl_->source->layout(0);
}
const WeightLayout& StagedUpdates::layout(std::size_t member) const noexcept {
  return impl_->source->layout(impl_->has_member(member) ? member : 0);
}
std::size_t StagedUpdates::members() const noexcept {
  return impl_->areas.size();
}
InstallMode StagedUpdates::mode() const noexcept {
  return impl_->options.mode;
}
std::string StagedUpdates::transport() const {
  return impl_->source->transport();
}

void* StagedUpdates::live_data(std::size_t member) const noexcept {
  if (impl_->options.mode != InstallMode::kSwap || !impl_->has_member(member)) return nullptr;
  return impl_->areas[member].buffer(impl_->live_index.load());
}
void* StagedUpdates::buffer_data(std::size_t index, std::size_t member) const noexcept {
  if (impl_->options.mode != InstallMode::kSwap || !impl_->has_member(member) || index > 1) return nullptr;
  return impl_->areas[member].buffer(index);
}
std::size_t StagedUpdates::live_bytes(std::size_t member) const noexcept {
  if (impl_->options.mode != InstallMode::kSwap || !impl_->has_member(member)) return 0;
  return impl_->areas[member].buffer_bytes();
}
void* StagedUpdates::tensor(const std::string& name, std::size_t member) const noexcept {
  if (impl_->options.mode != InstallMode::kSwap || !impl_->has_member(member)) return nullptr;
  if (impl_->areas[member].partial()) return nullptr;
  const TensorEntry* t = layout(member).find(name);
  if (t == nullptr) return nullptr;
  return static_cast<char*>(live_data(member)) + t->offset;
}
Result<std::uint64_t> StagedUpdates::slice_offset(std::size_t index, std::size_t member) const {
  if (!impl_->has_member(member)) {
    return Status(ErrorCode::kInvalidArgument,
                  "member " + std::to_string(member) + " of " + std::to_string(impl_->areas.size()));
  }
  const auto& offsets = impl_->areas[member].slice_offsets();
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
