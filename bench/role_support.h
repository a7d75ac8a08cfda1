// Small helpers the bench roles use: the process's CPU time, the steady
// clock in nanoseconds, and the ERROR and CPU answers of the roles' protocol
// (role_loop.h). Any thread.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

namespace wsbench {

// User + system CPU seconds of this process so far.
inline double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// steady_clock (CLOCK_MONOTONIC: comparable across processes on one host) now, in nanoseconds.
inline std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "ERROR <what>" on one line (newlines in `what` become spaces).
inline std::string error_line(const std::string& what) {
  std::string line = "ERROR " + what;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  return line;
}

// "CPU <process_cpu_s>": the answer to the fanout roles' CPU command.
inline std::string cpu_line() {
  std::ostringstream out;
  out << "CPU " << process_cpu_seconds();
  return out.str();
}

}  // namespace wsbench
