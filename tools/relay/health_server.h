// health_server.h: HTTP liveness and readiness for a supervisor
// (Kubernetes probes, a load balancer, curl in a script): GET /livez and
// GET /readyz over civetweb.
//
// Contract
// - start() binds `address` ("HOST:PORT", ":PORT" or "PORT"; no host means
//   127.0.0.1; port 0 picks a free one) and serves until destroyed. Each
//   probe calls `report` (from a server thread) and answers 200 or 503 with
//   a one-line text/plain reason; any other path is 404, any other method
//   405. Nothing else is served (no files).
// - Bounded: at most kThreads requests are served at once, kQueue accepted
//   connections wait for a thread (then the kernel's backlog), and a client
//   that is silent, slow or sends garbage is dropped after kRequestTimeout
//   (civetweb's request_timeout_ms); keep-alive is off. A held server never
//   holds back the relay: its threads are not the relay's.
// - Errors: start() returns kInvalidArgument for an address it cannot parse,
//   kInvalidConfig when it cannot bind (in use: the message says so). No
//   exception leaves this type.
// - Threads: `report` must be thread-safe. The destructor stops the server
//   and joins its threads (civetweb: up to about 2 s).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "weightsync/status.h"

struct mg_context;
struct mg_connection;

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

 private:
  HealthServer() = default;
  static int handle(mg_connection* conn, void* self);
  std::function<HealthReport()> report_;
  mg_context* ctx_ = nullptr;
  std::string address_;
};

}  // namespace wsrelay
