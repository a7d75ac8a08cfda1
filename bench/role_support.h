// Small helpers both bench roles use: the process's CPU time and the ERROR
// answer of the roles.h protocol. Any thread.
#pragma once

#include <sys/resource.h>

#include <string>

namespace wsbench {

// User + system CPU seconds of this process so far.
inline double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// "ERROR <what>" on one line (newlines in `what` become spaces).
inline std::string error_line(const std::string& what) {
  std::string line = "ERROR " + what;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  return line;
}

}  // namespace wsbench
