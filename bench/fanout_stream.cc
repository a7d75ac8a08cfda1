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

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "fanout.h"
#include "line_stream.h"
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

// Serves CPU / QUIT / unknown; returns false to exit.
bool common_command(const std::string& command, std::string* reply) {
  if (command == "CPU") {
    *reply = cpu_line();
    return true;
  }
  if (command == "QUIT") return false;
  *reply = error_line("unknown command '" + command + "'");
  return true;
}

}  // namespace

int run_fanout_stream_receiver(const std::string& bind) {
  wsutil::LineStream io(0, 1);
  sockaddr_in address{};
  if (!parse_address(bind, &address)) return io.write_line(error_line("bad address " + bind)), 1;
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof(address);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    io.write_line(error_line("listen on " + bind + ": " + std::strerror(errno)));
    return 1;
  }
  char host[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address.sin_addr, host, sizeof(host));
  if (!io.write_line("READY " + std::string(host) + ":" + std::to_string(ntohs(address.sin_port)))) return 1;
  int fd = -1;
  std::vector<char> buffer;
  for (;;) {
    auto line = io.read_line(std::chrono::hours(24));
    if (!line) break;
    std::istringstream in(*line);
    std::string command, reply;
    in >> command;
    if (command == "RECV") {
      std::uint64_t bytes = 0;
      in >> bytes;
      if (buffer.size() < bytes) buffer.assign(bytes, 0);  // pre-faulted, like a pull's destination
      if (fd < 0) {
        pollfd p{listener, POLLIN, 0};
        if (::poll(&p, 1, 60000) == 1) fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) set_timeouts(fd);
      }
      std::uint64_t got = 0;
      while (fd >= 0 && got < bytes) {
        const ssize_t n = ::recv(fd, buffer.data() + got, bytes - got, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) got += static_cast<std::uint64_t>(n);
      }
      const std::int64_t end_ns = monotonic_ns();
      reply = got == bytes ? "RECEIVED " + std::to_string(end_ns)
                           : error_line("received " + std::to_string(got) + " of " + std::to_string(bytes) +
                                        " bytes (" + std::strerror(errno) + ")");
    } else if (!common_command(command, &reply)) {
      break;
    }
    if (!io.write_line(reply)) break;
  }
  if (fd >= 0) ::close(fd);
  ::close(listener);
  return 0;
}

int run_fanout_stream_sender(const std::string& peer) {
  wsutil::LineStream io(0, 1);
  sockaddr_in address{};
  if (!parse_address(peer, &address)) return io.write_line(error_line("bad address " + peer)), 1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io.write_line(error_line("socket: " + std::string(std::strerror(errno)))), 1;
  set_timeouts(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    io.write_line(error_line("connect to " + peer + ": " + std::strerror(errno)));
    ::close(fd);
    return 1;
  }
  if (!io.write_line("READY")) return ::close(fd), 1;
  std::vector<char> buffer;
  for (;;) {
    auto line = io.read_line(std::chrono::hours(24));
    if (!line) break;
    std::istringstream in(*line);
    std::string command, reply;
    in >> command;
    if (command == "SEND") {
      std::uint64_t bytes = 0;
      in >> bytes;
      if (buffer.size() < bytes) buffer.assign(bytes, 0x5a);
      const std::int64_t start_ns = monotonic_ns();
      std::uint64_t sent = 0;
      while (sent < bytes) {
        const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, bytes - sent));
        const ssize_t n = ::send(fd, buffer.data() + sent, piece, MSG_NOSIGNAL);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) sent += static_cast<std::uint64_t>(n);
      }
      reply = sent == bytes ? "SENT " + std::to_string(start_ns)
                            : error_line("sent " + std::to_string(sent) + " of " + std::to_string(bytes) +
                                         " bytes (" + std::strerror(errno) + ")");
    } else if (!common_command(command, &reply)) {
      break;
    }
    if (!io.write_line(reply)) break;
  }
  ::close(fd);
  return 0;
}

}  // namespace wsbench
