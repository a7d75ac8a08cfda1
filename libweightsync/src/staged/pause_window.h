// PauseWindow: the pauses install() caused, kept for their quantiles: the
// newest kCapacity samples for the median and p99, and the count, total and
// maximum over all of them. Not thread-safe: its owner locks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "weightsync/staged_updates.h"

namespace weightsync::detail {

class PauseWindow {
 public:
  static constexpr std::size_t kCapacity = 4096;

  void add(double seconds) {
    if (samples_.size() < kCapacity) {
      samples_.push_back(seconds);
    } else {
      samples_[next_] = seconds;
    }
    next_ = (next_ + 1) % kCapacity;
    ++count_;
    total_ += seconds;
    max_ = std::max(max_, seconds);
  }

  PauseSummary summary() const {
    PauseSummary out;
    out.count = count_;
    out.total_seconds = total_;
    out.max_seconds = max_;
    if (samples_.empty()) return out;
    std::vector<double> sorted = samples_;
    std::sort(sorted.begin(), sorted.end());
    out.median_seconds = quantile(sorted, 0.5);
    out.p99_seconds = quantile(sorted, 0.99);
    return out;
  }

  // The sample at rank q * (n - 1), rounded up (the p99 of 10 samples is the largest).
  static double quantile(const std::vector<double>& sorted, double q) {
    const double rank = q * static_cast<double>(sorted.size() - 1);
    auto index = static_cast<std::size_t>(rank);
    if (static_cast<double>(index) < rank) ++index;
    return sorted[std::min(index, sorted.size() - 1)];
  }

 private:
  std::vector<double> samples_;
  std::size_t next_ = 0;
  std::uint64_t count_ = 0;
  double total_ = 0.0;
  double max_ = 0.0;
};

}  // namespace weightsync::detail
