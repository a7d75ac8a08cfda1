// health_server.h: HTTP liveness and readiness for a supervisor
// (Kubernetes probes, a load balancer, curl in a script): GET /livez and
// GET /readyz over libmicrohttpd (the HTTP server of the /metrics endpoint
// too: no second HTTP library, and an idle connection holds no thread).
//
// Contract
// - start() binds `address` ("HOST:PORT", ":PORT" or "PORT"; no host means
//   127.0.0.1; port 0 picks a free one) and serves until destroyed. Each
//   probe calls `report` (from a server thread) and answers 200 or 503 with
//   a one-line text/plain reason; any other path is 404, any other method
//   405. Nothing else is served (no files). One request per connection.
// - Bounded: kThreads event-driven threads serve every connection (a silent
//   one holds none); at most kThreads + kQueue connections are open at once
//   (more are accepted and closed at once); a connection silent for
//   kRequestTimeout (whole seconds) is closed; a request's headers may take
//   at most 16 KiB. Its threads are not the relay's: a held server never
//   holds back forwarding or pulls.
// - Errors: start() returns kInvalidArgument for an address it cannot parse,
//   kInvalidConfig when it cannot bind (in use: the message says so). No
//   exception leaves this type.
// - Threads: `report` must be thread-safe. The destructor stops the server
//   and joins its threads (promptly).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "weightsync/status.h"

struct MHD_Daemon;

namespace wsrelay {

struct Probe {
  bool ok = false;
  std::string reason;  // one line, no newline
};

struct HealthReport {
  Probe live;
  Probe ready;
};

class HealthServer {
 public:
  static constexpr int kThreads = 4;
  static constexpr int kQueue = 16;
  static constexpr std::chrono::milliseconds kRequestTimeout{2000};

  static weightsync::Result<std::unique_ptr<HealthServer>> start(const std::string& address,
                                                                 std::function<HealthReport()> report);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  // "HOST:PORT" actually bound.
  std::string address() const { return address_; }
  // What a probe answers now (the server's threads call it).
  HealthReport report() const { return report_(); }

 private:
  HealthServer() = default;

  std::function<HealthReport()> report_;
  MHD_Daemon* daemon_ = nullptr;
  std::string address_;
};

}  // namespace wsrelay
