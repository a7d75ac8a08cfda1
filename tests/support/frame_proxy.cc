// FrameProxy over plain sockets: one thread per direction per connection.
#include "frame_proxy.h"

#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>

namespace wstest {

using weightsync::detail::MsgType;

std::vector<std::uint8_t> frame_bytes(MsgType type, const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out(weightsync::detail::kFrameHeaderBytes);
  weightsync::detail::encode_header(type, static_cast<std::uint32_t>(payload.size()), out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

struct FrameProxy::Link {
  int client = -1;
  int server = -1;
  std::atomic<bool> intercept{false};  // the next server frame goes to rewrite
};

namespace {

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads exactly n bytes, first from `pending` (bytes already read), then fd.
bool read_exact(int fd, std::vector<std::uint8_t>& pending, std::uint8_t* out, std::size_t n) {
  const std::size_t from_pending = std::min(n, pending.size());
  if (from_pending > 0) std::memcpy(out, pending.data(), from_pending);  // never memcpy from an empty vector's null
  pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(from_pending));
  std::size_t got = from_pending;
  while (got < n) {
    ssize_t r = ::read(fd, out + got, n - got);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

// The payload length of a frame header (no checks: the proxy trusts neither side, it just forwards).
std::uint32_t payload_length(const std::uint8_t* header) {
  auto h = weightsync::detail::decode_header(header, 1u << 30);
  return h.ok() ? h->payload_bytes : 0;
}

}  // namespace

FrameProxy::FrameProxy(std::uint16_t target_port, MsgType trigger, Rewrite rewrite)
    : target_port_(target_port), trigger_(trigger), rewrite_(std::move(rewrite)) {
  listen_fd_ = listen_loopback(64, &port_, "frame proxy");
  acceptor_ = std::thread([this] { accept_loop(); });
}

FrameProxy::~FrameProxy() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& link : links_) {
      ::shutdown(link->client, SHUT_RDWR);
      ::shutdown(link->server, SHUT_RDWR);
    }
  }
  for (auto& t : pumps_) t.join();
  for (auto& link : links_) {
    ::close(link->client);
    ::close(link->server);
  }
  ::close(listen_fd_);
}

void FrameProxy::accept_loop() {
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
    const int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto link = std::make_unique<Link>();
    link->client = client;
    link->server = server;
    Link* raw = link.get();
    std::lock_guard<std::mutex> lock(mu_);
    links_.push_back(std::move(link));
    pumps_.emplace_back([this, raw] { client_to_server(raw); });
    pumps_.emplace_back([this, raw] { server_to_client(raw); });
  }
}

void FrameProxy::client_to_server(Link* link) {
  std::vector<std::uint8_t> none;
  std::uint8_t header[weightsync::detail::kFrameHeaderBytes];
  std::vector<std::uint8_t> payload;
  for (;;) {
    if (!read_exact(link->client, none, header, sizeof(header))) break;
    payload.resize(payload_length(header));
    if (!read_exact(link->client, none, payload.data(), payload.size())) break;
    auto h = weightsync::detail::decode_header(header, 1u << 30);
    // Set before the request reaches the server, so before its reply exists.
    if (h.ok() && h->type == trigger_) link->intercept = true;
    // One write per frame (with TCP_NODELAY): no Nagle wait between header and payload.
    std::vector<std::uint8_t> frame(header, header + sizeof(header));
    frame.insert(frame.end(), payload.begin(), payload.end());
    if (!write_all(link->server, frame.data(), frame.size())) break;
  }
  ::shutdown(link->server, SHUT_WR);
}

void FrameProxy::server_to_client(Link* link) {
  std::vector<std::uint8_t> pending;
  std::vector<std::uint8_t> chunk(1 << 16);
  for (;;) {
    if (link->intercept.exchange(false)) {
      std::uint8_t header[weightsync::detail::kFrameHeaderBytes];
      if (!read_exact(link->server, pending, header, sizeof(header))) break;
      std::vector<std::uint8_t> payload(payload_length(header));
      if (!read_exact(link->server, pending, payload.data(), payload.size())) break;
      auto h = weightsync::detail::decode_header(header, 1u << 30);
      const ReadMore more = [&](std::size_t n) {
        std::vector<std::uint8_t> bytes(n);
        if (!read_exact(link->server, pending, bytes.data(), n)) bytes.clear();
        return bytes;
      };
      std::vector<std::uint8_t> out = rewrite_(h.ok() ? h->type : MsgType::kError, payload, more);
      rewrites_.fetch_add(1);
      if (!write_all(link->client, out.data(), out.size())) break;
      continue;
    }
    if (!pending.empty()) {
      if (!write_all(link->client, pending.data(), pending.size())) break;
      pending.clear();
      continue;
    }
    pollfd p{link->server, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) {
      if (stopping_) break;
      continue;
    }
    ssize_t n = ::read(link->server, chunk.data(), chunk.size());
    if (n <= 0) break;
    // A reply to an intercepted request may start in this chunk: the flag was
    // set before the request left, so check it before forwarding.
    pending.assign(chunk.begin(), chunk.begin() + n);
  }
  ::shutdown(link->client, SHUT_WR);
}

}  // namespace wstest
