// ws_test_relay: a Relay in its own process, for the multi-process tests and
// the conformance cases run "via relay".
//
//   ws_test_relay --upstream A[,B...] [--secret S] [--pipelined 0|1]
//                 [--timeout-ms T] [--slots N] [--chunk-bytes B] [--transport T]
//                 [--spawn PROGRAM ARGS...]
//     Connects to the first reachable upstream, prints "ADDRESS host:port"
//     (what subscribers connect to), then forwards and serves until stdin
//     closes. Each newer version it holds is printed as "PUBLISHED v" (the
//     same line ws_test_peer prints: "version v is served at ADDRESS"). On a
//     create() error it prints "ERROR <status>" and exits 1.
//
//     --spawn (last option; the rest of the command line is the upstream's
//     command, e.g. `ws_test_peer publish --size ... --step`; its --slots is
//     the relay's too unless the relay is given its own): the relay first
//     starts that publisher as its own child, waits for its "ADDRESS" and puts
//     it first in the upstream list. Then it is a drop-in stand-in for the
//     peer publisher: lines read on stdin ("next") go to the child; the
//     child's "PUBLISHED v" is printed once the relay itself holds v; its
//     other lines are echoed. When the relay dies (SIGKILL) the child's stdin
//     closes and it exits; SIGSTOP stalls the relay only (conformance "via relay").
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "child_process.h"
#include "weightsync/weightsync.h"

namespace {

std::string arg(const std::vector<std::string>& args, const std::string& name, const std::string& fallback) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == name) return args[i + 1];
  }
  return fallback;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Reads stdin without blocking longer than timeout_ms: complete lines are
// appended to *lines; false once stdin is closed (EOF) or broken.
bool read_stdin(int timeout_ms, std::string* pending, std::vector<std::string>* lines) {
  pollfd p{0, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return true;
  char buf[512];
  const ssize_t n = ::read(0, buf, sizeof(buf));
  if (n <= 0) return false;
  pending->append(buf, static_cast<std::size_t>(n));
  for (std::size_t nl; (nl = pending->find('\n')) != std::string::npos;) {
    lines->push_back(pending->substr(0, nl));
    pending->erase(0, nl + 1);
  }
  return true;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> spawn;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--spawn") {
      spawn.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      args.resize(i);
      break;
    }
  }
  weightsync::RelayOptions options;
  options.upstreams = split(arg(args, "--upstream", ""));
  const std::string secret = arg(args, "--secret", "");
  if (!secret.empty()) {
    options.subscriber.secret = secret;
    options.publisher.secret = secret;
  }
  options.pipelined = arg(args, "--pipelined", "1") != "0";
  const int timeout_ms = std::atoi(arg(args, "--timeout-ms", "5000").c_str());
  options.subscriber.io_timeout_ms = timeout_ms;
  options.subscriber.connect_timeout_ms = timeout_ms;
  options.publisher.io_timeout_ms = timeout_ms;
  // --spawn: the relay's ring mirrors the spawned publisher's (--slots), unless given.
  options.publisher.slots =
      static_cast<std::size_t>(std::atoi(arg(args, "--slots", arg(spawn, "--slots", "3")).c_str()));
  options.chunk_bytes = std::strtoull(arg(args, "--chunk-bytes", std::to_string(4u << 20)).c_str(), nullptr, 10);
  const std::string transport = arg(args, "--transport", "");
  if (!transport.empty()) options.subscriber.transport = transport;
  options.subscriber.client_name = "ws_test_relay";

  std::optional<wsutil::ChildProcess> upstream;
  if (!spawn.empty()) {
    upstream.emplace(wsutil::ChildProcess::spawn(spawn));
    auto address = upstream->wait_for("ADDRESS ", std::chrono::seconds(30));
    if (!address) {
      say("ERROR the spawned upstream printed no ADDRESS");
      return 1;
    }
    options.upstreams.insert(options.upstreams.begin(), *address);
  }
  auto relay = weightsync::Relay::create(options);
  if (!relay.ok()) {
    say("ERROR " + relay.status().to_string());
    return 1;
  }
  say("ADDRESS " + (*relay)->address());
  std::uint64_t printed = 0;
  std::string pending;
  std::vector<std::string> lines;
  while (read_stdin(upstream ? 5 : 20, &pending, &lines)) {
    if (!upstream) {
      const std::uint64_t latest = (*relay)->latest_version();
      if (latest > printed) {
        printed = latest;
        say("PUBLISHED " + std::to_string(latest));
      }
      continue;
    }
    for (const auto& line : lines) upstream->write_line(line);
    lines.clear();
    while (auto line = upstream->read_line(std::chrono::milliseconds(5))) {
      if (line->rfind("PUBLISHED ", 0) == 0) {
        const std::uint64_t v = std::strtoull(line->c_str() + 10, nullptr, 10);
        auto held = (*relay)->wait_for_version(v - 1, std::chrono::seconds(60));
        if (!held.ok()) {
          say("ERROR relay did not get version " + std::to_string(v) + ": " + held.status().to_string());
          continue;
        }
      }
      say(*line);
    }
  }
  if (upstream) {
    upstream->close_stdin();
    (void)upstream->wait(std::chrono::seconds(10));
  }
  return 0;
} catch (const std::exception& e) {
  say(std::string("ERROR ") + e.what());
  return 1;
}
