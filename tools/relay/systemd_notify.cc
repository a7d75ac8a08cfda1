// systemd_notify.cc: sd_notify() calls, or nothing without libsystemd
// (systemd_notify.h).
#include "systemd_notify.h"

#ifdef WEIGHTSYNC_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace wsrelay {

SystemdNotifier::SystemdNotifier() {
#ifdef WEIGHTSYNC_HAVE_SYSTEMD
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) watchdog_ = std::chrono::microseconds(usec);
#endif
}

bool SystemdNotifier::available() noexcept {
#ifdef WEIGHTSYNC_HAVE_SYSTEMD
  return true;
#else
  return false;
#endif
}

void SystemdNotifier::send(const std::string& message) {
#ifdef WEIGHTSYNC_HAVE_SYSTEMD
  (void)sd_notify(0, message.c_str());
#else
  (void)message;
#endif
}

void SystemdNotifier::ready(const std::string& status) {
  send("READY=1\nSTATUS=" + status);
}

void SystemdNotifier::status(const std::string& status) {
  send("STATUS=" + status);
}

void SystemdNotifier::stopping(const std::string& status) {
  send("STOPPING=1\nSTATUS=" + status);
}

void SystemdNotifier::tick(bool alive) {
  if (watchdog_.count() == 0 || !alive) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ping_ < watchdog_ / 2) return;
  last_ping_ = now;
  send("WATCHDOG=1");
}

}  // namespace wsrelay
