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

}  // namespace weightsync::detail
