// PublisherServer: the event loop, the handshake budget, the workers' hand-off
// and an orderly stop.
#include "publisher/server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "auth/crypto.h"
#include "auth/server_handshake.h"
#include "common/log.h"
#include "common/printable.h"
#include "net/peer_identity.h"
#include "net/unix_socket.h"
#include "publisher/control_handler.h"
#include "wire/frame_assembler.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

constexpr const char* kPeer = "subscriber";
// epoll tags below the first connection id.
constexpr std::uint64_t kListenerTag = 1;
constexpr std::uint64_t kLocalListenerTag = 2;
constexpr std::uint64_t kWakeTag = 3;
// Connections accepted per listener per loop turn: a flood of new connections
// cannot starve the handshakes already under way.
constexpr int kAcceptsPerTurn = 8;
constexpr int kSweepMillis = 50;
// Pre-authentication log lines per second; the rest are counted and summed up.
constexpr std::uint32_t kPreAuthLogsPerSecond = 10;

std::uint64_t now_millis() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// The per-address key of the handshake budget: empty (no per-address cap)
// for peers on this host, who all share one address.
std::string budget_address(const std::string& peer, bool local) {
  if (local) return "";
  auto host_port = parse_host_port(peer);
  if (!host_port.ok() || is_loopback_host(host_port->host)) return "";
  return host_port->host;
}

}  // namespace

struct PublisherServer::Connection {
  enum class Phase { kHandshake, kControl, kData, kLocal };

  std::uint64_t id = 0;
  Socket socket;
  std::string peer;  // printable
  bool local = false;
  Phase phase = Phase::kHandshake;
  HandshakeResponder handshake;
  FrameAssembler in;
  std::uint64_t session = 0;  // the control session this connection belongs to
  bool owns_session = false;  // a control connection: its close ends the session
  bool busy = false;          // a worker has the socket
  bool parked = false;        // a QUERY_VERSION or WAIT_WATERMARK waits
  std::uint64_t park_newer_than = 0;
  bool park_streaming = false;  // QUERY_VERSION: in-progress versions count
  bool park_watermark = false;  // WAIT_WATERMARK (else QUERY_VERSION)
  std::uint64_t park_lease = 0;
  std::uint64_t park_bytes = 0;
  std::optional<ParkedDelta> park_delta;  // a parked FETCH_DELTA
  Clock::time_point park_until{};
  Clock::time_point handshake_until{};
  Clock::time_point last_activity{};
  Clock::time_point partial_since{};  // first byte of an incomplete frame
  bool has_partial = false;
  // Integrity layer (control sessions that asked for it): seals and opens
  // every frame after WELCOME. Used by whoever owns the socket at the time.
  std::unique_ptr<FrameSeal> seal;

  Connection(std::string secret, bool integrity, bool encryption)
      : handshake(std::move(secret), integrity, encryption) {}
};

struct PublisherServer::Completion {
  std::uint64_t id = 0;
  bool close = false;
  bool park = false;
  std::uint64_t newer_than = 0;
  bool streaming = false;
  bool watermark = false;
  std::uint64_t lease_id = 0;
  std::uint64_t bytes = 0;
  std::optional<ParkedDelta> delta;
  std::chrono::milliseconds wait{0};
};

PublisherServer::PublisherServer(Socket listener, ServerConfig config, ServedState state)
    : listener_(std::move(listener)),
      local_listener_(state.transports->take_local_listener()),
      config_(std::move(config)),
      state_(std::move(state)),
      workers_(config_.max_workers),
      budget_(config_.max_handshakes, config_.max_handshakes_per_address) {}

Result<std::unique_ptr<PublisherServer>> PublisherServer::start(Socket listener, ServerConfig config,
                                                                ServedState state) {
  std::unique_ptr<PublisherServer> server(
      new PublisherServer(std::move(listener), std::move(config), std::move(state)));
  if (Status s = server->setup(); !s.ok()) return s;
  try {
    server->loop_ = std::thread([s = server.get()] { s->run_loop(); });
    server->version_watcher_ = std::thread([s = server.get()] { s->watch_versions(); });
  } catch (const std::exception& e) {
    server->stop();
    return Status(ErrorCode::kInternal, std::string("cannot start the publisher's threads: ") + e.what());
  }
  return server;
}

Status PublisherServer::setup() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return Status(ErrorCode::kInternal, std::string("epoll/eventfd failed: ") + std::strerror(errno));
  }
  auto add = [&](int fd, std::uint64_t tag) -> Status {
    if (fd < 0) return Status();
    // Non-blocking: the loop accepts until EAGAIN and must never wait in accept().
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Status(ErrorCode::kInternal, std::string("epoll_ctl failed: ") + std::strerror(errno));
    }
    return Status();
  };
  for (Status s : {add(listener_.fd(), kListenerTag), add(local_listener_.fd(), kLocalListenerTag),
                   add(wake_fd_, kWakeTag)}) {
    if (!s.ok()) return s;
  }
  if (state_.deltas != nullptr) {
    // Parked FETCH_DELTAs are looked at when the delta thread moves on; a
    // quarter of the workers at most send chains (peers that do not read).
    state_.deltas->set_listener([this] { wake(); });
    state_.deltas->set_send_cap(std::max<std::size_t>(1, config_.max_workers / 4));
  }
  return Status();
}

PublisherServer::~PublisherServer() {
  stop();
  for (int fd : {epoll_fd_, wake_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void PublisherServer::wake() {
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void PublisherServer::stop() {
  if (stopping_.exchange(true)) return;
  if (state_.deltas != nullptr) state_.deltas->set_listener(nullptr);  // it outlives this server
  if (state_.ring != nullptr) state_.ring->stop();
  if (wake_fd_ >= 0) wake();
  if (loop_.joinable()) loop_.join();
  if (version_watcher_.joinable()) version_watcher_.join();
  // Wake workers blocked on a socket, let them finish, then close everything.
  for (auto& [id, conn] : connections_) conn->socket.shutdown_both();
  workers_.stop();
  for (auto& [id, conn] : connections_) conn->busy = false;  // no worker holds one now
  while (!connections_.empty()) close_connection(connections_.begin()->second.get());
}

ServerHealth PublisherServer::health() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  return health_;
}

void PublisherServer::fail(const std::string& why) {
  WS_ERROR("publisher: {}; no subscriber is served any more: recreate the Publisher", why);
  std::lock_guard<std::mutex> lock(health_mu_);
  health_.serving = false;
  health_.error = why;
}

bool PublisherServer::log_allowed() {
  const std::uint64_t now = now_millis();
  if (now - log_window_start_ms_ >= 1000) {
    if (logs_suppressed_ > 0) {
      WS_WARN("publisher: {} more connection messages in the last second were not logged", logs_suppressed_);
    }
    log_window_start_ms_ = now;
    logs_in_window_ = 0;
    logs_suppressed_ = 0;
  }
  if (logs_in_window_ < kPreAuthLogsPerSecond) {
    ++logs_in_window_;
    return true;
  }
  ++logs_suppressed_;
  return false;
}

// --- event loop ---

void PublisherServer::run_loop() {
  try {
    while (!stopping_.load() && health().serving) loop_once();
  } catch (const std::exception& e) {
    fail(std::string("the publisher's event loop failed: ") + e.what());
  } catch (...) {
    fail("the publisher's event loop failed with an unknown exception");
  }
  if (stopping_.load()) return;
  // Failed: nobody will serve these peers. Let them see a closed connection
  // now rather than a timeout later; stop() cleans up.
  for (auto& [id, conn] : connections_) conn->socket.shutdown_both();
  listener_.close();
  local_listener_.close();
}

void PublisherServer::loop_once() {
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_fd_, events, 64, wait_millis());
  if (n < 0) {
    if (errno == EINTR) return;
    fail(std::string("epoll_wait failed: ") + std::strerror(errno));
    return;
  }
  for (int i = 0; i < n; ++i) {
    const std::uint64_t tag = events[i].data.u64;
    if (tag == kListenerTag) {
      accept_ready(false);
    } else if (tag == kLocalListenerTag) {
      accept_ready(true);
    } else if (tag == kWakeTag) {
      std::uint64_t drained = 0;
      (void)!::read(wake_fd_, &drained, sizeof(drained));
    } else if (auto it = connections_.find(tag); it != connections_.end()) {
      on_readable(it->second.get());
    }
  }
  finish_completions();
  serve_pending_input();
  resolve_parked();
  if (Clock::now() >= next_sweep_) {
    sweep_deadlines();
    next_sweep_ = Clock::now() + std::chrono::milliseconds(kSweepMillis);
  }
}

void PublisherServer::serve_pending_input() {
  std::vector<std::uint64_t> ready;
  ready.swap(pending_input_);
  for (std::uint64_t id : ready) {
    if (auto it = connections_.find(id); it != connections_.end()) on_readable(it->second.get());
  }
}

void PublisherServer::accept_ready(bool local) {
  const Socket& listener = local ? local_listener_ : listener_;
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
                              : conn->seal  ? kMaxRequestPayload + static_cast<std::uint32_t>(kFrameTagBytes)
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
  } else if (sessions_.count(session) == 0) {
    counters_.protocol_errors.fetch_add(1);
    refuse(conn, ErrorCode::kProtocolError, "data connection names no live control session");
    return;
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
    sessions_.insert(session);
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
    Status encrypted = enable_encryption(conn->socket, config_.secret, session, conn->handshake.client_nonce(),
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

void PublisherServer::dispatch(Connection* conn, Frame frame) {
  conn->busy = true;
  Status posted =
      workers_.post([this, conn, f = std::move(frame)]() mutable { serve_request(conn, std::move(f)); });
  if (!posted.ok()) {
    conn->busy = false;
    close_connection(conn);
  }
}

void PublisherServer::dispatch_parked_answer(Connection* conn) {
  conn->parked = false;
  --parked_count_;
  conn->busy = true;
  const std::uint64_t newer_than = conn->park_newer_than;
  const bool streaming = conn->park_streaming;
  const bool watermark = conn->park_watermark;
  const std::uint64_t lease = conn->park_lease, bytes = conn->park_bytes;
  const std::optional<ParkedDelta> delta = conn->park_delta;
  conn->park_delta.reset();
  Status posted = workers_.post([this, conn, newer_than, streaming, watermark, lease, bytes, delta] {
    Completion done;
    done.id = conn->id;
    done.close = true;
    try {
      ControlContext ctx{&conn->socket, &state_, conn->session, config_.io_timeout_ms, conn->seal.get()};
      done.close = !(delta       ? answer_delta(ctx, *delta)
                     : watermark ? answer_watermark(ctx, lease, bytes)
                                 : answer_version_query(ctx, newer_than, streaming))
                        .ok();
    } catch (const std::exception& e) {
      WS_ERROR("publisher: answering {} failed: {}", conn->peer, e.what());
    }
    complete(done);
  });
  if (!posted.ok()) {
    conn->busy = false;
    close_connection(conn);
  }
}

void PublisherServer::finish_completions() {
  std::deque<Completion> done;
  {
    std::lock_guard<std::mutex> lock(completions_mu_);
    done.swap(completions_);
  }
  for (const Completion& c : done) {
    auto it = connections_.find(c.id);
    if (it == connections_.end()) continue;
    Connection* conn = it->second.get();
    conn->busy = false;
    conn->last_activity = Clock::now();
    if (c.close || stopping_.load()) {
      close_connection(conn);
    } else if (c.park) {
      conn->parked = true;
      ++parked_count_;
      conn->park_newer_than = c.newer_than;
      conn->park_streaming = c.streaming;
      conn->park_watermark = c.watermark;
      conn->park_lease = c.lease_id;
      conn->park_bytes = c.bytes;
      conn->park_delta = c.delta;
      conn->park_until = Clock::now() + c.wait;
      arm(conn);  // a peer that closes while waiting is noticed
    } else {
      arm(conn);
    }
  }
}

int PublisherServer::wait_millis() const {
  if (!pending_input_.empty()) return 0;
  if (parked_count_ == 0) return kSweepMillis;
  const Clock::time_point now = Clock::now();
  Clock::duration soonest = std::chrono::milliseconds(kSweepMillis);
  for (const auto& [id, conn] : connections_) {
    if (conn->parked) soonest = std::min(soonest, conn->park_until - now);
  }
  // Rounded up, so the wait ends at or after the deadline, never spins before it.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(soonest, Clock::duration::zero()));
  return static_cast<int>(ms.count());
}

void PublisherServer::resolve_parked() {
  if (parked_count_ == 0) return;
  const std::uint64_t latest = state_.ring->latest_version();
  std::uint64_t streamable = 0;
  bool streamable_known = false;
  // Retired (a relay whose forwarding stopped): every parked query is told now.
  const bool stopped = state_.ring->stopped() || state_.ring->retired().has_value();
  const Clock::time_point now = Clock::now();
  std::vector<Connection*> ready;
  for (auto& [id, conn] : connections_) {
    if (!conn->parked) continue;
    bool answer = now >= conn->park_until || stopped;
    if (!answer && conn->park_delta) {
      answer = !conn->park_delta->hold &&
               state_.deltas->readiness(conn->park_delta->have, conn->park_delta->at_least) != DeltaReadiness::kLater;
    } else if (!answer && conn->park_watermark) {
      answer = watermark_ready(state_, conn->session, conn->park_lease, conn->park_bytes);
    } else if (!answer && conn->park_streaming) {
      if (!streamable_known) {
        streamable = state_.ring->latest_streamable();
        streamable_known = true;
      }
      answer = streamable > conn->park_newer_than;
    } else if (!answer) {
      answer = latest > conn->park_newer_than;
    }
    if (answer) ready.push_back(conn.get());
  }
  for (Connection* conn : ready) dispatch_parked_answer(conn);
}

void PublisherServer::sweep_deadlines() {
  const Clock::time_point now = Clock::now();
  if (accept_paused_ && now >= accept_paused_until_) {
    accept_paused_ = false;
    for (auto [fd, tag] : {std::pair<int, std::uint64_t>{listener_.fd(), kListenerTag},
                           std::pair<int, std::uint64_t>{local_listener_.fd(), kLocalListenerTag}}) {
      if (fd < 0) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = tag;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    }
  }
  const auto io_timeout = std::chrono::milliseconds(config_.io_timeout_ms);
  const auto idle_timeout = std::chrono::milliseconds(config_.idle_timeout_ms);
  std::vector<std::pair<Connection*, int>> expired;  // 0 handshake, 1 stalled frame, 2 idle
  for (auto& [id, conn] : connections_) {
    if (conn->busy || conn->parked) continue;
    if (conn->phase == Connection::Phase::kHandshake) {
      if (now >= conn->handshake_until) expired.emplace_back(conn.get(), 0);
    } else if (conn->has_partial && now - conn->partial_since >= io_timeout) {
      expired.emplace_back(conn.get(), 1);
    } else if (!conn->has_partial && config_.idle_timeout_ms > 0 &&
               now - conn->last_activity >= idle_timeout) {
      expired.emplace_back(conn.get(), 2);
    }
  }
  for (auto [conn, why] : expired) {
    if (why == 0) {
      counters_.handshakes_timed_out.fetch_add(1);
      refuse(conn, ErrorCode::kTimeout,
             "the handshake did not finish within " + std::to_string(config_.handshake_timeout_ms) + " ms");
    } else if (why == 1) {
      refuse(conn, ErrorCode::kTimeout, "a request stalled mid-frame past the I/O timeout");
    } else {
      counters_.sessions_idle_closed.fetch_add(1);
      refuse(conn, ErrorCode::kTimeout,
             "the connection was idle for " + std::to_string(config_.idle_timeout_ms) +
                 " ms (PublisherOptions::idle_timeout_ms); reconnect");
    }
  }
}

void PublisherServer::refuse(Connection* conn, ErrorCode code, const std::string& why) {
  if (code == ErrorCode::kBusy) counters_.connections_refused.fetch_add(1);
  if (conn->busy) {  // the worker owns the socket: no concurrent write
    close_connection(conn);
    return;
  }
  // Best effort and without waiting: the peer may be the one not reading.
  (void)reply_error_sealed(conn->socket, conn->seal.get(), code, why, Deadline::after(std::chrono::milliseconds(0)),
                           kPeer);
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
    state_.ring->release_session(conn->session);
    if (state_.views != nullptr) state_.views->release_session(conn->session);
    if (state_.deltas != nullptr) state_.deltas->release_session(conn->session);
    state_.transports->session_closed(conn->session);
  }
  counters_.connections_active.fetch_sub(1);
  connections_.erase(conn->id);  // closes the socket, which leaves the epoll set
}

void PublisherServer::watch_versions() {
  try {
    // Commits, and for streaming readers also watermarks, new in-progress
    // versions and abandons: every change of the ring's epoch wakes the loop.
    std::uint64_t seen = state_.ring->change_epoch();
    while (!stopping_.load()) {
      const std::uint64_t epoch = state_.ring->wait_change(seen, Deadline::after(std::chrono::seconds(1)));
      if (epoch != seen) {
        seen = epoch;
        wake();
      }
    }
  } catch (const std::exception& e) {
    fail(std::string("the publisher's version watcher failed: ") + e.what());
  }
}

// --- workers ---

void PublisherServer::serve_request(Connection* conn, Frame frame) {
  // Whatever happens, the connection goes back to the loop (closed on an exception).
  try {
    serve_request_unguarded(conn, std::move(frame));
  } catch (const std::exception& e) {
    WS_ERROR("publisher: serving {} failed: {}", conn->peer, e.what());
    complete(Completion{conn->id, /*close=*/true});
  } catch (...) {
    WS_ERROR("publisher: serving {} failed with an unknown exception", conn->peer);
    complete(Completion{conn->id, /*close=*/true});
  }
}

void PublisherServer::serve_request_unguarded(Connection* conn, Frame frame) {
  Completion done;
  done.id = conn->id;
  Status status;
  if (conn->phase == Connection::Phase::kLocal || conn->phase == Connection::Phase::kData) {
    // A transport's own connection: the local socket's regions (on
    // authenticating) or tcp's READ requests.
    ServedTransport* transport =
        state_.transports->for_role(conn->phase == Connection::Phase::kLocal ? Role::kShm : Role::kData);
    if (transport == nullptr) {
      status = Status(ErrorCode::kProtocolError, "no transport serves this connection");
    } else {
      const ConnectionReply reply = transport->serve_connection(ConnectionRequest{
          &conn->socket, conn->session, conn->phase == Connection::Phase::kLocal ? nullptr : &frame,
          config_.io_timeout_ms, &counters_.bytes_served});
      status = reply.status;
      done.close = reply.close;
    }
  } else if (Status opened = conn->seal ? conn->seal->open(frame) : Status(); !opened.ok()) {
    // Changed, replayed or reordered in transit: nothing more from this peer is trusted.
    status = opened;
    done.close = true;
  } else {
    ControlContext ctx{&conn->socket, &state_, conn->session, config_.io_timeout_ms, conn->seal.get()};
    ControlOutcome outcome = handle_control_request(ctx, frame);
    status = outcome.status;
    done.close = outcome.bye;
    done.park = outcome.park;
    done.newer_than = outcome.newer_than;
    done.streaming = outcome.streaming;
    done.watermark = outcome.watermark;
    done.lease_id = outcome.lease_id;
    done.bytes = outcome.bytes;
    done.delta = outcome.delta;
    done.wait = outcome.wait;
  }
  if (!status.ok()) {
    done.close = true;
    if (status.code() != ErrorCode::kConnectionLost && !stopping_.load()) {
      if (status.code() == ErrorCode::kProtocolError || status.code() == ErrorCode::kInvalidArgument) {
        counters_.protocol_errors.fetch_add(1);
      }
      WS_WARN("publisher: closing connection from {} ('{}'): {}", conn->peer,
              printable(conn->handshake.client_name()), status.to_string());
    }
  }
  complete(done);
}

void PublisherServer::complete(Completion completion) {
  {
    std::lock_guard<std::mutex> lock(completions_mu_);
    completions_.push_back(completion);
  }
  wake();
}

}  // namespace weightsync::detail
