// health_board.cc: the posted health report (health_board.h).
#include "health_board.h"

#include <string>
#include <utility>

namespace wsrelay {

void HealthBoard::post(HealthReport report) {
  std::lock_guard<std::mutex> lock(mutex_);
  report_ = std::move(report);
  posted_ = std::chrono::steady_clock::now();
}

HealthReport HealthBoard::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  HealthReport out = report_;
  const auto age = std::chrono::steady_clock::now() - posted_;
  if (age > stall_limit_) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(age).count();
    out.live = {false, "main loop stalled: no progress for " + std::to_string(ms) + " ms"};
    out.ready = {false, out.live.reason};
  }
  return out;
}

}  // namespace wsrelay
