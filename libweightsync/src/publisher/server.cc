// PublisherServer: acceptor thread, connection threads, orderly stop.
#include "publisher/server.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "auth/crypto.h"
#include "auth/handshake.h"
#include "common/log.h"
#include "net/unix_socket.h"
#include "publisher/connection_handlers.h"

namespace weightsync::detail {

PublisherServer::PublisherServer(Socket listener, Socket local_listener, ServerConfig config,
                                 ServedState state)
    : listener_(std::move(listener)),
      local_listener_(std::move(local_listener)),
      config_(std::move(config)),
      state_(std::move(state)) {}

Result<std::unique_ptr<PublisherServer>> PublisherServer::start(Socket listener, Socket local_listener,
                                                                ServerConfig config, ServedState state) {
  std::unique_ptr<PublisherServer> server(new PublisherServer(std::move(listener), std::move(local_listener),
                                                              std::move(config), std::move(state)));
  if (::pipe2(server->wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status(ErrorCode::kInternal, std::string("pipe2 failed: ") + std::strerror(errno));
  }
  try {
    server->acceptor_ = std::thread([s = server.get()] { s->accept_loop(); });
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("cannot start the acceptor thread: ") + e.what());
  }
  return server;
}

PublisherServer::~PublisherServer() {
  stop();
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

void PublisherServer::stop() {
  if (stopping_.exchange(true)) return;
  (void)!::write(wake_pipe_[1], "x", 1);
  state_.ring->stop();
  if (acceptor_.joinable()) acceptor_.join();
  std::list<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& conn : connections_) conn->socket.shutdown_both();
    connections.swap(connections_);
  }
  for (auto& conn : connections) {
    if (conn->thread.joinable()) conn->thread.join();
  }
}

void PublisherServer::reap_finished_locked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done.load()) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

bool PublisherServer::session_alive(std::uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.count(session) != 0;
}

void PublisherServer::accept_loop() {
  try {
    while (!stopping_.load()) {
      // An invalid local listener (fd -1) is ignored by poll.
      pollfd fds[3] = {
          {listener_.fd(), POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}, {local_listener_.fd(), POLLIN, 0}};
      int rc = ::poll(fds, 3, 1000);
      if (rc < 0 && errno != EINTR) {
        WS_ERROR("publisher: poll on the listening socket failed: {}; no new subscribers will be accepted",
                 std::strerror(errno));
        return;
      }
      if (rc > 0 && (fds[1].revents & POLLIN) != 0) {
        char drain[64];
        while (::read(wake_pipe_[0], drain, sizeof(drain)) > 0) {
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        reap_finished_locked();
      }
      if (rc <= 0 || stopping_.load()) continue;
      if ((fds[0].revents & POLLIN) != 0) accept_one(/*local=*/false);
      if ((fds[2].revents & POLLIN) != 0) accept_one(/*local=*/true);
    }
  } catch (const std::exception& e) {
    WS_ERROR("publisher: acceptor thread failed: {}; no new subscribers will be accepted", e.what());
  } catch (...) {
    WS_ERROR("publisher: acceptor thread failed with an unknown exception");
  }
}

void PublisherServer::accept_one(bool local) {
  std::string peer = "local";
  auto accepted = local ? accept_unix(local_listener_)
                        : accept_tcp(listener_, Deadline::after(std::chrono::milliseconds(0)), &peer);
  if (!accepted.ok()) {
    if (accepted.status().code() != ErrorCode::kTimeout) {
      // E.g. EMFILE: the connection stays queued and poll() keeps reporting it;
      // back off instead of spinning, and say why subscribers are not served.
      WS_WARN("publisher: cannot accept a connection: {} (out of file descriptors? raise ulimit -n)",
              accepted.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (connections_.size() >= config_.max_connections) {
    WS_WARN("publisher: refusing connection from {}: {} connections already open (max_connections)", peer,
            connections_.size());
    return;  // the Socket closes as it goes out of scope
  }
  connections_.push_back(std::make_unique<Connection>());
  Connection* conn = connections_.back().get();
  conn->socket = std::move(*accepted);
  conn->peer = peer;
  conn->local = local;
  try {
    conn->thread = std::thread([this, conn] { serve(conn); });
  } catch (const std::exception& e) {
    WS_ERROR("publisher: cannot start a connection thread for {}: {}", peer, e.what());
    connections_.pop_back();
    return;
  }
  counters_.connections_accepted.fetch_add(1);
}

void PublisherServer::serve(Connection* conn) {
  counters_.connections_active.fetch_add(1);
  std::uint64_t control_session = 0;
  try {
    const Deadline handshake_deadline = Deadline::after(std::chrono::milliseconds(config_.io_timeout_ms));
    auto new_id = random_id();
    Result<ServerHandshake> hs = new_id.ok() ? server_handshake(
                                                   conn->socket, config_.secret, handshake_deadline, *new_id,
                                                   [this](std::uint64_t s) { return session_alive(s); },
                                                   [&](std::uint64_t s) {
                                                     // Joinable before WELCOME leaves, so a data connection
                                                     // opened right after it is never refused.
                                                     if (conn->local)
                                                       return;  // refused after the handshake: never joinable
                                                     std::lock_guard<std::mutex> lock(mu_);
                                                     sessions_.insert(s);
                                                     control_session = s;
                                                   })
                                             : Result<ServerHandshake>(new_id.status());
    if (!hs.ok()) {
      if (hs.status().code() == ErrorCode::kAuthFailed) {
        counters_.auth_failures.fetch_add(1);
        WS_WARN("publisher: refused {}: {}", conn->peer, hs.status().message());
      } else {
        if (hs.status().code() == ErrorCode::kProtocolError) counters_.protocol_errors.fetch_add(1);
        WS_INFO("publisher: handshake with {} failed: {}", conn->peer, hs.status().to_string());
      }
    } else {
      HandlerContext ctx{&conn->socket,         &state_,   &counters_, hs->session_id,
                         config_.io_timeout_ms, &stopping_};
      Status result;
      if ((hs->role == Role::kShm) != conn->local) {
        result = reply_error(ctx, ErrorCode::kProtocolError,
                             conn->local ? "only the shared-memory role is served on the local socket"
                                         : "the shared-memory role is served on the local socket only");
      } else if (hs->role == Role::kShm) {
        result = serve_shm(ctx);
      } else if (hs->role == Role::kControl) {
        WS_INFO("publisher: subscriber '{}' connected from {}", hs->client_name, conn->peer);
        result = serve_control(ctx);
      } else {
        result = serve_tcp_data(ctx);
      }
      WS_DEBUG("publisher: {} connection from {} ended: {}", to_string(hs->role), conn->peer,
               result.to_string());
      if (!result.ok() && result.code() != ErrorCode::kConnectionLost && !stopping_.load()) {
        if (result.code() == ErrorCode::kProtocolError || result.code() == ErrorCode::kInvalidArgument) {
          counters_.protocol_errors.fetch_add(1);
        }
        WS_WARN("publisher: closing connection from {} ('{}'): {}", conn->peer, hs->client_name,
                result.to_string());
      }
    }
  } catch (const std::exception& e) {
    WS_ERROR("publisher: connection from {} failed: {}", conn->peer, e.what());
  } catch (...) {
    WS_ERROR("publisher: connection from {} failed with an unknown exception", conn->peer);
  }
  if (control_session != 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sessions_.erase(control_session);
    }
    state_.ring->release_session(control_session);
    if (state_.session_closed) state_.session_closed(control_session);
  }
  conn->socket.shutdown_both();
  counters_.connections_active.fetch_sub(1);
  conn->done.store(true);
  (void)!::write(wake_pipe_[1], "r", 1);  // let the acceptor reap this thread soon
}

}  // namespace weightsync::detail
