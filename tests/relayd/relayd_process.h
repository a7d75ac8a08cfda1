// relayd_process.h: the weightsync-relay daemon and its upstream publishers
// as real processes, for the daemon's tests (tests/relayd/).
//
// Contract: each helper spawns real executables (paths are compile
// definitions) and waits for their stdout lines with bounded timeouts;
// failures are Catch2 REQUIREs. ChildProcess kills and reaps on destruction,
// so a failed test leaves no process. One thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "child_process.h"
#include "http_get.h"

namespace wsrelayd_test {

using namespace std::chrono_literals;

// A port free now (bound, then closed).
inline std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// ws_test_peer publish --step: one version per "next" line.
struct Upstream {
  wsutil::ChildProcess process;
  std::string address;
  std::uint64_t next_version;

  void publish() {
    process.write_line("next");
    auto line = process.wait_for("PUBLISHED ", 30s);
    REQUIRE(line.has_value());
    REQUIRE(std::stoull(*line) == next_version);
    ++next_version;
  }
};

inline Upstream start_upstream(std::uint64_t size, std::uint16_t port = 0, std::uint64_t first = 1) {
  std::vector<std::string> argv = {WS_TEST_PEER_PATH,
                                   "publish",
                                   "--size",
                                   std::to_string(size),
                                   "--tensors",
                                   "3",
                                   "--versions",
                                   "1000",
                                   "--step",
                                   "--first",
                                   std::to_string(first)};
  if (port != 0) {
    argv.push_back("--port");
    argv.push_back(std::to_string(port));
  }
  Upstream u{wsutil::ChildProcess::spawn(argv), "", first};
  auto address = u.process.wait_for("ADDRESS ", 30s);
  REQUIRE(address.has_value());
  u.address = *address;
  return u;
}

// weightsync-relay with `args`, reading its status lines.
struct Daemon {
  wsutil::ChildProcess process;
  std::string health;  // "host:port" when --health-address was given

  // Waits for a status line starting with `prefix` (after "weightsync-relay: ").
  std::optional<std::string> wait_for(const std::string& prefix, std::chrono::milliseconds timeout = 20s) {
    return process.wait_for("weightsync-relay: " + prefix, timeout);
  }
  // The address it serves on, from "connected to upstream U; serving on A (...)".
  std::string serving_address() {
    auto line = wait_for("connected to upstream ");
    REQUIRE(line.has_value());
    const std::size_t at = line->find("serving on ");
    REQUIRE(at != std::string::npos);
    const std::string rest = line->substr(at + 11);
    return rest.substr(0, rest.find(' '));
  }
  wstest::HttpReply probe(const std::string& path) {
    const std::size_t colon = health.rfind(':');
    return wstest::http_get(health.substr(0, colon), wstest::port_of(health), path, 3s);
  }
};

inline Daemon start_daemon(std::vector<std::string> args, bool with_health = true,
                           const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), WS_RELAY_DAEMON_PATH);
  if (with_health) {
    args.push_back("--health-address");
    args.push_back("127.0.0.1:0");
  }
  Daemon d{wsutil::ChildProcess::spawn(args, env), ""};
  if (with_health) {
    auto line = d.wait_for("health on http://");
    REQUIRE(line.has_value());
    d.health = line->substr(0, line->find(' '));
  }
  return d;
}

}  // namespace wsrelayd_test
