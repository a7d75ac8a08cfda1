// StagedUpdates::Impl: the background pull loop and the install step
// (weightsync/staged_updates.h), defined in staged_updates.cc and
// staged_install.cc.
//
// Contract
// - Threads: `worker` is the only thread that calls the source. `mu` guards
//   everything below it; the worker holds it only between pulls, never
//   during one, so install() waits at most for a few bookkeeping steps.
// - Buffers: every member has a staging area. In kSwap mode buffer
//   `live_index` of each is the engine's and the other the staging one; in
//   kCopy mode buffer 0 is the staging one. The worker writes only staging
//   buffers, and only while nothing is staged (`ready` empty) and no kCopy
//   install is copying out of them (`installing`); install() moves `ready`
//   to live and empties it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "staged/pause_window.h"
#include "staged/pull_source.h"
#include "staged/staging_area.h"
#include "weightsync/cancel.h"
#include "weightsync/staged_updates.h"

namespace weightsync {

class StagedUpdates::Impl {
 public:
  Impl(std::unique_ptr<detail::PullSource> s, StagedUpdatesOptions o)
      : source(std::move(s)), options(std::move(o)) {}
  ~Impl();

  // The members' staging areas and their plans (create).
  Status make_areas();
  // Plans for every buffer of every member, made with `with` (a new source).
  Result<std::vector<std::vector<PullPlan>>> make_plans(detail::PullSource& with) const;
  // Stops the worker, swaps in `next` and its plans, starts the worker again.
  Status replace_source(std::unique_ptr<detail::PullSource> next, bool accept_older);
  void start() {
    worker = std::thread([this] { run(); });
  }
  void stop_worker();
  void run();
  // One background pull into the staging buffers; false when the loop ends.
  bool pull_once(std::unique_lock<std::mutex>& lock);
  detail::SourcePull next_request() const;  // mu held
  Result<InstallResult> install(std::optional<std::uint64_t> version);
  // Why install() found nothing (or not `version`) staged (mu held).
  std::string nothing_staged() const;
  std::size_t staging_index() const { return options.mode == InstallMode::kSwap ? 1 - live_index.load() : 0; }
  bool has_member(std::size_t member) const { return member < areas.size(); }

  std::unique_ptr<detail::PullSource> source;
  const StagedUpdatesOptions options;
  std::vector<detail::StagingArea> areas;    // one per member
  std::vector<std::vector<PullPlan>> plans;  // [buffer][member]
  std::atomic<std::size_t> live_index{0};
  std::atomic<std::uint64_t> live_version{0};
  std::thread worker;
  CancelToken cancel;

  mutable std::mutex mu;
  mutable std::condition_variable changed;
  struct Staged {
    PullResult pull;
    std::chrono::steady_clock::time_point at;
  };
  std::optional<Staged> ready;
  std::optional<std::uint64_t> requested;  // pull_on_request: the version stage() named
  Status request_failed;                   // why `requested` cannot be staged
  std::uint64_t staging_holds = 0;         // the version the staging buffers hold whole (0: none known)
  bool pulling = false;
  bool installing = false;  // kCopy: install() is copying out of the staging buffers, unlocked
  bool stopping = false;
  bool skip_to_newest = false;  // every_version: the next version was gone; take the newest once
  bool accept_older = false;    // after reconnect(accept_older): the source's newest, whatever it is, once
  Status stopped;               // the worker's error once it stopped
  Status last_failure;
  StagedUpdatesStats counters;  // blocked and subscriber filled in by stats()
  SubscriberStats subscriber_stats;

  mutable std::mutex pauses_mu;  // guards pauses; taken alone or after mu, never before it
  detail::PauseWindow pauses;
};

}  // namespace weightsync
