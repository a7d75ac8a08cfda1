// health_board.h: what /livez and /readyz answer, posted by the daemon's
// loop and read by the health server's threads.
//
// Contract
// - post() replaces the report and stamps the time; report() returns it,
//   except that /livez turns 503 ("main loop stalled") once no post arrived
//   for `stall_limit`: a wedged loop is not alive whatever it last said.
// - Thread-safe (one mutex, held for a copy). No exceptions but bad_alloc.
#pragma once

#include <chrono>
#include <mutex>

#include "health_server.h"

namespace wsrelay {

class HealthBoard {
 public:
  explicit HealthBoard(std::chrono::milliseconds stall_limit) : stall_limit_(stall_limit) {}
  void post(HealthReport report);
  HealthReport report() const;

 private:
  const std::chrono::milliseconds stall_limit_;
  mutable std::mutex mutex_;
  HealthReport report_{{true, "starting"}, {false, "starting"}};
  std::chrono::steady_clock::time_point posted_ = std::chrono::steady_clock::now();
};

}  // namespace wsrelay
