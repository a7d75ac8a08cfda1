// systemd_notify.h: the service manager's notification protocol for a
// Type=notify unit: READY=1 once the relay serves a version, STATUS= lines,
// WATCHDOG=1 pings while it is alive, STOPPING=1 on the way out.
//
// Contract
// - Through libsystemd's sd_notify() when the build found libsystemd
//   (WEIGHTSYNC_HAVE_SYSTEMD); without it every call does nothing and
//   available() is false.
// - Outside systemd (NOTIFY_SOCKET unset) every call does nothing.
// - The watchdog is on when the manager set WATCHDOG_USEC (and WATCHDOG_PID,
//   if set, is this process): tick(true) pings at half that interval;
//   tick(false) (not alive) does not, so the manager restarts a wedged relay.
// - Errors are ignored (a notification is advisory); nothing throws.
// - One owner thread.
#pragma once

#include <chrono>
#include <string>

namespace wsrelay {

class SystemdNotifier {
 public:
  SystemdNotifier();

  static bool available() noexcept;
  std::chrono::microseconds watchdog_interval() const { return watchdog_; }

  void ready(const std::string& status);
  void status(const std::string& status);
  void stopping(const std::string& status);
  void tick(bool alive);

 private:
  void send(const std::string& message);
  std::chrono::microseconds watchdog_{0};
  std::chrono::steady_clock::time_point last_ping_{};
};

}  // namespace wsrelay
