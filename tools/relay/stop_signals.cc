// stop_signals.cc: signalfd for SIGTERM and SIGINT (stop_signals.h).
#include "stop_signals.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace wsrelay {

weightsync::Result<StopSignals> StopSignals::install() {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
    return weightsync::Status(weightsync::ErrorCode::kInternal, "pthread_sigmask failed");
  }
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) {
    return weightsync::Status(weightsync::ErrorCode::kInternal,
                              std::string("signalfd: ") + std::strerror(errno));
  }
  return StopSignals(fd);
}

StopSignals::~StopSignals() {
  if (fd_ >= 0) ::close(fd_);
}

int StopSignals::wait(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return 0;
  signalfd_siginfo info{};
  if (::read(fd_, &info, sizeof(info)) != static_cast<ssize_t>(sizeof(info))) return 0;
  return static_cast<int>(info.ssi_signo);
}

const char* signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

}  // namespace wsrelay
