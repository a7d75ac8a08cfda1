// daemon_log.h: weightsync-relay's own lines. Status lines go to stdout,
// errors to stderr, each prefixed "weightsync-relay: " and flushed at once
// (journald and supervisors read them live; tests parse stdout). Any thread:
// one printf per line.
#pragma once

#include <cstdio>
#include <string>

namespace wsrelay {

inline void say(const std::string& line) {
  std::printf("weightsync-relay: %s\n", line.c_str());
  std::fflush(stdout);
}

inline void complain(const std::string& line) {
  std::fprintf(stderr, "weightsync-relay: error: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace wsrelay
