// The fanout bench's raw TCP stream roles (protocol in fanout.h): the
// one-pull floor, S bytes from host 0 to host 1 over one plain TCP connection
// (default socket buffers, 4 MiB send()s from a pre-faulted buffer into a
// pre-faulted buffer of S bytes: the same copies as a tcp pull, no protocol).
// The time is the receiver's last byte minus the sender's first send(), both
// CLOCK_MONOTONIC.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "fanout.h"
#include "line_stream.h"
#include "role_loop.h"
#include "role_support.h"

namespace wsbench {
namespace {

constexpr std::size_t kChunk = 4u << 20;

bool parse_address(const std::string& text, sockaddr_in* out) {
  const auto colon = text.rfind(':');
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  const std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  out->sin_port =
      htons(colon == std::string::npos ? 0 : static_cast<std::uint16_t>(std::stoi(text.substr(colon + 1))));
  return ::inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1;
}

// Every socket call is bounded: 60 s without progress is an error.
void set_timeouts(int fd) {
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// The receiving end: a listener, the one connection it accepts on the first
// RECV, and a pre-faulted buffer, like a pull's destination.
class StreamReceiver {
 public:
  StreamReceiver() = default;
  StreamReceiver(const StreamReceiver&) = delete;
  StreamReceiver& operator=(const StreamReceiver&) = delete;
  ~StreamReceiver() {
    if (fd_ >= 0) ::close(fd_);
    if (listener_ >= 0) ::close(listener_);
  }

  // Listens on `bind` (port 0: any); *address: the host:port bound.
  bool listen(const std::string& bind, std::string* address, std::string* error) {
    sockaddr_in at{};
    if (!parse_address(bind, &at)) {
      *error = "bad address " + bind;
      return false;
    }
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t length = sizeof(at);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0 ||
        ::listen(listener_, 1) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&at), &length) != 0) {
      *error = "listen on " + bind + ": " + std::strerror(errno);
      return false;
    }
    char host[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &at.sin_addr, host, sizeof(host));
    *address = std::string(host) + ":" + std::to_string(ntohs(at.sin_port));
    return true;
  }

  // RECV <bytes> -> RECEIVED <end_ns>
  std::string receive(std::istringstream& in) {
    std::uint64_t bytes = 0;
    in >> bytes;
    if (buffer_.size() < bytes) buffer_.assign(bytes, 0);  // pre-faulted, like a pull's destination
    if (fd_ < 0) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 60000) == 1) fd_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd_ >= 0) set_timeouts(fd_);
    }
    std::uint64_t got = 0;
    while (fd_ >= 0 && got < bytes) {
      const ssize_t n = ::recv(fd_, buffer_.data() + got, bytes - got, 0);
      if (n <= 0 && !(n < 0 && errno == EINTR)) break;
      if (n > 0) got += static_cast<std::uint64_t>(n);
    }
    const std::int64_t end_ns = monotonic_ns();
    return got == bytes ? "RECEIVED " + std::to_string(end_ns)
                        : error_line("received " + std::to_string(got) + " of " + std::to_string(bytes) +
                                     " bytes (" + std::strerror(errno) + ")");
  }

 private:
  int listener_ = -1;
  int fd_ = -1;
  std::vector<char> buffer_;
};

// The sending end: one connection to the receiver and the buffer it sends from.
class StreamSender {
 public:
  StreamSender() = default;
  StreamSender(const StreamSender&) = delete;
  StreamSender& operator=(const StreamSender&) = delete;
  ~StreamSender() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool connect(const std::string& peer, std::string* error) {
    sockaddr_in address{};
    if (!parse_address(peer, &address)) {
      *error = "bad address " + peer;
      return false;
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      *error = "socket: " + std::string(std::strerror(errno));
      return false;
    }
    set_timeouts(fd_);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      *error = "connect to " + peer + ": " + std::strerror(errno);
      return false;
    }
    return true;
  }

  // SEND <bytes> -> SENT <start_ns>
  std::string send(std::istringstream& in) {
    std::uint64_t bytes = 0;
    in >> bytes;
    if (buffer_.size() < bytes) buffer_.assign(bytes, 0x5a);
    const std::int64_t start_ns = monotonic_ns();
    std::uint64_t sent = 0;
    while (sent < bytes) {
      const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, bytes - sent));
      const ssize_t n = ::send(fd_, buffer_.data() + sent, piece, MSG_NOSIGNAL);
      if (n <= 0 && !(n < 0 && errno == EINTR)) break;
      if (n > 0) sent += static_cast<std::uint64_t>(n);
    }
    return sent == bytes ? "SENT " + std::to_string(start_ns)
                         : error_line("sent " + std::to_string(sent) + " of " + std::to_string(bytes) +
                                      " bytes (" + std::strerror(errno) + ")");
  }

 private:
  int fd_ = -1;
  std::vector<char> buffer_;
};

// READY, then the commands until QUIT or the driver is gone. These two roles
// exit 0 once they have said READY, whether or not the driver stayed to read
// their answers (as they always have); 1 if READY itself cannot be written.
int serve(RoleLoop& loop, const std::string& ready) {
  if (!loop.send(ready)) return 1;
  loop.on("CPU", [](std::istringstream&) { return cpu_line(); });
  (void)loop.run();
  return 0;
}

}  // namespace

int run_fanout_stream_receiver(const std::string& bind) {
  wsutil::LineStream io(0, 1);
  StreamReceiver receiver;
  std::string address, error;
  if (!receiver.listen(bind, &address, &error)) return startup_error(io, error);
  RoleLoop loop(io);
  loop.on("RECV", [&](std::istringstream& in) { return receiver.receive(in); });
  return serve(loop, "READY " + address);
}

int run_fanout_stream_sender(const std::string& peer) {
  wsutil::LineStream io(0, 1);
  StreamSender sender;
  std::string error;
  if (!sender.connect(peer, &error)) return startup_error(io, error);
  RoleLoop loop(io);
  loop.on("SEND", [&](std::istringstream& in) { return sender.send(in); });
  return serve(loop, "READY");
}

}  // namespace wsbench
