// bind_check.cc: bind-and-close check of a listen address (bind_check.h).
#include "bind_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace wsrelay {

weightsync::Status check_bindable(const std::string& ipv4, std::uint16_t port, const std::string& flag) {
  using weightsync::ErrorCode;
  using weightsync::Status;
  if (port == 0) return Status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) {
    return Status(ErrorCode::kInvalidArgument, flag + " " + ipv4 + ": not a numeric IPv4 address");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(ErrorCode::kInternal, flag + ": socket(): " + std::strerror(errno));
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  if (rc == 0) return Status();
  std::string what = flag + " " + ipv4 + ":" + std::to_string(port) + ": " + std::strerror(err);
  if (err == EADDRINUSE) what += ": pick another port or stop the process that holds it (ss -ltnp)";
  if (err == EADDRNOTAVAIL) what += ": no interface of this host has that address";
  if (err == EACCES) what += ": ports below 1024 need privileges; pick a higher one";
  return Status(ErrorCode::kInvalidConfig, what);
}

}  // namespace wsrelay
