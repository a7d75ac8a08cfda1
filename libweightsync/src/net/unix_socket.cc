// Abstract Unix sockets and SCM_RIGHTS descriptor passing.
#include "net/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace weightsync::detail {
namespace {

constexpr std::size_t kMaxFds = kMaxPassedFds;

Result<sockaddr_un> abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr.sun_path)) {
    return Status(ErrorCode::kInvalidArgument, "bad abstract socket name");
  }
  addr.sun_path[0] = '\0';
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

Status wait_for(int fd, short events, Deadline deadline, const char* peer) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.poll_millis());
    if (rc > 0) return Status();
    if (rc == 0) return Status(ErrorCode::kTimeout, std::string("timed out waiting for ") + peer);
    if (errno != EINTR)
      return Status(ErrorCode::kConnectionLost, std::string("poll failed: ") + std::strerror(errno));
  }
}

}  // namespace

Result<Socket> listen_unix_abstract(const std::string& name) {
  socklen_t len = 0;
  auto addr = abstract_address(name, &len);
  if (!addr.ok()) return addr.status();
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid())
    return Status(ErrorCode::kInvalidConfig, std::string("socket(AF_UNIX) failed: ") + std::strerror(errno));
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&*addr), len) != 0 || ::listen(s.fd(), 64) != 0) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("cannot listen on an abstract Unix socket: ") + std::strerror(errno));
  }
  return s;
}

Result<Socket> connect_unix_abstract(const std::string& name, Deadline deadline) {
  socklen_t len = 0;
  auto addr = abstract_address(name, &len);
  if (!addr.ok()) return addr.status();
  Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid())
    return Status(ErrorCode::kConnectionLost, std::string("socket(AF_UNIX) failed: ") + std::strerror(errno));
  // Connecting to a listening Unix socket completes at once or fails at once
  // (ECONNREFUSED for a missing name, EAGAIN for a full backlog).
  for (;;) {
    if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&*addr), len) == 0) return s;
    if (errno == EAGAIN && !deadline.expired()) {
      ::usleep(1000);
      continue;
    }
    return Status(ErrorCode::kConnectionLost,
                  std::string("cannot connect to the publisher's local socket: ") + std::strerror(errno) +
                      " (is the publisher on this host and in this network namespace?)");
  }
}

Result<Socket> accept_unix(const Socket& listener) {
  Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!s.valid()) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return Status(ErrorCode::kTimeout, "no connection to accept");
    }
    return Status(ErrorCode::kConnectionLost,
                  std::string("accept on the local socket failed: ") + std::strerror(errno));
  }
  return s;
}

Status send_fds(const Socket& socket, const std::vector<int>& fds, Deadline deadline, const char* peer) {
  if (fds.empty() || fds.size() > kMaxFds)
    return Status(ErrorCode::kInternal, "bad descriptor count to send");
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  char marker = 'F';
  iovec iov{&marker, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  for (;;) {
    ssize_t n = ::sendmsg(socket.fd(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == 1) return Status();
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      Status s = wait_for(socket.fd(), POLLOUT, deadline, peer);
      if (!s.ok()) return s;
      continue;
    }
    return Status(ErrorCode::kConnectionLost,
                  std::string("sending descriptors to ") + peer + " failed: " + std::strerror(errno));
  }
}

Result<std::vector<int>> recv_fds(const Socket& socket, std::size_t count, Deadline deadline,
                                  const char* peer) {
  if (count == 0 || count > kMaxFds) return Status(ErrorCode::kProtocolError, "bad descriptor count");
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxFds));
  char marker = 0;
  iovec iov{&marker, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n;
  for (;;) {
    n = ::recvmsg(socket.fd(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n >= 0) break;
    if (errno != EAGAIN && errno != EINTR) {
      return Status(ErrorCode::kConnectionLost,
                    std::string("receiving descriptors from ") + peer + " failed: " + std::strerror(errno));
    }
    Status s = wait_for(socket.fd(), POLLIN, deadline, peer);
    if (!s.ok()) return s;
  }
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const auto* data = reinterpret_cast<const int*>(CMSG_DATA(c));
      fds.insert(fds.end(), data, data + k);
    }
  }
  const bool ok = n == 1 && (msg.msg_flags & MSG_CTRUNC) == 0 && fds.size() == count;
  if (!ok) {
    for (int fd : fds) ::close(fd);
    return Status(ErrorCode::kProtocolError, std::string(peer) + " sent " + std::to_string(fds.size()) +
                                                 " descriptors, expected " + std::to_string(count));
  }
  return fds;
}

}  // namespace weightsync::detail
