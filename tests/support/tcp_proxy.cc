// FaultyProxy over plain sockets: one thread per direction per connection.
#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace wstest {

int listen_loopback(int backlog, std::uint16_t* port, const char* who) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, backlog) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(std::string(who) + ": cannot listen on 127.0.0.1");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

FaultyProxy::FaultyProxy(std::uint16_t target_port, int connection, std::uint64_t offset, std::uint8_t mask)
    : target_port_(target_port), corrupt_connection_(connection), corrupt_offset_(offset), mask_(mask) {
  listen_fd_ = listen_loopback(16, &port_, "proxy");
  acceptor_ = std::thread([this] { accept_loop(); });
}

FaultyProxy::~FaultyProxy() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : pumps_) t.join();
  for (int fd : fds_) ::close(fd);
  ::close(listen_fd_);
}

void FaultyProxy::accept_loop() {
  int accepted = 0;
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(target_port_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(client);
      ::close(server);
      continue;
    }
    ++accepted;
    const bool corrupt = accepted == corrupt_connection_;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(client);
    fds_.push_back(server);
    pumps_.emplace_back([this, client, server] { pump(client, server, false); });
    pumps_.emplace_back([this, client, server, corrupt] { pump(server, client, corrupt); });
  }
}

std::vector<std::uint8_t> FaultyProxy::seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seen_;
}

void FaultyProxy::pump(int from, int to, bool corrupt) {
  std::vector<char> buffer(1 << 16);
  std::uint64_t position = 0;
  for (;;) {
    ssize_t n = ::read(from, buffer.data(), buffer.size());
    if (n <= 0) break;
    if (corrupt && corrupt_offset_ >= position &&
        corrupt_offset_ < position + static_cast<std::uint64_t>(n)) {
      buffer[corrupt_offset_ - position] ^= mask_;
      flips_.fetch_add(1);
    }
    position += static_cast<std::uint64_t>(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.insert(seen_.end(), buffer.data(), buffer.data() + n);
    }
    for (ssize_t sent = 0; sent < n;) {
      ssize_t m = ::send(to, buffer.data() + sent, static_cast<std::size_t>(n - sent), MSG_NOSIGNAL);
      if (m <= 0) {
        ::shutdown(from, SHUT_RDWR);
        return;
      }
      sent += m;
    }
  }
  ::shutdown(to, SHUT_WR);
}

}  // namespace wstest
