// PublisherServer, admission: accepting connections, the handshake on the
// event loop under its budget and deadline, the role and session checks,
// refusals and closing.
#include "publisher/server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "auth/server_handshake.h"
#include "common/log.h"
#include "common/printable.h"
#include "common/random.h"
#include "net/peer_identity.h"
#include "net/unix_socket.h"
#include "publisher/control_handler.h"
#include "publisher/server_connection.h"
#include "wire/frame_assembler.h"
#include "wire/frame_io.h"

namespace weightsync::detail {

using namespace server_internal;

void PublisherServer::accept_ready(bool local, std::uint64_t tag) {
  // A named stream's local listener: any of them serves any session (what a
  // connection is handed depends on its session, not on the socket).
  Socket borrowed;
  if (tag != 0) {
    const int fd = stream_listener_fd(tag);
    if (fd < 0) return;  // removed since the event
    borrowed = Socket(::dup(fd));
    if (borrowed.fd() < 0) return;
  }
  const Socket& listener = tag != 0 ? borrowed : local ? local_listener_ : listener_;
  for (int i = 0; i < kAcceptsPerTurn && !accept_paused_; ++i) {
    std::string peer = "local";
    auto accepted = local ? accept_unix(listener)
                          : accept_tcp(listener, Deadline::after(std::chrono::milliseconds(0)), &peer);
    if (!accepted.ok()) {
      if (accepted.status().code() == ErrorCode::kTimeout) return;  // nothing more to accept
      // E.g. EMFILE: the connection stays queued and epoll keeps reporting it;
      // pause accepting briefly instead of spinning, and say why.
      if (log_allowed()) {
        WS_WARN("publisher: cannot accept a connection: {} (out of file descriptors? raise ulimit -n)",
                accepted.status().message());
      }
      accept_paused_ = true;
      accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      for (int fd : {listener_.fd(), local_listener_.fd()}) {
        if (fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      }
      set_stream_listeners_polled(false);
      return;
    }
    if (!local) set_liveness_options(*accepted, config_.io_timeout_ms);
    admit(std::move(*accepted), peer, budget_address(peer, local), local);
  }
}

void PublisherServer::admit(Socket socket, std::string peer, std::string address, bool local) {
  auto conn = std::make_unique<Connection>(config_.secret, config_.integrity, config_.encryption);
  conn->id = next_id_++;
  conn->socket = std::move(socket);
  conn->peer = std::move(peer);
  conn->local = local;
  const Clock::time_point now = Clock::now();
  conn->handshake_until = now + std::chrono::milliseconds(config_.handshake_timeout_ms);
  conn->last_activity = now;
  Connection* raw = conn.get();
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = raw->id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, raw->socket.fd(), &ev) != 0) {
    if (log_allowed()) WS_WARN("publisher: cannot watch a new connection: {}", std::strerror(errno));
    return;
  }
  connections_.emplace(raw->id, std::move(conn));
  counters_.connections_accepted.fetch_add(1);
  counters_.connections_active.fetch_add(1);
  counters_.handshakes_active.fetch_add(1);
  if (auto evicted = budget_.admit(raw->id, address, now)) {
    auto victim = connections_.find(*evicted);
    if (victim != connections_.end()) {
      refuse(victim->second.get(), ErrorCode::kBusy,
             "too many connections are authenticating at once; retry in a moment");
    }
  }
}

void PublisherServer::arm(Connection* conn) {
  if (conn->socket.has_pending_input()) {
    // Plaintext of a record already read waits (encryption): epoll would not
    // report it, so the loop serves it on its next turn.
    pending_input_.push_back(conn->id);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = conn->id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn->socket.fd(), &ev) != 0) close_connection(conn);
}

void PublisherServer::on_readable(Connection* conn) {
  if (conn->busy) return;
  const bool authenticated = conn->phase != Connection::Phase::kHandshake;
  const std::uint32_t limit = !authenticated ? kMaxHandshakePayload
                              : conn->seal   ? kMaxRequestPayload + static_cast<std::uint32_t>(kFrameTagBytes)
                                             : kMaxRequestPayload;
  auto progress = conn->in.read_from(conn->socket, limit, kPeer);
  if (!progress.ok()) {
    if (progress.status().code() == ErrorCode::kProtocolError) {
      counters_.protocol_errors.fetch_add(1);
      if (log_allowed()) {
        WS_WARN("publisher: closing connection from {}: {}", conn->peer, progress.status().message());
      }
      refuse(conn, ErrorCode::kProtocolError, progress.status().message());
    } else {
      close_connection(conn);
    }
    return;
  }
  if (*progress == FrameAssembler::Progress::kNeedMore) {
    if (conn->in.partial() && !conn->has_partial) {
      conn->has_partial = true;
      conn->partial_since = Clock::now();
    }
    arm(conn);
    return;
  }
  conn->has_partial = false;
  conn->last_activity = Clock::now();
  Frame frame = conn->in.take_frame();
  if (!authenticated) {
    on_handshake_frame(conn, frame);
  } else if (conn->parked) {
    counters_.protocol_errors.fetch_add(1);
    refuse(conn, ErrorCode::kProtocolError,
           conn->park_delta       ? "a request arrived while FETCH_DELTA was still waiting"
           : conn->park_watermark ? "a request arrived while WAIT_WATERMARK was still waiting"
                                  : "a request arrived while QUERY_VERSION was still waiting");
  } else {
    dispatch(conn, std::move(frame));
  }
}

void PublisherServer::on_handshake_frame(Connection* conn, const Frame& frame) {
  // Handshake messages are tiny and the socket's buffer is empty: they are
  // written without waiting, and a peer that does not take them is dropped.
  const Deadline now = Deadline::after(std::chrono::milliseconds(0));
  if (!conn->handshake.hello_received()) {
    auto challenge = conn->handshake.on_hello(frame);
    if (!challenge.ok()) {
      counters_.protocol_errors.fetch_add(1);
      refuse(conn, challenge.status().code(), challenge.status().message());
      return;
    }
    if (!write_frame(conn->socket, MsgType::kChallenge, *challenge, now, kPeer).ok()) {
      close_connection(conn);
      return;
    }
    budget_.touch(conn->id, Clock::now());
    arm(conn);
    return;
  }
  Status authenticated = conn->handshake.on_auth(frame);
  if (authenticated.ok()) authenticated = peer_allowed(*conn);
  if (!authenticated.ok()) {
    if (authenticated.code() == ErrorCode::kAuthFailed) {
      counters_.auth_failures.fetch_add(1);
      if (log_allowed()) WS_WARN("publisher: refused {}: {}", conn->peer, authenticated.message());
    } else if (authenticated.code() == ErrorCode::kInternal) {
      WS_ERROR("publisher: cannot authenticate {}: {}", conn->peer, authenticated.message());
    } else {
      counters_.protocol_errors.fetch_add(1);
      if (log_allowed()) {
        WS_INFO("publisher: handshake with {} failed: {}", conn->peer, authenticated.to_string());
      }
    }
    refuse(conn, authenticated.code(),
           authenticated.code() == ErrorCode::kInternal ? "the publisher cannot authenticate (see its log)"
                                                        : authenticated.message());
    return;
  }
  on_authenticated(conn);
}

Status PublisherServer::peer_allowed(const Connection& conn) const {
  if (!config_.secret.empty()) return Status();
  auto uid = peer_uid(conn.socket, conn.local);
  if (!uid.ok()) {
    return Status(ErrorCode::kAuthFailed, "the publisher has no secret and cannot tell who this peer is (" +
                                              uid.status().message() +
                                              "); set the same WEIGHTSYNC_SECRET on both sides");
  }
  if (!same_uid_as_me(*uid)) {
    return Status(ErrorCode::kAuthFailed,
                  "the publisher has no secret and serves only its own user, not uid " +
                      std::to_string(*uid) +
                      "; set the same WEIGHTSYNC_SECRET on both sides to connect as another user");
  }
  return Status();
}

void PublisherServer::on_authenticated(Connection* conn) {
  const Role role = conn->handshake.role();
  if ((role == Role::kShm) != conn->local) {
    counters_.protocol_errors.fetch_add(1);
    refuse(conn, ErrorCode::kProtocolError,
           conn->local ? "only the shared-memory role is served on the local socket"
                       : "the shared-memory role is served on the local socket only");
    return;
  }
  std::uint64_t session = conn->handshake.claimed_session();
  if (role == Role::kControl) {
    auto id = random_id();
    if (!id.ok()) {
      WS_ERROR("publisher: cannot make a session id: {}", id.status().message());
      refuse(conn, ErrorCode::kInternal, id.status().message());
      return;
    }
    session = *id;
  } else if (auto it = sessions_.find(session); it == sessions_.end()) {
    counters_.protocol_errors.fetch_add(1);
    refuse(conn, ErrorCode::kProtocolError, "data connection names no live control session");
    return;
  } else if (it->second == nullptr) {
    counters_.protocol_errors.fetch_add(1);
    refuse(conn, ErrorCode::kProtocolError, "data connection's session has selected no stream");
    return;
  } else {
    conn->stream = it->second;
  }
  if (authenticated_ >= config_.max_connections) {
    if (log_allowed()) {
      WS_WARN("publisher: refusing {}: {} authenticated connections already open (max_connections)",
              conn->peer, authenticated_);
    }
    refuse(conn, ErrorCode::kBusy,
           "the publisher already serves max_connections (" + std::to_string(config_.max_connections) +
               ") connections; retry later or raise PublisherOptions::max_connections");
    return;
  }
  if (role == Role::kControl && (conn->handshake.features() & kHelloIntegrity) != 0) {
    auto keys = derive_session_keys(config_.secret, session, conn->handshake.client_nonce(),
                                    conn->handshake.server_nonce());
    if (!keys.ok()) {
      WS_ERROR("publisher: cannot derive session keys for {}: {}", conn->peer, keys.status().message());
      refuse(conn, ErrorCode::kInternal, "the publisher cannot authenticate (see its log)");
      return;
    }
    conn->seal = std::make_unique<FrameSeal>(keys->to_subscriber, keys->to_publisher);
  }
  auto welcome = conn->handshake.welcome(session);
  if (!welcome.ok()) {
    WS_ERROR("publisher: cannot complete the handshake with {}: {}", conn->peer, welcome.status().message());
    refuse(conn, ErrorCode::kInternal, "the publisher cannot authenticate (see its log)");
    return;
  }
  // Joinable before WELCOME leaves, so a data connection opened right after
  // it is never refused.
  if (role == Role::kControl) {
    conn->stream = default_;
    sessions_[session] = default_;
    conn->owns_session = true;
  }
  conn->session = session;
  conn->phase = role == Role::kControl ? Connection::Phase::kControl
                : role == Role::kData  ? Connection::Phase::kData
                                       : Connection::Phase::kLocal;
  budget_.remove(conn->id);
  counters_.handshakes_active.fetch_sub(1);
  ++authenticated_;
  if (!write_frame(conn->socket, MsgType::kWelcome, *welcome, Deadline::after(std::chrono::milliseconds(0)),
                   kPeer)
           .ok()) {
    close_connection(conn);
    return;
  }
  // Encrypted from the first byte after WELCOME, both ways.
  if ((conn->handshake.features() & kHelloEncryption) != 0) {
    Status encrypted =
        enable_encryption(conn->socket, config_.secret, session, conn->handshake.client_nonce(),
                          conn->handshake.server_nonce(), /*publisher_side=*/true);
    if (!encrypted.ok()) {
      WS_ERROR("publisher: cannot encrypt the connection from {}: {}", conn->peer, encrypted.message());
      close_connection(conn);
      return;
    }
  }
  if (role == Role::kControl) {
    WS_INFO("publisher: subscriber '{}' connected from {}", printable(conn->handshake.client_name()),
            conn->peer);
  }
  if (conn->phase == Connection::Phase::kLocal) {
    dispatch(conn, Frame{});  // hand over the descriptors, then close
    return;
  }
  arm(conn);
}

void PublisherServer::refuse(Connection* conn, ErrorCode code, const std::string& why) {
  if (code == ErrorCode::kBusy) counters_.connections_refused.fetch_add(1);
  if (conn->busy) {  // the worker owns the socket: no concurrent write
    close_connection(conn);
    return;
  }
  // Best effort and without waiting: the peer may be the one not reading.
  (void)reply_error_sealed(conn->socket, conn->seal.get(), code, why,
                           Deadline::after(std::chrono::milliseconds(0)), kPeer);
  close_connection(conn);
}

void PublisherServer::close_connection(Connection* conn) {
  if (conn->busy) {
    conn->socket.shutdown_both();  // the worker fails and hands it back
    return;
  }
  if (conn->parked) --parked_count_;
  if (conn->phase == Connection::Phase::kHandshake) {
    budget_.remove(conn->id);
    counters_.handshakes_active.fetch_sub(1);
  } else {
    --authenticated_;
  }
  if (conn->owns_session) {
    sessions_.erase(conn->session);
    if (conn->stream != nullptr) {
      const ServedState& state = conn->stream->state;
      state.ring->release_session(conn->session);
      if (state.views != nullptr) state.views->release_session(conn->session);
      if (state.deltas != nullptr) state.deltas->release_session(conn->session);
      state.transports->session_closed(conn->session);
    }
  }
  counters_.connections_active.fetch_sub(1);
  connections_.erase(conn->id);  // closes the socket, which leaves the epoll set
}

}  // namespace weightsync::detail
