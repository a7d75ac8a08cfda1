// http_get.cc: one HTTP/1.0 GET over loopback, bounded in time.
#include "http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace wstest {
namespace {

int connect_to(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = static_cast<long>(timeout.count() / 1000);
  tv.tv_usec = static_cast<long>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

HttpReply http_get(const std::string& host, std::uint16_t port, const std::string& path,
                   std::chrono::milliseconds timeout) {
  HttpReply reply;
  const int fd = connect_to(host, port, timeout);
  if (fd < 0) {
    reply.error = std::string("connect: ") + std::strerror(errno);
    return reply;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    reply.error = std::string("send: ") + std::strerror(errno);
    ::close(fd);
    return reply;
  }
  std::string all;
  char buf[16384];
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0 || std::chrono::steady_clock::now() > deadline) {
      reply.error = n < 0 ? std::string("recv: ") + std::strerror(errno) : "timed out";
      ::close(fd);
      return reply;
    }
    all.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::size_t head_end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || all.size() < 12) {
    reply.error = "not an HTTP reply";
    return reply;
  }
  reply.status = std::atoi(all.substr(9, 3).c_str());
  reply.body = all.substr(head_end + 4);
  reply.ok = true;
  return reply;
}

int open_idle_connection(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  return connect_to(host, port, timeout);
}

std::uint16_t port_of(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return 0;
  const long p = std::atol(address.c_str() + colon + 1);
  return p > 0 && p < 65536 ? static_cast<std::uint16_t>(p) : 0;
}

}  // namespace wstest
