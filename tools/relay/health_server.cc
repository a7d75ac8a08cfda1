// health_server.cc: /livez and /readyz over libmicrohttpd (health_server.h).
#include "health_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "bind_check.h"
#include "relay_config.h"

namespace wsrelay {

using weightsync::ErrorCode;
using weightsync::Result;
using weightsync::Status;

namespace {

constexpr std::size_t kRequestMemory = 16 << 10;

MHD_Result reply(MHD_Connection* connection, unsigned int status, const std::string& line) {
  const std::string text = line + "\n";
  MHD_Response* response =
      MHD_create_response_from_buffer(text.size(), const_cast<char*>(text.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: the connection is closed
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result on_request(void* self, MHD_Connection* connection, const char* url, const char* method,
                      const char* /*version*/, const char* /*upload_data*/, std::size_t* upload_data_size,
                      void** /*request_state*/) {
  try {
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
      if (upload_data_size != nullptr && *upload_data_size != 0) *upload_data_size = 0;  // discard a body
      return reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET");
    }
    const bool live = std::strcmp(url, "/livez") == 0;
    if (!live && std::strcmp(url, "/readyz") != 0) {
      return reply(connection, MHD_HTTP_NOT_FOUND, "not found: GET /livez or /readyz");
    }
    const HealthReport report = static_cast<const HealthServer*>(self)->report();
    const Probe& probe = live ? report.live : report.ready;
    return reply(connection, probe.ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, probe.reason);
  } catch (...) {
    return MHD_NO;  // closes the connection
  }
}

}  // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& address,
                                                          std::function<HealthReport()> report) try {
  auto hp = parse_host_port(address, "--health-address");
  if (!hp.ok()) return hp.status();
  const std::string host = hp->host.empty() || hp->host == "localhost" ? "127.0.0.1" : hp->host;
  sockaddr_in bind{};
  bind.sin_family = AF_INET;
  bind.sin_port = htons(hp->port);
  if (::inet_pton(AF_INET, host.c_str(), &bind.sin_addr) != 1) {
    return Status(ErrorCode::kInvalidArgument,
                  "--health-address '" + address + "': the host must be a numeric IPv4 address");
  }
  if (Status s = check_bindable(host, hp->port, "--health-address"); !s.ok()) return s;
  std::unique_ptr<HealthServer> server(new HealthServer());
  server->report_ = std::move(report);
  const unsigned int timeout_s = static_cast<unsigned int>((kRequestTimeout.count() + 999) / 1000);
  errno = 0;
  server->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, hp->port, nullptr, nullptr, &on_request,
      server.get(),                                                               //
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&bind),                   //
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(kThreads),           //
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(kThreads + kQueue),  //
      MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,                                   //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kRequestMemory,                         //
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    const int error = errno;
    return Status(ErrorCode::kInvalidConfig,
                  "--health-address " + host + ":" + std::to_string(hp->port) + ": cannot serve there" +
                      (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) +
                      " (is the port in use? pick another port)");
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->address_ = host + ":" + std::to_string(info != nullptr && info->port != 0 ? info->port : hp->port);
  return server;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("health server: ") + e.what());
}

HealthServer::~HealthServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace wsrelay
