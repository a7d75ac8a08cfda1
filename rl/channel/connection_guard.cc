// channel/connection_guard.cc: see connection_guard.h.
#include "channel/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "net/peer_identity.h"
#include "net/socket.h"

namespace channel {
namespace {

// The raw sockaddr of one end of `fd`'s connection ("" when it has none).
std::string end_of(int fd, bool peer) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (rc != 0) return "";
  return std::string(reinterpret_cast<const char*>(&address), std::min<std::size_t>(length, sizeof address));
}

// The local TCP port of `fd` as decimal text ("" when it is not a TCP socket).
std::string local_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  if (address.ss_family == AF_INET)
    return std::to_string(ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port));
  if (address.ss_family == AF_INET6)
    return std::to_string(ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port));
  return "";
}

bool loopback_ip(const std::string& ip) {
  return ip.rfind("127.", 0) == 0 || ip == "::1" || ip.rfind("::ffff:127.", 0) == 0;
}

}  // namespace

zorplex::Result<bool> loopback_peer_is_me(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return zorplex::Error{std::string("cannot look at the connection: ") + std::strerror(errno)};
  const weightsync::detail::Socket socket(copy);  // closes the copy, never `fd`
  auto uid = weightsync::detail::tcp_loopback_peer_uid(socket);
  if (!uid.ok()) return zorplex::Error{uid.status().message()};
  return weightsync::detail::same_uid_as_me(uid.value());
}

ConnectionGuard::ConnectionGuard(zmq::context_t& context, std::string client_public_key)
    : zap_(context, zmq::socket_type::rep),
      monitor_(context, zmq::socket_type::pair),
      client_key_(std::move(client_public_key)) {}

zorplex::Result<std::unique_ptr<ConnectionGuard>> ConnectionGuard::start(
    zmq::context_t& context, const std::string& client_public_key, const std::string& monitor_endpoint) try {
  std::unique_ptr<ConnectionGuard> guard(new ConnectionGuard(context, client_public_key));
  guard->zap_.set(zmq::sockopt::linger, 0);
  guard->zap_.bind("inproc://zeromq.zap.01");
  guard->monitor_.set(zmq::sockopt::linger, 0);
  guard->monitor_.connect(monitor_endpoint);
  ConnectionGuard* raw = guard.get();
  guard->thread_ = std::thread([raw] { raw->run(); });
  return guard;
} catch (const zmq::error_t& e) {
  return zorplex::Error{std::string("trajectory channel: cannot start the connection guard: ") + e.what()};
}

ConnectionGuard::~ConnectionGuard() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  zap_.close();
  monitor_.close();
}

std::string ConnectionGuard::last_refusal() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_refusal_;
}

void ConnectionGuard::refuse(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_refusal_ = why;
  }
  refused_.fetch_add(1);
}

void ConnectionGuard::run() {
  // Runs until the destructor asks it to stop (checked every 100 ms).
  while (!stop_.load()) {
    try {
      zmq::pollitem_t items[2] = {{zap_.handle(), 0, ZMQ_POLLIN, 0}, {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(100));
      if (items[1].revents & ZMQ_POLLIN) drain_monitor();
      if (items[0].revents & ZMQ_POLLIN) handle_zap();
    } catch (const zmq::error_t& e) {
      refuse(std::string("the connection guard stopped (every handshake now times out): ") + e.what());
      return;
    }
  }
}

void ConnectionGuard::drain_monitor() {
  for (int i = 0; i < 10000; ++i) {
    zmq::message_t event;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) return;
    std::string endpoint;  // the event's second frame: our end's address, tcp://IP:PORT
    for (int part = 0; part < 8 && event.more(); ++part) {
      zmq::message_t rest;
      if (!monitor_.recv(rest, zmq::recv_flags::dontwait)) break;
      if (part == 0) endpoint = rest.to_string();
      if (!rest.more()) break;
    }
    if (event.size() < 6) continue;
    std::uint16_t id = 0;
    std::uint32_t value = 0;
    std::memcpy(&id, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    const int fd = static_cast<int>(value);
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      refuse(client_key_.empty() ? "a failed handshake (the peer speaks CURVE: a secret on its side only?)"
                                 : "a failed handshake (a wrong secret, or none, on the peer's side?)");
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && !client_key_.empty()) {
      // The peer hung up mid-handshake: mostly one that saw our CURVE greeting
      // without a secret of its own. (Without a secret, cut connections end so.)
      refuse("a handshake the peer abandoned (no secret on its side?)");
    } else if (id == ZMQ_EVENT_ACCEPTED && client_key_.empty()) {
      // Closed already and the number reused by another socket of this
      // process (not on our port): that connection is gone, nothing to cut.
      if (local_port(fd) != endpoint.substr(endpoint.rfind(':') + 1)) continue;
      auto me = loopback_peer_is_me(fd);
      if (me.ok() && me.value()) continue;
      cut_.push_back({fd, end_of(fd, false), end_of(fd, true)});
      ::shutdown(fd, SHUT_RDWR);
      refuse(me.ok() ? "a connection from another user (without a secret only this uid may connect)"
                     : "a connection whose owner the kernel could not name: " + me.error().message);
    } else if (id == ZMQ_EVENT_DISCONNECTED || id == ZMQ_EVENT_CLOSED) {
      cut_.erase(std::remove_if(cut_.begin(), cut_.end(), [fd](const Cut& c) { return c.fd == fd; }),
                 cut_.end());
    }
  }
}

void ConnectionGuard::handle_zap() {
  std::vector<zmq::message_t> frames;
  for (int i = 0; i < 16; ++i) {
    zmq::message_t frame;
    if (!zap_.recv(frame, zmq::recv_flags::dontwait)) break;
    const bool more = frame.more();
    frames.push_back(std::move(frame));
    if (!more) break;
  }
  if (frames.empty()) return;
  bool admitted = false;
  std::string why = "a malformed ZAP request";
  if (frames.size() >= 6) {
    const std::string address = frames[3].to_string();
    const std::string mechanism = frames[5].to_string();
    if (!client_key_.empty()) {
      admitted = mechanism == "CURVE" && frames.size() >= 7 && frames[6].size() == client_key_.size() &&
                 CRYPTO_memcmp(frames[6].data(), client_key_.data(), client_key_.size()) == 0;
      why = "a peer without this secret's CURVE key (wrong or missing secret on that generator?)";
    } else {
      drain_monitor();  // the requester's ACCEPTED event came before its request
      // A cut connection is forgotten once its descriptor carries another connection.
      cut_.erase(std::remove_if(cut_.begin(), cut_.end(),
                                [](const Cut& c) {
                                  const std::string local = end_of(c.fd, false), peer = end_of(c.fd, true);
                                  return !local.empty() && !peer.empty() &&
                                         (local != c.local || peer != c.peer);
                                }),
                 cut_.end());
      admitted = mechanism == "NULL" && loopback_ip(address) && cut_.empty();
      why = !loopback_ip(address)
                ? "a peer at " + address + " (without a secret only loopback peers may connect)"
                : "a handshake while a connection of another user is open";
    }
  }
  {  // REP must answer every request, even one it cannot read
    zmq::message_t request_id;
    if (frames.size() >= 2) request_id.copy(frames[1]);
    zap_.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
    zap_.send(request_id, zmq::send_flags::sndmore);
    zap_.send(admitted ? zmq::str_buffer("200") : zmq::str_buffer("400"), zmq::send_flags::sndmore);
    zap_.send(admitted ? zmq::str_buffer("OK") : zmq::str_buffer("refused"), zmq::send_flags::sndmore);
    zap_.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    zap_.send(zmq::str_buffer(""), zmq::send_flags::none);
  }
  if (!admitted) refuse(why);
}

}  // namespace channel
