// health_server.cc: /livez and /readyz over civetweb (health_server.h).
#include "health_server.h"

#include <civetweb.h>

#include <cstring>
#include <string>

#include "bind_check.h"
#include "relay_config.h"

namespace wsrelay {

using weightsync::ErrorCode;
using weightsync::Result;
using weightsync::Status;

namespace {

void reply(mg_connection* conn, int code, const std::string& text) {
  const std::string body = text + "\n";
  const char* phrase = code == 200   ? "OK"
                       : code == 503 ? "Service Unavailable"
                       : code == 404 ? "Not Found"
                                     : "Method Not Allowed";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, phrase, body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

int HealthServer::handle(mg_connection* conn, void* self) try {
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string uri = info->local_uri ? info->local_uri : "";
  const std::string method = info->request_method ? info->request_method : "";
  if (uri != "/livez" && uri != "/readyz") {
    reply(conn, 404, "not found: GET /livez or /readyz");
    return 404;
  }
  if (method != "GET" && method != "HEAD") {
    reply(conn, 405, "only GET");
    return 405;
  }
  const HealthReport report = static_cast<HealthServer*>(self)->report_();
  const Probe& probe = uri == "/livez" ? report.live : report.ready;
  const int code = probe.ok ? 200 : 503;
  reply(conn, code, probe.reason);
  return code;
} catch (...) {
  reply(conn, 503, "internal error");
  return 503;
}

Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& address,
                                                          std::function<HealthReport()> report) try {
  auto hp = parse_host_port(address, "--health-address");
  if (!hp.ok()) return hp.status();
  std::string host = hp->host.empty() || hp->host == "localhost" ? "127.0.0.1" : hp->host;
  if (!bindable_host(host)) {
    return Status(ErrorCode::kInvalidArgument,
                  "--health-address '" + address + "': the host must be a numeric IPv4 address");
  }
  if (Status s = check_bindable(host, hp->port, "--health-address"); !s.ok()) return s;
  std::unique_ptr<HealthServer> server(new HealthServer());
  server->report_ = std::move(report);
  const std::string ports = host + ":" + std::to_string(hp->port);
  const std::string threads = std::to_string(kThreads);
  const std::string queue = std::to_string(kQueue);
  const std::string timeout = std::to_string(kRequestTimeout.count());
  const char* options[] = {"listening_ports",
                           ports.c_str(),
                           "num_threads",
                           threads.c_str(),
                           "connection_queue",
                           queue.c_str(),
                           "request_timeout_ms",
                           timeout.c_str(),
                           "enable_keep_alive",
                           "no",
                           nullptr};
  mg_callbacks callbacks{};
  server->ctx_ = mg_start(&callbacks, nullptr, options);
  if (server->ctx_ == nullptr) {
    return Status(ErrorCode::kInvalidConfig,
                  "--health-address " + ports + ": civetweb could not serve there (is the port in use?)");
  }
  mg_set_request_handler(server->ctx_, "/", &HealthServer::handle, server.get());
  mg_server_port bound[2]{};
  const int n = mg_get_server_ports(server->ctx_, 2, bound);
  server->address_ = host + ":" + std::to_string(n > 0 ? bound[0].port : hp->port);
  return server;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("health server: ") + e.what());
}

HealthServer::~HealthServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace wsrelay
