// PublisherServer, requests: handing complete frames to workers, what the
// workers do with them (control requests, and the transports' own
// connections), parked requests and the deadlines that end them.
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
      ControlContext ctx{&conn->socket, &conn->stream->state, conn->session, config_.io_timeout_ms,
                         conn->seal.get()};
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
    if (c.selected) sessions_[conn->session] = c.selected;  // its data connections join this stream
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

void PublisherServer::resolve_parked() {
  if (parked_count_ == 0) return;
  const Clock::time_point now = Clock::now();
  std::vector<Connection*> ready;
  for (auto& [id, conn] : connections_) {
    if (!conn->parked) continue;
    // Each session's own stream (only a session with one can park).
    const ServedState& state = conn->stream->state;
    // Retired (a relay whose forwarding stopped, a removed adapter): every parked query is told now.
    const bool stopped = state.ring->stopped() || state.ring->retired().has_value();
    bool answer = now >= conn->park_until || stopped;
    if (!answer && conn->park_delta) {
      answer = !conn->park_delta->hold &&
               state.deltas->readiness(conn->park_delta->have, conn->park_delta->at_least) !=
                   DeltaReadiness::kLater;
    } else if (!answer && conn->park_watermark) {
      answer = watermark_ready(state, conn->session, conn->park_lease, conn->park_bytes);
    } else if (!answer && conn->park_streaming) {
      answer = state.ring->latest_streamable() > conn->park_newer_than;
    } else if (!answer) {
      answer = state.ring->latest_version() > conn->park_newer_than;
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
    set_stream_listeners_polled(true);
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
    ServedTransport* transport = conn->stream->state.transports->for_role(
        conn->phase == Connection::Phase::kLocal ? Role::kShm : Role::kData);
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
  } else if (frame.type == MsgType::kSelectStream) {
    status = select_stream(conn, frame, done);
    conn->served_request = true;
  } else if (conn->stream == nullptr) {
    conn->served_request = true;
    status = reply_error_sealed(conn->socket, conn->seal.get(), ErrorCode::kInvalidConfig,
                                "this publisher serves adapters only: name one (SubscriberOptions::adapter)",
                                Deadline::after(std::chrono::milliseconds(config_.io_timeout_ms)), kPeer);
    if (status.ok()) status = Status(ErrorCode::kInvalidConfig, "a request before SELECT_STREAM");
  } else {
    conn->served_request = true;
    ControlContext ctx{&conn->socket, &conn->stream->state, conn->session, config_.io_timeout_ms,
                       conn->seal.get()};
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
