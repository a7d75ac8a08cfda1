// pull_histogram.h: counts one pull's latency into SubscriberStats' buckets.
//
// Contract: O(1) in the number of pulls (a scan of 15 fixed bounds), no
// allocation, no lock of its own: the caller holds whatever guards `stats`
// (the Subscriber's pulling thread). A NaN or negative time counts in the
// first bucket and adds nothing to the sum.
#pragma once

#include <cstddef>

#include "weightsync/subscriber.h"

namespace weightsync::detail {

inline void count_pull_seconds(SubscriberStats& stats, double seconds) noexcept {
  if (!(seconds >= 0.0)) seconds = 0.0;
  std::size_t b = 0;
  while (b + 1 < kPullSecondsBuckets && seconds > kPullSecondsBounds[b]) ++b;
  ++stats.pull_seconds_counts[b];
  stats.pull_seconds_sum += seconds;
}

}  // namespace weightsync::detail
