// Peer uids from the kernel: SO_PEERCRED and NETLINK_SOCK_DIAG (inet_diag).
#include "net/peer_identity.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/deadline.h"

namespace weightsync::detail {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// One end of a TCP connection; a v4-mapped IPv6 address is kept as IPv4, so
// both spellings of the same endpoint compare equal.
struct Endpoint {
  int family = AF_UNSPEC;
  std::uint8_t addr[16] = {};  // 4 bytes used for AF_INET (network order)
  std::uint16_t port_be = 0;   // network order

  bool operator==(const Endpoint& o) const {
    const std::size_t n = family == AF_INET ? 4 : 16;
    return family == o.family && port_be == o.port_be && std::memcmp(addr, o.addr, n) == 0;
  }
  bool loopback() const {
    if (family == AF_INET) return addr[0] == 127;
    static const std::uint8_t kV6Loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return family == AF_INET6 && std::memcmp(addr, kV6Loopback, 16) == 0;
  }
  std::string to_string() const {
    char host[INET6_ADDRSTRLEN] = "?";
    ::inet_ntop(family, addr, host, sizeof(host));
    return HostPort{host, ntohs(port_be)}.to_string();
  }
};

// From a raw address of `family` (16 bytes for AF_INET6, 4 for AF_INET).
Endpoint make_endpoint(int family, const void* addr, std::uint16_t port_be) {
  Endpoint e;
  e.port_be = port_be;
  const auto* a = static_cast<const std::uint8_t*>(addr);
  static const std::uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (family == AF_INET6 && std::memcmp(a, kMappedPrefix, 12) == 0) {
    e.family = AF_INET;
    std::memcpy(e.addr, a + 12, 4);
  } else if (family == AF_INET6) {
    e.family = AF_INET6;
    std::memcpy(e.addr, a, 16);
  } else {
    e.family = AF_INET;
    std::memcpy(e.addr, a, 4);
  }
  return e;
}

// getsockname (local) or getpeername (peer) of a TCP socket.
Result<Endpoint> tcp_endpoint(const Socket& socket, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int rc = peer ? ::getpeername(socket.fd(), reinterpret_cast<sockaddr*>(&ss), &len)
                : ::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) {
    const int err = errno;
    return Status(err == ENOTCONN || err == ENOTSOCK || err == EBADF ? ErrorCode::kInvalidArgument
                                                                     : ErrorCode::kInternal,
                  std::string("peer uid: cannot read the connection's ") + (peer ? "peer" : "local") +
                      " address: " + errno_text(err));
  }
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    return make_endpoint(AF_INET, &in->sin_addr, in->sin_port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    return make_endpoint(AF_INET6, &in6->sin6_addr, in6->sin6_port);
  }
  return Status(ErrorCode::kInvalidArgument, "peer uid: the socket is not a TCP/IP socket (address family " +
                                                 std::to_string(ss.ss_family) + ")");
}

// TCP states (include/net/tcp_states.h) of a full socket, whose uid is the
// creator's. TIME_WAIT and NEW_SYN_RECV entries are mini sockets that the
// kernel reports with uid 0, and LISTEN/CLOSE are not the peer of a
// connection: none of them identifies a peer.
bool state_has_owner(std::uint8_t state) {
  switch (state) {
    case 1:   // ESTABLISHED
    case 2:   // SYN_SENT
    case 3:   // SYN_RECV (a full socket, e.g. TCP Fast Open)
    case 4:   // FIN_WAIT1
    case 5:   // FIN_WAIT2
    case 8:   // CLOSE_WAIT
    case 9:   // LAST_ACK
    case 11:  // CLOSING
      return true;
    default: return false;
  }
}

// Outcome of one exact inet_diag lookup.
struct DiagAnswer {
  bool found = false;
  std::uint8_t state = 0;
  uid_t uid = 0;
};

// Asks the kernel for the TCP socket whose local end is `self` and whose
// remote end is `other`. found == false when the kernel has none (ENOENT).
Result<DiagAnswer> diag_lookup(const Endpoint& self, const Endpoint& other, Deadline deadline) {
  Socket nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_SOCK_DIAG));
  if (!nl.valid()) {
    return Status(ErrorCode::kInternal,
                  "peer uid: cannot open a NETLINK_SOCK_DIAG socket: " + errno_text(errno));
  }
  static std::atomic<std::uint32_t> next_seq{1};
  const std::uint32_t seq = next_seq.fetch_add(1);

  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } request{};
  request.nlh.nlmsg_len = sizeof(request);
  request.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.nlh.nlmsg_flags = NLM_F_REQUEST;
  request.nlh.nlmsg_seq = seq;
  request.req.sdiag_family = static_cast<std::uint8_t>(self.family);
  request.req.sdiag_protocol = IPPROTO_TCP;
  request.req.idiag_states = ~0U;
  request.req.id.idiag_sport = self.port_be;
  request.req.id.idiag_dport = other.port_be;
  std::memcpy(request.req.id.idiag_src, self.addr, self.family == AF_INET ? 4 : 16);
  std::memcpy(request.req.id.idiag_dst, other.addr, other.family == AF_INET ? 4 : 16);
  request.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.fd(), &request, sizeof(request), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) != static_cast<ssize_t>(sizeof(request))) {
    return Status(ErrorCode::kInternal, "peer uid: cannot send the inet_diag request: " + errno_text(errno));
  }

  alignas(nlmsghdr) char buffer[8192];
  for (;;) {
    pollfd p{nl.fd(), POLLIN, 0};
    const int ready = ::poll(&p, 1, deadline.poll_millis());
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0)
      return Status(ErrorCode::kInternal, "peer uid: poll on netlink failed: " + errno_text(errno));
    if (ready == 0) {
      return Status(ErrorCode::kInternal,
                    "peer uid: the kernel did not answer the inet_diag request within " +
                        std::to_string(kPeerLookupTimeoutMs) + " ms");
    }
    sockaddr_nl from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = ::recvfrom(nl.fd(), buffer, sizeof(buffer), MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n < 0) {
      return Status(ErrorCode::kInternal, "peer uid: cannot read the inet_diag reply: " + errno_text(errno));
    }
    if (from.nl_pid != 0) continue;  // only the kernel answers
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) {
          return Status(ErrorCode::kInternal, "peer uid: truncated netlink error from the kernel");
        }
        const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        if (err->error == 0) continue;  // an acknowledgement, not an answer
        if (err->error == -ENOENT) return DiagAnswer{};
        return Status(ErrorCode::kInternal,
                      "peer uid: the kernel refused the inet_diag lookup: " + errno_text(-err->error));
      }
      if (h->nlmsg_type == NLMSG_DONE) return DiagAnswer{};
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
        return Status(ErrorCode::kInternal, "peer uid: unexpected netlink message type " +
                                                std::to_string(h->nlmsg_type) + " in the inet_diag reply");
      }
      const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      const Endpoint got_self = make_endpoint(msg->idiag_family, msg->id.idiag_src, msg->id.idiag_sport);
      const Endpoint got_other = make_endpoint(msg->idiag_family, msg->id.idiag_dst, msg->id.idiag_dport);
      // The exact lookup falls back to a listener on self's port when no
      // connection matches; such a reply names another socket.
      if (!(got_self == self) || !(got_other == other)) return DiagAnswer{};
      return DiagAnswer{true, msg->idiag_state, static_cast<uid_t>(msg->idiag_uid)};
    }
  }
}

}  // namespace

Result<uid_t> unix_peer_uid(const Socket& socket) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "peer uid: cannot read the socket's address: " + errno_text(errno));
  }
  if (ss.ss_family != AF_UNIX) {
    return Status(ErrorCode::kInvalidArgument, "peer uid: SO_PEERCRED asked of a socket that is not AF_UNIX");
  }
  ucred cred{};
  socklen_t cred_len = sizeof(cred);
  if (::getsockopt(socket.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) {
    const int err = errno;
    return Status(err == ENOTCONN ? ErrorCode::kInvalidArgument : ErrorCode::kInternal,
                  "peer uid: SO_PEERCRED failed: " + errno_text(err));
  }
  if (cred_len < sizeof(cred) || cred.uid == static_cast<uid_t>(-1)) {
    return Status(ErrorCode::kAuthFailed, "peer uid: the local peer carries no credentials");
  }
  return cred.uid;
}

Result<uid_t> tcp_loopback_peer_uid(const Socket& socket) {
  auto local = tcp_endpoint(socket, /*peer=*/false);
  if (!local.ok()) return local.status();
  auto peer = tcp_endpoint(socket, /*peer=*/true);
  if (!peer.ok()) return peer.status();
  if (!peer->loopback()) {
    return Status(
        ErrorCode::kAuthFailed,
        "peer uid: " + peer->to_string() + " is not a loopback address, so its owner cannot be known here");
  }
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(kPeerLookupTimeoutMs));
  // The peer's socket: its local end is our peer, its remote end is us.
  auto answer = diag_lookup(*peer, *local, deadline);
  if (!answer.ok()) return answer.status();
  if (!answer->found) {
    // The kernel answers ENOENT both when no socket matches and when it has no
    // TCP diag handler (tcp_diag not loaded). Our own end exists for sure: if
    // it is not found either, the lookup itself does not work here.
    auto own = diag_lookup(*local, *peer, deadline);
    if (!own.ok()) return own.status();
    if (!own->found) {
      return Status(ErrorCode::kInternal,
                    "peer uid: the kernel's inet_diag cannot find this connection's own socket "
                    "(tcp_diag module not available?)");
    }
    return Status(ErrorCode::kAuthFailed, "peer uid: no socket on this host owns " + peer->to_string() +
                                              " (the peer closed, or it is in another network namespace)");
  }
  if (!state_has_owner(answer->state)) {
    return Status(ErrorCode::kAuthFailed, "peer uid: the socket of " + peer->to_string() +
                                              " is no longer open (TCP state " +
                                              std::to_string(answer->state) + ")");
  }
  return answer->uid;
}

Result<uid_t> peer_uid(const Socket& socket, bool is_unix) {
  return is_unix ? unix_peer_uid(socket) : tcp_loopback_peer_uid(socket);
}

bool same_uid_as_me(uid_t uid) noexcept {
  return uid == ::geteuid();
}

}  // namespace weightsync::detail
