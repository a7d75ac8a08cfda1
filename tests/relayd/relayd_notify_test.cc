// weightsync-relay under a stand-in service manager: the test owns the
// NOTIFY_SOCKET datagram socket, as systemd does for a Type=notify unit.
// Built only with libsystemd (WEIGHTSYNC_HAVE_SYSTEMD).
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "relayd_process.h"

using namespace wsrelayd_test;

namespace {

// A bound AF_UNIX datagram socket at a fresh path; removed on destruction.
class NotifySocket {
 public:
  NotifySocket() {
    char dir[] = "/tmp/ws-relayd-notify-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    dir_ = dir;
    path_ = dir_ + "/notify";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path_.c_str());
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  // Every datagram that arrives within `timeout`, concatenated ("" if none).
  std::string drain(std::chrono::milliseconds timeout) {
    std::string all;
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return all;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return all;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) all.append(buf, static_cast<std::size_t>(n)).append("\n");
    }
  }

 private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace

TEST_CASE(
    "relay daemon: sd_notify READY=1 only after the first version, WATCHDOG=1 when WATCHDOG_USEC is set",
    "[relayd]") {
  NotifySocket notify;
  auto upstream = start_upstream(1u << 20);
  ::unsetenv("WATCHDOG_PID");
  auto daemon = start_daemon({"--upstream", upstream.address}, false,
                             {"NOTIFY_SOCKET=" + notify.path(), "WATCHDOG_USEC=200000"});
  REQUIRE(daemon.wait_for("connected to upstream").has_value());
  // Connected, no version yet: watchdog pings, no READY=1.
  const std::string before = notify.drain(std::chrono::milliseconds(600));
  INFO(before);
  CHECK(before.find("WATCHDOG=1") != std::string::npos);
  CHECK(before.find("READY=1") == std::string::npos);
  upstream.publish();
  REQUIRE(daemon.wait_for("forwarded version 1").has_value());
  const std::string after = notify.drain(std::chrono::milliseconds(600));
  INFO(after);
  CHECK(after.find("READY=1") != std::string::npos);
  CHECK(after.find("STATUS=serving version 1") != std::string::npos);
  CHECK(after.find("WATCHDOG=1") != std::string::npos);
  daemon.process.signal(SIGTERM);
  CHECK(daemon.process.wait(std::chrono::seconds(5)) == 0);
  CHECK(notify.drain(std::chrono::milliseconds(100)).find("STOPPING=1") != std::string::npos);
}

TEST_CASE("relay daemon: without WATCHDOG_USEC no watchdog pings are sent", "[relayd]") {
  NotifySocket notify;
  auto upstream = start_upstream(1u << 20);
  auto daemon = start_daemon({"--upstream", upstream.address}, false, {"NOTIFY_SOCKET=" + notify.path()});
  REQUIRE(daemon.wait_for("connected to upstream").has_value());
  upstream.publish();
  REQUIRE(daemon.wait_for("forwarded version 1").has_value());
  const std::string got = notify.drain(std::chrono::milliseconds(500));
  INFO(got);
  CHECK(got.find("READY=1") != std::string::npos);
  CHECK(got.find("WATCHDOG=1") == std::string::npos);
}
