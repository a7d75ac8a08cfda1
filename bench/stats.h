// Order statistics for the bench: median and nearest-rank percentiles.
// Pure functions; an empty input gives NaN.
#pragma once

#include <vector>

namespace wsbench {

// Nearest-rank percentile, p in [0, 100].
double percentile(std::vector<double> values, double p);
inline double median(const std::vector<double>& values) {
  return percentile(values, 50.0);
}

}  // namespace wsbench
