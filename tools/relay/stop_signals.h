// stop_signals.h: SIGTERM and SIGINT as readable events (signalfd), so the
// daemon's loop stops cleanly instead of dying in a handler.
//
// Contract
// - install() blocks SIGTERM and SIGINT in the calling thread and opens a
//   signalfd for them; call it in main() before any thread starts, so every
//   thread inherits the mask and the signals queue for the fd. It also
//   ignores SIGPIPE. Errors are a Status (kInternal with errno's text).
// - wait() returns the pending signal's number, or 0 after `timeout`.
// - One owner thread; the destructor closes the fd (the mask stays).
#pragma once

#include <chrono>

#include "weightsync/status.h"

namespace wsrelay {

class StopSignals {
 public:
  static weightsync::Result<StopSignals> install();
  StopSignals(StopSignals&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  StopSignals& operator=(StopSignals&&) = delete;
  StopSignals(const StopSignals&) = delete;
  ~StopSignals();

  int wait(std::chrono::milliseconds timeout);

 private:
  explicit StopSignals(int fd) : fd_(fd) {}
  int fd_ = -1;
};

const char* signal_name(int sig);

}  // namespace wsrelay
