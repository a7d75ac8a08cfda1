// StagedUpdates: installing a staged version, the requests of engine ranks
// driven by a coordinator, and install_on_every_rank
// (weightsync/staged_updates.h, staged_updates_impl.h).
#include <algorithm>
#include <string>

#include "staged/staged_updates_impl.h"

namespace weightsync {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string StagedUpdates::Impl::nothing_staged() const {
  std::string why =
      "nothing staged to install (version " + std::to_string(live_version.load()) + " stays live): ";
  if (!stopped.ok()) return why + "the background pull stopped: " + stopped.to_string();
  if (options.pull_on_request && !requested) return why + "no version was asked for (stage())";
  if (!request_failed.ok())
    return why + "the version asked for cannot be staged: " + request_failed.to_string();
  if (pulling) return why + "a pull is in progress or waiting for a newer version";
  if (!last_failure.ok()) return why + "the last pull failed: " + last_failure.to_string();
  return why + "no newer version has been pulled yet";
}

Result<InstallResult> StagedUpdates::Impl::install(std::optional<std::uint64_t> version) {
  const auto start = std::chrono::steady_clock::now();
  InstallResult out;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (installing) {
      ++counters.not_ready;
      return Status(ErrorCode::kNotReady, "another install() is copying version " +
                                              std::to_string(ready ? ready->pull.version : 0) + " in");
    }
    if (!ready || (version && ready->pull.version != *version)) {
      ++counters.not_ready;
      std::string why = nothing_staged();
      if (ready)
        why =
            "version " + std::to_string(ready->pull.version) + " is staged, not " + std::to_string(*version);
      return Status(ErrorCode::kNotReady, why);
    }
    out.mode = options.mode;
    out.previous = live_version.load();
    out.version = ready->pull.version;
    out.pull = ready->pull;
    out.staged_seconds = std::chrono::duration<double>(start - ready->at).count();
    if (options.mode == InstallMode::kSwap) {
      live_index.store(1 - live_index.load());
      staging_holds = out.previous;  // the old live buffers, untouched by the engine
      live_version.store(out.version);
      ready.reset();
      requested.reset();
      ++counters.installs;
    } else {
      installing = true;  // the worker keeps off the staging buffer until the copy is done
    }
  }
  if (options.mode == InstallMode::kCopy) {
    // Outside the lock: staged_version(), stats() and the rest answer meanwhile.
    Status copied;
    for (std::size_t m = 0; m < areas.size() && copied.ok(); ++m) copied = areas[m].copy_to_live();
    std::lock_guard<std::mutex> lock(mu);
    installing = false;
    // What stage() or discard() changed meanwhile stays changed.
    if (ready && ready->pull.version == out.version) ready.reset();
    if (requested == out.version) requested.reset();
    if (!copied.ok()) {
      live_version.store(0);  // neither version: the copy stopped part-way
      last_failure = copied;
      changed.notify_all();
      return copied;
    }
    live_version.store(out.version);
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

Result<InstallResult> StagedUpdates::install() {
  return impl_->install(std::nullopt);
}

Result<InstallResult> StagedUpdates::install(std::uint64_t version) {
  return impl_->install(version);
}

Status StagedUpdates::stage(std::uint64_t version) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->options.pull_on_request) {
    return Status(ErrorCode::kInvalidArgument,
                  "stage() is for ranks driven by a coordinator: create with pull_on_request = true");
  }
  if (version == 0 || version <= impl_->live_version.load()) {
    return Status(ErrorCode::kInvalidArgument, "stage(" + std::to_string(version) + "): version " +
                                                   std::to_string(impl_->live_version.load()) + " is live");
  }
  if (!impl_->stopped.ok()) return impl_->stopped;
  if (impl_->ready && impl_->ready->pull.version != version) impl_->ready.reset();
  if (impl_->requested != version) impl_->request_failed = Status();
  impl_->requested = version;
  impl_->changed.notify_all();
  return Status();
}

void StagedUpdates::discard() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ready.reset();
    impl_->requested.reset();
    impl_->request_failed = Status();
  }
  impl_->changed.notify_all();
}

Result<std::uint64_t> StagedUpdates::wait_staged(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->changed.wait_for(
      lock, timeout, [&] { return impl_->ready || !impl_->stopped.ok() || !impl_->request_failed.ok(); });
  if (impl_->ready) return impl_->ready->pull.version;
  if (!impl_->stopped.ok()) return impl_->stopped;
  if (!impl_->request_failed.ok()) return impl_->request_failed;
  return Status(ErrorCode::kTimeout, "no version staged within " + std::to_string(timeout.count()) + " ms (" +
                                         impl_->nothing_staged() + ")");
}

// ---- all or nothing across the ranks of one engine ----

namespace {

Status rank_error(const Status& s, std::size_t rank) {
  return Status(s.code(), "engine rank " + std::to_string(rank) + ": " + s.message());
}

// Every rank stages `version`, or the first rank's reason it cannot.
Status stage_everywhere(const std::vector<StagedUpdates*>& ranks, std::uint64_t version,
                        std::chrono::steady_clock::time_point until) {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (Status s = ranks[r]->stage(version); !s.ok()) return rank_error(s, r);
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    auto staged = ranks[r]->wait_staged(std::max(left, std::chrono::milliseconds(0)));
    if (!staged.ok()) return rank_error(staged.status(), r);
    if (*staged != version) {
      return rank_error(Status(ErrorCode::kInternal, "staged version " + std::to_string(*staged) + ", not " +
                                                         std::to_string(version)),
                        r);
    }
  }
  return Status();
}

}  // namespace

Result<RanksInstallResult> install_on_every_rank(const std::vector<StagedUpdates*>& ranks,
                                                 std::uint64_t version, std::chrono::milliseconds timeout) {
  if (ranks.empty() || std::find(ranks.begin(), ranks.end(), nullptr) != ranks.end()) {
    return Status(ErrorCode::kInvalidArgument, "install_on_every_rank needs every rank's StagedUpdates");
  }
  const auto start = std::chrono::steady_clock::now();
  if (Status s = stage_everywhere(ranks, version, start + timeout); !s.ok()) {
    for (StagedUpdates* rank : ranks) rank->discard();  // every rank keeps its live version
    return Status(s.code(), "version " + std::to_string(version) + " installed on no rank: " + s.message());
  }
  // Every rank holds it verified, and install(version) cannot fail for a
  // swap or a host copy: each installs it now.
  RanksInstallResult out;
  out.version = version;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    auto installed = ranks[r]->install(version);
    if (!installed.ok()) return rank_error(installed.status(), r);
    out.max_blocked_seconds = std::max(out.max_blocked_seconds, installed->blocked_seconds);
    out.ranks.push_back(*installed);
  }
  out.seconds = seconds_since(start);
  return out;
}

}  // namespace weightsync
