// The /metrics endpoint's HTTP server over libmicrohttpd (http_server.h).
#include "metrics/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

namespace weightsync::detail {
namespace {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::size_t kRequestMemory = 16 << 10;

MHD_Result reply(MHD_Connection* connection, unsigned int status, const std::string& text,
                 const char* content_type) {
  MHD_Response* response =
      MHD_create_response_from_buffer(text.size(), const_cast<char*>(text.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: the connection is closed
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url, const char* method,
                      const char* /*version*/, const char* /*upload_data*/, std::size_t* upload_data_size,
                      void** /*request_state*/) {
  auto* body = static_cast<MetricsHttpServer::Body*>(cls);
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
    if (upload_data_size != nullptr && *upload_data_size != 0) *upload_data_size = 0;  // discard a body
    return reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n", "text/plain");
  }
  if (std::strcmp(url, "/metrics") != 0) return reply(connection, MHD_HTTP_NOT_FOUND, "GET /metrics\n", "text/plain");
  return reply(connection, MHD_HTTP_OK, (*body)(), kContentType);
}

}  // namespace

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(const MetricsBind& bind,
                                                                    const MetricsOptions& options, Body body) {
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(std::move(body)));
  sockaddr_storage address{};
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  const bool v6 = bind.host.size() > 2 && bind.host.front() == '[';
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&address);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(bind.port);
    if (inet_pton(AF_INET6, bind.host.substr(1, bind.host.size() - 2).c_str(), &a->sin6_addr) != 1) {
      return Status(ErrorCode::kInvalidArgument, "metrics endpoint: not an IPv6 address: " + bind.host);
    }
    flags |= MHD_USE_IPv6;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&address);
    a->sin_family = AF_INET;
    a->sin_port = htons(bind.port);
    if (inet_pton(AF_INET, bind.host.c_str(), &a->sin_addr) != 1) {
      return Status(ErrorCode::kInvalidArgument, "metrics endpoint: not an IPv4 address: " + bind.host);
    }
  }
  const auto timeout_ms = options.request_timeout.count();
  const unsigned int timeout_s = static_cast<unsigned int>((timeout_ms + 999) / 1000);
  errno = 0;
  server->daemon_ = MHD_start_daemon(
      flags, bind.port, nullptr, nullptr, &on_request, &server->body_,                               //
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&address),                                    //
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(options.threads),                        //
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(options.threads + options.queue),        //
      MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,                                                       //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kRequestMemory,                                             //
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    const int error = errno;
    return Status(ErrorCode::kInvalidConfig,
                  "metrics endpoint: cannot serve on " + bind.listening_ports() +
                      (error != 0 ? std::string(": ") + std::strerror(error) : std::string()) +
                      " (is the port in use? pick another, or port 0 for a free one)");
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr && info->port != 0 ? info->port : bind.port;
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace weightsync::detail
