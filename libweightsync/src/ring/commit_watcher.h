// CommitWatcher: the thread that works from a ring's committed versions
// without ever holding up the publishing thread: it works on the newest
// commit and skips the rest. Used by the publisher's delta thread
// (delta/delta_store.h), view pre-hashing (publisher/view_registry.h) and
// signing (publisher/version_signer.h); each keeps its own domain state and
// hands the watcher the work to do for one commit.
//
// Contract
// - start(work) starts the thread, once: false (nothing started) if it was
//   started or stopped before. std::system_error if no thread can be made
//   (as std::thread; callers turn it into kInternal at the library boundary).
// - committed(slot, stamp) is called by the publishing thread (whichever
//   thread commits) after every commit. It never blocks on the work: it only
//   records the commit as the newest, under the watcher's own mutex (never
//   held while work runs), and wakes the thread. A commit recorded while an
//   older one still waits replaces it: the older one is never worked on and
//   counts as skipped. Before start() and after stop() it does nothing.
// - The thread runs work(slot, stamp) for the newest commit recorded, one
//   call at a time, with no lock of the watcher held; commits recorded
//   meanwhile wait, and only the newest of them is worked on next. Long work
//   may call interrupted() between steps and return early once a newer commit
//   waits (or stop() was called).
// - An exception thrown by work is caught (std::exception and anything
//   else), logged at warn as "<name> of version <stamp >> 1> failed: <what>",
//   and counted in failed; the thread goes on with the next commit.
// - stop() (and the destructor) wakes the thread and joins it once the work
//   in hand returns; a commit still waiting is dropped (neither worked on nor
//   counted as skipped). The watcher must outlive every committed() call;
//   the owner stops it before the state its work uses goes away.
// - Thread-safety: every method may be called from any thread, concurrently
//   (stop() from several threads included). Work may call committed(),
//   interrupted() and counters(), never start() or stop() (stop() would wait
//   for the thread it runs on).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace weightsync::detail {

class CommitWatcher {
 public:
  // slot: the slot committed; stamp: its stamp (version << 1).
  using Work = std::function<void(std::uint32_t slot, std::uint64_t stamp)>;

  struct Counters {
    std::uint64_t committed = 0;  // commits recorded (between start() and stop())
    std::uint64_t worked = 0;     // work calls that returned or threw
    std::uint64_t failed = 0;     // of those, the ones that threw
    std::uint64_t skipped = 0;    // commits replaced by a newer one before work began on them
  };

  // name: what the work is, for log messages ("publisher: delta").
  explicit CommitWatcher(std::string name);
  ~CommitWatcher();
  CommitWatcher(const CommitWatcher&) = delete;
  CommitWatcher& operator=(const CommitWatcher&) = delete;

  bool start(Work work);
  void committed(std::uint32_t slot, std::uint64_t stamp);
  // For work: whether a newer commit waits or stop() was called, so that the
  // commit in hand is no longer worth finishing.
  bool interrupted() const;
  void stop();
  Counters counters() const;

 private:
  void run();

  const std::string name_;
  Work work_;  // set by start() before the thread starts, then read by the thread only

  std::mutex thread_mu_;  // start() and stop(): thread_; taken before mu_
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // a commit recorded, or stop()
  bool started_ = false;
  bool stopping_ = false;
  bool waiting_ = false;  // a commit recorded and not yet taken by the thread
  std::uint32_t slot_ = 0;
  std::uint64_t stamp_ = 0;
  Counters counters_;
};

}  // namespace weightsync::detail
