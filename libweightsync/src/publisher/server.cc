// PublisherServer: construction, the event loop's turn, the version watcher
// and an orderly stop (publisher/server.h). Admission and the handshake are in
// server_admission.cc, requests and parked requests in server_requests.cc.
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
#include "publisher/server_connection.h"
#include "wire/frame_assembler.h"
#include "wire/frame_io.h"

namespace weightsync::detail {

using namespace server_internal;

PublisherServer::PublisherServer(Socket listener, ServerConfig config, ServedState state)
    : listener_(std::move(listener)),
      local_listener_(state.transports != nullptr ? state.transports->take_local_listener() : Socket()),
      config_(std::move(config)),
      state_(std::move(state)),
      streams_(config_.max_streams),
      workers_(config_.max_workers),
      budget_(config_.max_handshakes, config_.max_handshakes_per_address) {}

Result<std::unique_ptr<PublisherServer>> PublisherServer::start(Socket listener, ServerConfig config,
                                                                ServedState state) {
  std::unique_ptr<PublisherServer> server(
      new PublisherServer(std::move(listener), std::move(config), std::move(state)));
  if (Status s = server->setup(); !s.ok()) return s;
  try {
    server->loop_ = std::thread([s = server.get()] { s->run_loop(); });
    if (server->default_) server->version_watcher_ = std::thread([s = server.get()] { s->watch_versions(); });
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
  if (state_.ring != nullptr) {
    auto stream = std::make_shared<ServedStream>();
    stream->state = state_;
    default_ = std::move(stream);
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
  for (const auto& stream : streams_.all()) {  // they may outlive this server (their owners hold them)
    stream->state.ring->set_change_listener(nullptr);
    if (stream->state.deltas != nullptr) stream->state.deltas->set_listener(nullptr);
  }
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
  std::lock_guard<std::mutex> lock(listeners_mu_);
  stream_listeners_.clear();
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
    } else if ((tag & kStreamListenerTagBit) != 0) {
      accept_ready(true, tag);
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

}  // namespace weightsync::detail
