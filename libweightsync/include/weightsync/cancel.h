// weightsync/cancel.h: stopping a wait from another thread, or on Ctrl-C.
//
// Contract
// - A CancelToken is a flag: cancel() sets it, reset() clears it, from any
//   thread, at any time (atomics; no locks, no allocation). The caller owns
//   it and keeps it alive while a call that was given it runs.
// - Cancellation says where a blocking call may stop early: a set `token`,
//   or a `poll` function that returns true. poll runs on the calling thread
//   (about every kCancelPollInterval while the call waits), so it may do what
//   only that thread can, such as asking the Python interpreter whether
//   Ctrl-C was pressed. If poll throws, the call stops as if it returned
//   true (the exception does not escape the library).
// - A call that stops this way returns ErrorCode::kCancelled. It is not a
//   connection error: the Subscriber stays usable. The token stays set until
//   reset(); calls given a set token return kCancelled at once.
// - Where calls check it: Subscriber::pull() while it waits for a version
//   to be published (PullOptions::wait) and between attempts;
//   Subscriber::wait_for_version(). A transfer already under way is not cut
//   short (it is bounded by the I/O timeout): the destination never holds a
//   version that was cut short and reported as delivered.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

namespace weightsync {

// How often a waiting call looks at its Cancellation.
inline constexpr std::chrono::milliseconds kCancelPollInterval{10};

class CancelToken {
 public:
  void cancel() noexcept { flag_.store(true, std::memory_order_release); }
  void reset() noexcept { flag_.store(false, std::memory_order_release); }
  bool cancelled() const noexcept { return flag_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> flag_{false};
};

struct Cancellation {
  const CancelToken* token = nullptr;
  std::function<bool()> poll;

  // Whether either is set; a waiting call that is not cancellable waits in one piece.
  bool active() const noexcept { return token != nullptr || static_cast<bool>(poll); }
  // True when the token is set or poll returns true (or throws).
  bool requested() const noexcept {
    if (token != nullptr && token->cancelled()) return true;
    if (!poll) return false;
    try {
      return poll();
    } catch (...) {
      return true;
    }
  }
};

}  // namespace weightsync
