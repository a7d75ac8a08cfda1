// Nearest-rank percentiles (the median of an even count is the mean of the two middle values).
#include "stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace wsbench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (p == 50.0 && n % 2 == 0) return (values[n / 2 - 1] + values[n / 2]) / 2.0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(n));
  const std::size_t index = rank < 1.0 ? 0 : std::min(n - 1, static_cast<std::size_t>(rank) - 1);
  return values[index];
}

}  // namespace wsbench
