// Deadline: a point on the steady clock, and the milliseconds left before it,
// for poll(2)-based socket waits.
#pragma once

#include <algorithm>
#include <chrono>

namespace weightsync::detail {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool is_never() const noexcept { return at_ == Clock::time_point::max(); }
  bool expired() const noexcept { return !is_never() && Clock::now() >= at_; }
  // Milliseconds left, rounded up, for poll(2); -1 for never.
  int poll_millis() const noexcept {
    if (is_never()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(at_ - Clock::now()).count();
    if (left <= 0) return 0;
    return static_cast<int>(std::min<long long>((left + 999) / 1000, 1 << 30));
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

// The end of a wait of `wait` from `start`, saturated: a wait of zero or less
// ends at `start` (do not wait); a wait too long for the clock
// (milliseconds::max() included) never ends.
inline std::chrono::steady_clock::time_point wait_end(std::chrono::steady_clock::time_point start,
                                                      std::chrono::milliseconds wait) {
  using Clock = std::chrono::steady_clock;
  if (wait.count() <= 0) return start;
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - start);
  if (wait >= room) return Clock::time_point::max();
  return start + std::chrono::duration_cast<Clock::duration>(wait);
}

}  // namespace weightsync::detail
