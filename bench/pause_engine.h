// The pieces of `weightsync-bench pause` (pause_bench.h) that run_pause()
// puts together: the trainer thread, the engine's read pass, and the update
// step of each row.
//
// Contract
// - PauseTrainer: its own thread publishes into the Publisher it is given
//   (nobody else may publish there while it lives); publish_next() and
//   published() from any thread. The destructor joins the thread.
// - read_pass(): any thread; reads, never writes.
// - Updater: the engine's thread only. try_update() throws PauseError when
//   the row cannot go on (the message says why).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "pause_bench.h"
#include "weightsync/weightsync.h"

namespace wsbench {

struct PauseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The trainer: versions 1..slots are written whole into every slot once
// (fill_slots), then each later version rewrites only its marks (roles.h),
// on the trainer's thread, at least `interval` after the previous publish.
class PauseTrainer {
 public:
  PauseTrainer(weightsync::Publisher& publisher, std::chrono::milliseconds interval);
  ~PauseTrainer();
  PauseTrainer(const PauseTrainer&) = delete;
  PauseTrainer& operator=(const PauseTrainer&) = delete;

  // On the calling thread, once, before publish_next(): every slot written
  // whole; then starts the trainer thread.
  weightsync::Status fill_slots();
  // Asks the trainer thread for the next version.
  void publish_next();
  // The newest version committed (0: none).
  std::uint64_t published() const { return published_.load(); }
  // Why the trainer stopped ("" while it runs).
  std::string error() const;

 private:
  void run();
  weightsync::Status publish(std::uint64_t version, bool whole);

  weightsync::Publisher& publisher_;
  const std::chrono::milliseconds interval_;
  std::atomic<std::uint64_t> published_{0};
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::uint64_t wanted_ = 0;
  bool stop_ = false;
  std::string error_;
  std::chrono::steady_clock::time_point last_publish_{};
  std::thread thread_;
};

// One forward pass: the sum of the 8-byte words of [data, data + bytes).
std::uint64_t read_pass(const void* data, std::size_t bytes);

// A row's update step, taken between two passes.
class Updater {
 public:
  virtual ~Updater() = default;
  // The buffer the engine reads now (nullptr: none yet, the first update makes one).
  virtual const void* live() const = 0;
  // Takes an update if one is ready (filling *sample): true; else false.
  virtual bool try_update(PauseSample* sample) = 0;
};

// foreground: Subscriber::pull into `live` when the trainer has a newer version.
std::unique_ptr<Updater> make_foreground_updater(std::unique_ptr<weightsync::Subscriber> subscriber,
                                                 weightsync::HostBuffer& live, const PauseTrainer& trainer,
                                                 std::chrono::seconds timeout);
// swap, or copy into `live` (nullptr for swap).
std::unique_ptr<Updater> make_staged_updater(std::unique_ptr<weightsync::Subscriber> subscriber,
                                             weightsync::InstallMode mode, weightsync::HostBuffer* live,
                                             bool require_checksum);

}  // namespace wsbench
