// http_server.h: the HTTP side of the /metrics endpoint, over libmicrohttpd.
//
// prometheus-cpp's own server (civetweb 1.15, Debian's) starts its threads
// with a fixed 100 KiB stack. A process whose libraries need more static TLS
// than that (libtorch's dependencies: 114 KiB in the trainer) cannot start
// them: pthread_create fails with EINVAL and the endpoint with "null context".
// libmicrohttpd takes the system's default stack, and serves every
// connection from a fixed pool of event-driven threads, so an idle
// connection holds no thread at all.
//
// Contract
// - start() binds `bind` and serves GET /metrics with what `body()` returns
//   (text/plain; version=0.0.4), 404 for any other path, 405 for any other
//   method; one request per connection ("Connection: close").
// - Bounds: `options.threads` threads serve every connection; at most
//   options.threads + options.queue connections are open at once (more are
//   accepted and closed at once); a connection silent for
//   options.request_timeout, rounded up to whole seconds, is closed; a
//   request's headers may take at most 16 KiB.
// - body() runs on the server's threads, one call per request, and must not
//   throw (SourceCollector catches).
// - Errors: start() returns kInvalidConfig when the address cannot be bound
//   (in use, or not this host's), saying so. The destructor stops the
//   server and joins its threads (promptly).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "metrics/endpoint_address.h"
#include "weightsync/metrics.h"
#include "weightsync/status.h"

struct MHD_Daemon;

namespace weightsync::detail {

class MetricsHttpServer {
 public:
  using Body = std::function<std::string()>;

  static Result<std::unique_ptr<MetricsHttpServer>> start(const MetricsBind& bind, const MetricsOptions& options,
                                                          Body body);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  explicit MetricsHttpServer(Body body) : body_(std::move(body)) {}

  Body body_;
  MHD_Daemon* daemon_ = nullptr;
  std::uint16_t port_ = 0;
};

}  // namespace weightsync::detail
