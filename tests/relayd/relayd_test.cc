// weightsync-relay, the daemon (tools/relay/), as real processes: a real
// publisher (ws_test_peer) upstream, real subscribers downstream over tcp and
// shm, its health endpoint over HTTP, signals, and its flag checks.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "patterns.h"
#include "relayd_process.h"
#include "weightsync/weightsync.h"

using namespace wsrelayd_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kSize = 4u << 20;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Pulls the newest version over `transport` and checks every byte against
// the test pattern; returns the version.
std::uint64_t pull_bit_exact(const std::string& address, const std::string& transport,
                             std::uint64_t newer_than) {
  weightsync::SubscriberOptions options;
  options.transport = transport;
  options.client_name = "relayd-test";
  auto sub = weightsync::Subscriber::connect(address, options);
  INFO(sub.status().to_string());
  REQUIRE(sub.ok());
  CHECK((*sub)->transport() == transport);
  const auto& layout = (*sub)->layout();
  auto buffer = weightsync::HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  weightsync::PullOptions pull;
  pull.wait = std::chrono::seconds(10);
  pull.newer_than = newer_than;
  auto pulled = (*sub)->pull(weightsync::Destination::contiguous(buffer->data(), buffer->size()), pull);
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  for (const auto& t : layout.tensors()) {
    INFO("tensor at " << t.offset << " of version " << pulled->version);
    CHECK(wstest::find_mismatch(static_cast<char*>(buffer->data()) + t.offset, t.bytes, pulled->version,
                                t.offset) == -1);
  }
  return pulled->version;
}

// Polls /readyz until its status is `code` and its body contains `text`;
// fails the test (and returns the last reply) if that does not come.
wstest::HttpReply await_ready(Daemon& d, int code, const std::string& text,
                              std::chrono::seconds limit = 10s) {
  const auto start = Clock::now();
  wstest::HttpReply r;
  while (Clock::now() - start < limit) {
    r = d.probe("/readyz");
    if (r.ok && r.status == code && r.body.find(text) != std::string::npos) return r;
    std::this_thread::sleep_for(50ms);
  }
  INFO("/readyz answered " << r.status << ": " << r.body << " (" << r.error << ")");
  CHECK(r.status == code);
  CHECK(r.body.find(text) != std::string::npos);
  return r;
}

}  // namespace

TEST_CASE("relay daemon: forwards versions from a publisher to tcp and shm subscribers bit-exact",
          "[relayd]") {
  auto upstream = start_upstream(kSize);
  auto daemon = start_daemon(
      {"--upstream", upstream.address, "--listen", "127.0.0.1:0", "--summary-seconds", "0.2"}, false);
  const std::string address = daemon.serving_address();
  for (std::uint64_t v = 1; v <= 2; ++v) {
    upstream.publish();
    REQUIRE(daemon.wait_for("forwarded version " + std::to_string(v)).has_value());
    CHECK(pull_bit_exact(address, "tcp", v - 1) == v);
    CHECK(pull_bit_exact(address, "shm", v - 1) == v);
  }
  // The periodic summary line.
  auto summary = daemon.wait_for("summary: version 2, 2 forwarded", 5s);
  REQUIRE(summary.has_value());
  CHECK(summary->find("upstream " + upstream.address) != std::string::npos);
}

TEST_CASE("relay daemon: /readyz is 503 before the first version and 200 after, /livez 200", "[relayd]") {
  // No upstream yet: alive, not ready, and it says why.
  const std::uint16_t port = free_port();
  const std::string later = "127.0.0.1:" + std::to_string(port);
  auto daemon = start_daemon({"--upstream", later});
  REQUIRE(daemon.wait_for("no upstream reachable").has_value());
  auto live = daemon.probe("/livez");
  CHECK(live.status == 200);
  auto ready = await_ready(daemon, 503, "no upstream reachable yet");
  CHECK(daemon.probe("/other").status == 404);
  // The upstream appears without a version: connected, still not ready.
  auto upstream = start_upstream(kSize, port);
  REQUIRE(daemon.wait_for("connected to upstream", 15s).has_value());
  ready = await_ready(daemon, 503, "waiting for the first version");
  upstream.publish();
  ready = await_ready(daemon, 200, "serving version 1");
  CHECK(ready.status == 200);
  CHECK(daemon.probe("/livez").status == 200);
}

TEST_CASE("relay daemon: fails over from a dead first upstream, then to a restarted one, and /readyz says so",
          "[relayd]") {
  const std::uint16_t dead = free_port();
  const std::uint16_t first_port = free_port();
  const std::uint16_t second_port = free_port();
  auto first = start_upstream(kSize, first_port);
  const std::string list = "127.0.0.1:" + std::to_string(dead) + ",127.0.0.1:" + std::to_string(first_port) +
                           ",127.0.0.1:" + std::to_string(second_port);
  auto daemon = start_daemon({"--upstream", list});
  const std::string address = daemon.serving_address();
  first.publish();
  auto ready = await_ready(daemon, 200, "upstream 127.0.0.1:" + std::to_string(first_port));
  INFO(ready.body);
  REQUIRE(ready.status == 200);
  // The serving upstream dies: the daemon keeps serving version 1 and says the upstream is lost.
  first.process.signal(SIGKILL);
  REQUIRE(daemon.wait_for("upstream lost").has_value());
  ready = await_ready(daemon, 200, "upstream lost");
  INFO(ready.body);
  CHECK(ready.status == 200);
  CHECK(ready.body.find("upstream lost") != std::string::npos);
  CHECK(ready.body.find("serving version 1") != std::string::npos);
  CHECK(pull_bit_exact(address, "tcp", 0) == 1);
  // Another starts at the third address and publishes version 2: the daemon moves on.
  auto second = start_upstream(kSize, second_port, 2);
  second.publish();
  REQUIRE(daemon.wait_for("forwarded version 2", 20s).has_value());
  ready = await_ready(daemon, 200, "serving version 2");
  INFO(ready.body);
  CHECK(ready.body.find("upstream 127.0.0.1:" + std::to_string(second_port)) != std::string::npos);
  CHECK(pull_bit_exact(address, "tcp", 1) == 2);
}

TEST_CASE("relay daemon: a hostile health client is dropped in time and holds back no probe or pull",
          "[relayd]") {
  auto upstream = start_upstream(kSize);
  auto daemon = start_daemon({"--upstream", upstream.address});
  const std::string address = daemon.serving_address();
  upstream.publish();
  REQUIRE(await_ready(daemon, 200, "serving version 1").status == 200);
  const std::string host = "127.0.0.1";
  const std::uint16_t port = wstest::port_of(daemon.health);
  // Eight silent connections (twice the server's threads: a silent one holds
  // none) and one that sends garbage.
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(wstest::open_idle_connection(host, port, 2s));
  const int garbage = wstest::open_idle_connection(host, port, 2s);
  const std::string junk = "\x16\x03\x01\xff GARBAGE /../../etc \r\n\r\n";
  REQUIRE(::send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(junk.size()));
  // Probes and pulls go on meanwhile.
  const auto t0 = Clock::now();
  CHECK(daemon.probe("/readyz").status == 200);
  CHECK(since(t0) < 1.0);
  CHECK(pull_bit_exact(address, "tcp", 0) == 1);
  // The server drops every one of them within its request timeout (2 s) and a margin.
  const auto t1 = Clock::now();
  for (int fd : idle) {
    REQUIRE(fd >= 0);
    timeval tv{6, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    CHECK(n <= 0);
    ::close(fd);
  }
  CHECK(since(t1) < 4.0);
  char reply[64] = {};
  timeval tv{3, 0};
  ::setsockopt(garbage, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const ssize_t n = ::recv(garbage, reply, sizeof(reply) - 1, 0);
  CHECK((n <= 0 || std::string(reply).find(" 200 ") == std::string::npos));
  ::close(garbage);
  CHECK(daemon.probe("/livez").status == 200);
}

TEST_CASE(
    "relay daemon: SIGTERM exits 0 within 3 s while a subscriber pulls, which gets an error, not a hang",
    "[relayd]") {
  auto upstream = start_upstream(64u << 20);
  auto daemon = start_daemon({"--upstream", upstream.address}, false);
  const std::string address = daemon.serving_address();
  upstream.publish();
  REQUIRE(daemon.wait_for("forwarded version 1").has_value());
  auto leaf = wsutil::ChildProcess::spawn(
      {WS_TEST_PEER_PATH, "subscribe", "--address", address, "--transport", "tcp", "--slow-ms", "200"});
  REQUIRE(leaf.wait_for("PROGRESS", 10s).has_value());
  const auto t0 = Clock::now();
  daemon.process.signal(SIGTERM);
  REQUIRE(daemon.wait_for("stopping on SIGTERM", 3s).has_value());
  REQUIRE(daemon.wait_for("stopped after 1 versions", 3s).has_value());
  const auto rc = daemon.process.wait(3s);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(since(t0) < 3.0);
  // The pulling leaf learns the source is gone (no hang, no torn delivery).
  auto line = leaf.read_line(5s);
  REQUIRE(line.has_value());
  CHECK(line->rfind("ERROR", 0) == 0);
  CHECK(since(t0) < 6.0);
}

TEST_CASE("relay daemon: bad flags and addresses exit 2 with a message saying what to do", "[relayd]") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::uint16_t taken_port = free_port();
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(taken_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(taken, 1) == 0);
  const std::string in_use = "127.0.0.1:" + std::to_string(taken_port);
  char secret_path[] = "/tmp/ws-relayd-secret-XXXXXX";
  const int secret_fd = ::mkstemp(secret_path);
  REQUIRE(secret_fd >= 0);
  REQUIRE(::write(secret_fd, "hunter2\n", 8) == 8);
  ::close(secret_fd);
  REQUIRE(::chmod(secret_path, 0644) == 0);
  const std::vector<Case> cases = {
      {{"--upstream", "a:1", "--secret-file", secret_path}, "readable by others; chmod 600"},
      {{}, "no upstream: give --upstream"},
      {{"--upstream", "trainer"}, "expected HOST:PORT"},
      {{"--upstream", "trainer:99999"}, "port 0..65535"},
      {{"--upstream", "a:1", "--listen", "example.org:7001"}, "numeric IPv4 address or localhost"},
      {{"--upstream", "a:1", "--secret", "hunter2"}, "visible to every user"},
      {{"--upstream", "a:1", "--listen", in_use}, "pick another port"},
      {{"--upstream", "a:1", "--health-address", in_use}, "pick another port"},
      {{"--upstream", "a:1", "--secret-file", "/nonexistent/secret"}, "No such file"},
      {{"--upstream", "a:1", "--slots", "1"}, "--slots"},
      {{"--upstream", "a:1", "--no-such-flag"}, "--no-such-flag"},
  };
  for (const auto& c : cases) {
    std::string command = "exec " + std::string(WS_RELAY_DAEMON_PATH);
    for (const auto& arg : c.args) command += " '" + arg + "'";
    command += " 2>&1";
    INFO(command);
    auto p = wsutil::ChildProcess::spawn({"/bin/sh", "-c", command});
    std::string all;
    while (auto line = p.read_line(5s)) all += *line + "\n";
    INFO(all);
    const auto rc = p.wait(5s);
    REQUIRE(rc.has_value());
    CHECK(*rc == 2);
    CHECK(all.find(c.says) != std::string::npos);
    CHECK(all.find("hunter2") == std::string::npos);
  }
  ::close(taken);
  ::unlink(secret_path);
}

TEST_CASE("relay daemon: --metrics-address serves the relay's metrics, or is refused in a build without them",
          "[relayd]") {
  auto upstream = start_upstream(kSize);
  if (!weightsync::metrics_available()) {
    auto p = wsutil::ChildProcess::spawn({"/bin/sh", "-c",
                                          "exec " + std::string(WS_RELAY_DAEMON_PATH) + " --upstream " +
                                              upstream.address + " --metrics-address 127.0.0.1:0 2>&1"});
    std::string all;
    while (auto line = p.read_line(5s)) all += *line + "\n";
    INFO(all);
    CHECK(p.wait(5s) == 2);
    CHECK(all.find("no /metrics endpoint") != std::string::npos);
    return;
  }
  auto daemon = start_daemon({"--upstream", upstream.address, "--metrics-address", "127.0.0.1:0"}, false);
  auto line = daemon.wait_for("metrics on http://");
  REQUIRE(line.has_value());
  const std::string metrics = line->substr(0, line->find('/'));
  daemon.serving_address();
  upstream.publish();
  REQUIRE(daemon.wait_for("forwarded version 1").has_value());
  auto scrape = wstest::http_get("127.0.0.1", wstest::port_of(metrics), "/metrics", 3s);
  REQUIRE(scrape.status == 200);
  CHECK(scrape.body.find("weightsync_relay_latest_version{source=\"relay\"} 1") != std::string::npos);
  CHECK(scrape.body.find("weightsync_relay_upstream_connected{source=\"relay\"} 1") != std::string::npos);
}

TEST_CASE("relay daemon: WEIGHTSYNC_RELAY_* variables configure it and a flag wins over its variable",
          "[relayd]") {
  auto upstream = start_upstream(kSize);
  const std::uint16_t port = free_port();
  {
    // Variables only.
    auto daemon = start_daemon(
        {}, false,
        {"WEIGHTSYNC_RELAY_UPSTREAMS=127.0.0.1:1," + upstream.address,
         "WEIGHTSYNC_RELAY_LISTEN=127.0.0.1:" + std::to_string(port), "WEIGHTSYNC_RELAY_SLOTS=4"});
    auto start = daemon.wait_for("weightsync-relay ");
    REQUIRE(start.has_value());
    CHECK(start->find("4 slots") != std::string::npos);
    CHECK(daemon.serving_address() == "127.0.0.1:" + std::to_string(port));
  }
  {
    // The flags win: the variable's upstream is dead, its port taken by nobody.
    auto daemon = start_daemon(
        {"--upstream", upstream.address, "--listen", "127.0.0.1:0", "--slots", "2"}, false,
        {"WEIGHTSYNC_RELAY_UPSTREAMS=127.0.0.1:1",
         "WEIGHTSYNC_RELAY_LISTEN=127.0.0.1:" + std::to_string(port), "WEIGHTSYNC_RELAY_SLOTS=9"});
    auto start = daemon.wait_for("weightsync-relay ");
    REQUIRE(start.has_value());
    CHECK(start->find("2 slots") != std::string::npos);
    auto connected = daemon.wait_for("connected to upstream ");
    REQUIRE(connected.has_value());
    CHECK(connected->rfind(upstream.address + ";", 0) == 0);
    CHECK(connected->find("serving on 127.0.0.1:" + std::to_string(port) + " ") == std::string::npos);
  }
}
