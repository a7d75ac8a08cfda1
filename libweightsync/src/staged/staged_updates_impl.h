// StagedUpdates::Impl: the background pull loop and the install step
// (weightsync/staged_updates.h), defined in staged_updates.cc.
//
// Contract
// - Threads: `worker` is the only thread that calls the Subscriber. `mu`
//   guards everything below it; the worker holds it only between pulls, never
//   during one, so install() waits at most for a few bookkeeping steps.
// - Buffers: in kSwap mode buffer `live_index` is the engine's and the other
//   the staging one; in kCopy mode buffer 0 is the staging one. The worker
//   writes only the staging buffer, and only while nothing is staged (`ready`
//   empty); install() moves `ready` to live and empties it.
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
#include "staged/staging_area.h"
#include "weightsync/cancel.h"
#include "weightsync/staged_updates.h"
#include "weightsync/subscriber.h"

namespace weightsync {

class StagedUpdates::Impl {
 public:
  Impl(std::unique_ptr<Subscriber> s, StagedUpdatesOptions o, detail::StagingArea a)
      : subscriber(std::move(s)), options(std::move(o)), area(std::move(a)) {}
  ~Impl();

  void start() {
    worker = std::thread([this] { run(); });
  }
  void run();
  Result<InstallResult> install();
  // Why install() found nothing staged (mu held).
  std::string nothing_staged() const;
  std::size_t staging_index() const { return options.mode == InstallMode::kSwap ? 1 - live_index.load() : 0; }

  std::unique_ptr<Subscriber> subscriber;
  const StagedUpdatesOptions options;
  detail::StagingArea area;
  std::vector<PullPlan> plans;  // one per buffer
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
  std::uint64_t staging_holds = 0;  // the version the staging buffer holds whole (0: none known)
  bool pulling = false;
  bool stopping = false;
  bool skip_to_newest = false;  // every_version: the next version was gone; take the newest once
  Status stopped;               // the worker's error once it stopped
  Status last_failure;
  StagedUpdatesStats counters;  // blocked and subscriber filled in by stats()
  SubscriberStats subscriber_stats;

  mutable std::mutex pauses_mu;  // guards pauses; never held while taking mu
  detail::PauseWindow pauses;
};

}  // namespace weightsync
