// TCP sockets with poll(2) deadlines.
#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "net/record_layer.h"

namespace weightsync::detail {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

Status lost(const char* peer, const std::string& what) {
  return Status(ErrorCode::kConnectionLost, std::string(peer) + " " + what);
}

Status timed_out(const char* peer, const char* doing) {
  return Status(ErrorCode::kTimeout,
                std::string("timed out ") + doing + " " + peer +
                    " (peer stalled or overloaded; raise WEIGHTSYNC_TIMEOUT_MS if it is just slow)");
}

// Waits for `events` on fd. OK when ready; kTimeout; kConnectionLost on error.
Status poll_for(int fd, short events, Deadline deadline, const char* peer, const char* doing) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.poll_millis());
    if (rc > 0) {
      if ((p.revents & POLLNVAL) != 0) return lost(peer, "connection is closed");
      return Status();  // POLLERR/POLLHUP surface on the next send/recv call
    }
    if (rc == 0) return timed_out(peer, doing);
    if (errno != EINTR) return lost(peer, "poll failed: " + errno_text(errno));
  }
}

bool would_block(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

// Drops `n` consumed bytes from the front of an iovec array.
void advance(iovec*& iov, std::size_t& count, std::size_t n) {
  while (n > 0 && count > 0) {
    if (n >= iov->iov_len) {
      n -= iov->iov_len;
      ++iov;
      --count;
    } else {
      iov->iov_base = static_cast<char*>(iov->iov_base) + n;
      iov->iov_len -= n;
      n = 0;
    }
  }
  while (count > 0 && iov->iov_len == 0) {
    ++iov;
    --count;
  }
}

}  // namespace

Socket::Socket() noexcept = default;
Socket::Socket(int fd) noexcept : fd_(fd) {}
Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), records_(std::move(other.records_)) {
  other.fd_ = -1;
}
Socket::~Socket() {
  close();
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
    records_ = std::move(other.records_);
  }
  return *this;
}

void Socket::enable_records(std::unique_ptr<RecordLayer> records) noexcept {
  records_ = std::move(records);
}

bool Socket::has_pending_input() const noexcept {
  return records_ != nullptr && records_->has_pending();
}

void Socket::shutdown_both() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  records_.reset();
}

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(const std::string& address) {
  auto bad = [&](const char* why) {
    return Status(ErrorCode::kInvalidArgument,
                  "bad publisher address '" + address + "': " + why + " (expected host:port)");
  };
  HostPort out;
  std::string port_text;
  if (!address.empty() && address.front() == '[') {
    auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return bad("unterminated [ipv6] host");
    }
    out.host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    auto colon = address.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    out.host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  if (out.host.empty()) return bad("empty host");
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return bad("port is not a number");
  }
  unsigned long port = std::stoul(port_text);
  if (port == 0 || port > 65535) return bad("port out of range");
  out.port = static_cast<std::uint16_t>(port);
  return out;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

Result<Socket> connect_tcp(const HostPort& target, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(target.port);
  int gai = ::getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found);
  if (gai != 0) {
    return Status(ErrorCode::kConnectionLost,
                  "cannot resolve publisher host '" + target.host + "': " + ::gai_strerror(gai));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!s.valid()) {
      last_error = errno_text(errno);
      continue;
    }
    int rc = ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      int prc;
      do {
        prc = ::poll(&p, 1, deadline.poll_millis());
      } while (prc < 0 && errno == EINTR);
      if (prc == 0) {
        ::freeaddrinfo(found);
        return Status(ErrorCode::kTimeout, "timed out connecting to publisher at " + target.to_string() +
                                               " (is it running and reachable?)");
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      last_error = errno_text(errno);
      continue;
    }
    // Back to blocking mode: every I/O call below passes MSG_DONTWAIT itself.
    int flags = ::fcntl(s.fd(), F_GETFL);
    ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
    set_nodelay_keepalive(s);
    ::freeaddrinfo(found);
    return s;
  }
  ::freeaddrinfo(found);
  return Status(ErrorCode::kConnectionLost, "cannot connect to publisher at " + target.to_string() + ": " +
                                                last_error +
                                                " (is the publisher running, and is the port right?)");
}

Result<Socket> listen_tcp(const std::string& bind_host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  int gai = ::getaddrinfo(bind_host.c_str(), port_text.c_str(), &hints, &found);
  if (gai != 0) {
    return Status(ErrorCode::kInvalidConfig,
                  "bind address '" + bind_host + "' is not a numeric IP address: " + ::gai_strerror(gai));
  }
  Socket s(::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol));
  if (!s.valid()) {
    ::freeaddrinfo(found);
    return Status(ErrorCode::kInvalidConfig, "socket() failed: " + errno_text(errno));
  }
  int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), found->ai_addr, found->ai_addrlen) != 0 || ::listen(s.fd(), 128) != 0) {
    int err = errno;
    ::freeaddrinfo(found);
    return Status(ErrorCode::kInvalidConfig,
                  "cannot listen on " + bind_host + ":" + port_text + ": " + errno_text(err));
  }
  ::freeaddrinfo(found);
  return s;
}

Result<std::uint16_t> local_port(const Socket& socket) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status(ErrorCode::kInternal, "getsockname failed: " + errno_text(errno));
  }
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

Result<Socket> accept_tcp(const Socket& listener, Deadline deadline, std::string* peer_out) {
  Status ready = poll_for(listener.fd(), POLLIN, deadline, "listener", "waiting for a connection on");
  if (!ready.ok()) return ready;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  Socket s(::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC));
  if (!s.valid()) {
    if (would_block(errno) || errno == ECONNABORTED || errno == EINTR) {
      return Status(ErrorCode::kTimeout, "no connection to accept");
    }
    return Status(ErrorCode::kConnectionLost, "accept failed: " + errno_text(errno));
  }
  if (peer_out != nullptr) {
    char host[INET6_ADDRSTRLEN] = "?";
    std::uint16_t port = 0;
    if (addr.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
      port = ntohs(in6->sin6_port);
    }
    *peer_out = HostPort{host, port}.to_string();
  }
  set_nodelay_keepalive(s);
  return s;
}

void set_nodelay_keepalive(const Socket& socket) {
  int one = 1;
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

void set_liveness_options(const Socket& socket, int user_timeout_ms) {
  int one = 1, idle_s = 30, interval_s = 10, probes = 3;
  unsigned int user_timeout = static_cast<unsigned int>(std::max(user_timeout_ms, 1000));
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

Status wait_readable(const Socket& socket, Deadline deadline, const char* peer) {
  if (socket.has_pending_input()) return Status();
  return poll_for(socket.fd(), POLLIN, deadline, peer, "waiting for");
}

Status send_all(const Socket& socket, const void* data, std::size_t bytes, Deadline deadline,
                const char* peer) {
  iovec one{const_cast<void*>(data), bytes};
  return send_iov(socket, &one, 1, deadline, peer);
}

namespace {

// Sends iov[0..count) as they are (no records).
Status send_raw_iov(const Socket& socket, iovec* iov, std::size_t count, Deadline deadline, const char* peer,
                    int stall_ms) {
  advance(iov, count, 0);
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = std::min<std::size_t>(count, IOV_MAX);
    ssize_t n = ::sendmsg(socket.fd(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      advance(iov, count, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && would_block(errno)) {
      Deadline wait = deadline;
      if (stall_ms > 0) {
        Deadline stall = Deadline::after(std::chrono::milliseconds(stall_ms));
        if (deadline.is_never() || stall.poll_millis() < deadline.poll_millis()) wait = stall;
      }
      Status s = poll_for(socket.fd(), POLLOUT, wait, peer, "sending to");
      if (!s.ok()) return s;
      continue;
    }
    return lost(peer, "connection failed while sending: " + errno_text(errno));
  }
  return Status();
}

// Up to 64 records (1 MiB of plaintext) are sealed, then sent, at a time.
constexpr std::size_t kSealBatch = 64 * kMaxRecordPlaintext;

Status send_records(const Socket& socket, iovec* iov, std::size_t count, Deadline deadline, const char* peer,
                    int stall_ms) {
  RecordLayer& records = *socket.records();
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) total += iov[i].iov_len;
  std::vector<std::uint8_t> sealed;
  sealed.reserve(std::min(total, kSealBatch) + 64 * (kRecordHeaderBytes + 1 + kRecordTagBytes) + 64);
  advance(iov, count, 0);
  while (total > 0) {
    const std::size_t batch = std::min(total, kSealBatch);
    sealed.clear();
    Status s = records.seal(iov, count, batch, sealed);
    if (!s.ok()) return s;
    advance(iov, count, batch);
    total -= batch;
    iovec out{sealed.data(), sealed.size()};
    s = send_raw_iov(socket, &out, 1, deadline, peer, stall_ms);
    if (!s.ok()) return s;
  }
  return Status();
}

// SO_RCVLOWAT for the waits of one recv_iov: raised to min(wake_bytes,
// bytes left) before each wait, back to 1 (every later poll, such as a
// frame's, wakes on its first byte) when it goes out of scope.
class ReceiveLowat {
 public:
  ReceiveLowat(int fd, std::size_t wake_bytes) : fd_(fd), limit_(std::min<std::size_t>(wake_bytes, INT_MAX)) {}
  ~ReceiveLowat() {
    if (current_ > 1) set(1);
  }
  ReceiveLowat(const ReceiveLowat&) = delete;
  ReceiveLowat& operator=(const ReceiveLowat&) = delete;

  void before_wait(std::size_t left) {
    const int want = static_cast<int>(std::max<std::size_t>(std::min(left, limit_), 1));
    if (want != current_) set(want);
  }
  bool raised() const noexcept { return current_ > 1; }

 private:
  void set(int value) {
    if (::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &value, sizeof(value)) == 0) current_ = value;
  }
  int fd_;
  std::size_t limit_;
  int current_ = 1;
};

// Bytes queued for reading on a TCP socket (0 when unknown).
int queued_bytes(int fd) {
  int n = 0;
  return ::ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

}  // namespace

Status send_iov(const Socket& socket, iovec* iov, std::size_t count, Deadline deadline, const char* peer,
                int stall_ms) {
  if (socket.encrypted()) return send_records(socket, iov, count, deadline, peer, stall_ms);
  return send_raw_iov(socket, iov, count, deadline, peer, stall_ms);
}

Status recv_all(const Socket& socket, void* data, std::size_t bytes, Deadline deadline, const char* peer) {
  auto* p = static_cast<char*>(data);
  if (RecordLayer* records = socket.records()) {
    while (bytes > 0) {
      auto n = records->read_some(socket.fd(), p, bytes, peer);
      if (!n.ok()) return n.status();
      p += *n;
      bytes -= *n;
      if (*n > 0 || bytes == 0) continue;
      Status s = poll_for(socket.fd(), POLLIN, deadline, peer, "receiving from");
      if (!s.ok()) return s;
    }
    return Status();
  }
  while (bytes > 0) {
    ssize_t n = ::recv(socket.fd(), p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return lost(peer, "closed the connection");
    if (would_block(errno)) {
      Status s = poll_for(socket.fd(), POLLIN, deadline, peer, "receiving from");
      if (!s.ok()) return s;
      continue;
    }
    return lost(peer, "connection failed while receiving: " + errno_text(errno));
  }
  return Status();
}

Status recv_iov(const Socket& socket, iovec* iov, std::size_t count, int stall_ms, const char* peer,
                const std::function<void(const void*, std::size_t)>& on_bytes, std::size_t wake_bytes) {
  advance(iov, count, 0);
  if (RecordLayer* records = socket.records()) {
    while (count > 0) {
      auto n = records->read_some(socket.fd(), iov->iov_base, iov->iov_len, peer);
      if (!n.ok()) return n.status();
      if (*n > 0) {
        if (on_bytes) on_bytes(iov->iov_base, *n);
        advance(iov, count, *n);
        continue;
      }
      Status s = poll_for(socket.fd(), POLLIN, Deadline::after(std::chrono::milliseconds(stall_ms)), peer,
                          "receiving data from");
      if (!s.ok()) return s;
    }
    return Status();
  }
  std::size_t remaining = 0;
  for (std::size_t i = 0; i < count; ++i) remaining += iov[i].iov_len;
  ReceiveLowat lowat(socket.fd(), wake_bytes);
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = std::min<std::size_t>(count, IOV_MAX);
    ssize_t n = ::recvmsg(socket.fd(), &msg, MSG_DONTWAIT);
    if (n > 0) {
      std::size_t left = static_cast<std::size_t>(n);
      for (std::size_t i = 0; left > 0; ++i) {
        std::size_t piece = std::min(left, iov[i].iov_len);
        if (on_bytes) on_bytes(iov[i].iov_base, piece);
        left -= piece;
      }
      advance(iov, count, static_cast<std::size_t>(n));
      remaining -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return lost(peer, "closed the connection in the middle of a transfer");
    if (would_block(errno)) {
      if (wake_bytes > 1) lowat.before_wait(remaining);
      Status s = poll_for(socket.fd(), POLLIN, Deadline::after(std::chrono::milliseconds(stall_ms)), peer,
                          "receiving data from");
      // Fewer bytes than the mark arrived within stall_ms: progress, not a stall.
      if (!s.ok() && !(s.code() == ErrorCode::kTimeout && lowat.raised() && queued_bytes(socket.fd()) > 0)) {
        return s;
      }
      continue;
    }
    return lost(peer, "connection failed while receiving data: " + errno_text(errno));
  }
  return Status();
}

}  // namespace weightsync::detail
