// channel/rejection_log.h: the trainer's log of rejected trajectory messages,
// rate-limited so that a flood of bad messages cannot flood the log.
//
// Contract
// - note(why): counts the rejection; prints "<prefix>WHY" when fewer than
//   `burst` lines were printed in the current `interval`, else suppresses it.
//   When an interval that suppressed K lines has ended, the next note() or
//   flush() prints "<prefix>K more rejections suppressed in the last N s"
//   once. So at most burst + 1 lines per interval, whatever arrives.
// - Counters count everything: total() = printed() + suppressed().
// - Times come from the caller (tests) or steady_clock.
// - Thread: one thread's object. Writes go to `out` (not owned), flushed.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace channel {

class RejectionLog {
 public:
  using Clock = std::chrono::steady_clock;
  RejectionLog(std::FILE* out, std::string prefix, int burst = 10,
               std::chrono::seconds interval = std::chrono::seconds(10));

  void note(const std::string& why, Clock::time_point now = Clock::now());
  // Prints the summary of an ended interval that suppressed lines, if any.
  void flush(Clock::time_point now = Clock::now());

  std::uint64_t total() const { return printed_ + suppressed_; }
  std::uint64_t printed() const { return printed_; }
  std::uint64_t suppressed() const { return suppressed_; }

 private:
  std::FILE* out_;
  std::string prefix_;
  int burst_;
  std::chrono::seconds interval_;
  Clock::time_point window_start_{};
  bool started_ = false;
  int window_lines_ = 0;
  std::uint64_t window_suppressed_ = 0;
  std::uint64_t printed_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace channel
