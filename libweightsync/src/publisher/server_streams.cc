// PublisherServer, named streams: adding and removing them while serving,
// their local listeners, and SELECT_STREAM, which binds a control session to
// one (docs/protocol.md, "Named streams").
#include <fcntl.h>
#include <sys/epoll.h>

#include "auth/integrity.h"
#include "common/log.h"
#include "common/printable.h"
#include "publisher/server.h"
#include "publisher/server_connection.h"
#include "wire/frame_io.h"
#include "wire/stream_messages.h"

namespace weightsync::detail {

using namespace server_internal;

namespace {
// The names listed in an unknown-name error: bounded by the ERROR message limit.
std::string listed_names(const std::vector<std::string>& names) {
  std::string out;
  std::size_t shown = 0;
  for (const auto& name : names) {
    if (out.size() + name.size() + 2 > kMaxErrorMessage / 2) break;
    out += (shown == 0 ? "" : ", ") + name;
    ++shown;
  }
  if (shown < names.size()) out += " and " + std::to_string(names.size() - shown) + " more";
  return names.empty() ? "none" : out;
}
}  // namespace

Status PublisherServer::add_stream(std::shared_ptr<const ServedStream> stream) {
  if (stopping_.load()) return Status(ErrorCode::kConnectionLost, "the publisher's server has stopped");
  if (Status s = streams_.add(stream); !s.ok()) return s;
  // Parked queries of its sessions are looked at on every change of its ring.
  stream->state.ring->set_change_listener([this] { wake(); });
  if (stream->state.deltas != nullptr) stream->state.deltas->set_listener([this] { wake(); });
  Socket local = stream->state.transports->take_local_listener();
  if (local.fd() < 0) return Status();
  std::lock_guard<std::mutex> lock(listeners_mu_);
  const std::uint64_t tag = kStreamListenerTagBit | next_listener_tag_++;
  ::fcntl(local.fd(), F_SETFL, ::fcntl(local.fd(), F_GETFL) | O_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, local.fd(), &ev) != 0) {
    WS_WARN("publisher: adapter '{}': its local socket cannot be polled; its shm subscribers use tcp",
            stream->name);
  }
  stream_listener_tag_[stream->name] = tag;
  stream_listeners_.emplace(tag, std::move(local));
  return Status();
}

Status PublisherServer::remove_stream(const std::string& name) {
  auto removed = streams_.remove(name);
  if (!removed) return Status(ErrorCode::kInvalidArgument, "no adapter named '" + printable(name) + "'");
  removed->state.ring->set_change_listener(nullptr);
  if (removed->state.deltas != nullptr) removed->state.deltas->set_listener(nullptr);
  // Its sessions are told at once (parked ones on this wake) and fail from now on.
  removed->state.ring->retire("adapter '" + name + "' was removed from the publisher");
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    if (auto it = stream_listener_tag_.find(name); it != stream_listener_tag_.end()) {
      stream_listeners_.erase(it->second);  // closing it leaves the epoll set
      stream_listener_tag_.erase(it);
    }
  }
  wake();
  return Status();
}

int PublisherServer::stream_listener_fd(std::uint64_t tag) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  auto it = stream_listeners_.find(tag);
  return it == stream_listeners_.end() ? -1 : it->second.fd();
}

void PublisherServer::set_stream_listeners_polled(bool polled) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  for (const auto& [tag, socket] : stream_listeners_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_fd_, polled ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, socket.fd(), polled ? &ev : nullptr);
  }
}

Status PublisherServer::select_stream(Connection* conn, const Frame& frame, Completion& done) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(config_.io_timeout_ms));
  auto refuse_with = [&](ErrorCode code, const std::string& why) {
    Status sent = reply_error_sealed(conn->socket, conn->seal.get(), code, why, deadline, kPeer);
    return sent.ok() ? Status(code, why) : sent;
  };
  if (conn->served_request) {
    return refuse_with(ErrorCode::kProtocolError, "SELECT_STREAM must be a session's first request");
  }
  auto select = SelectStreamMsg::decode(frame.payload);
  if (!select.ok()) return refuse_with(ErrorCode::kProtocolError, select.status().message());
  auto stream = streams_.find(select->name);
  if (!stream) {
    // Only authenticated peers get here: they may learn which names exist.
    return refuse_with(ErrorCode::kInvalidConfig,
                       "no adapter named '" + select->name +
                           "' on this publisher; it serves: " + listed_names(streams_.names()));
  }
  conn->stream = stream;
  done.selected = std::move(stream);
  WS_INFO("publisher: subscriber '{}' selected adapter '{}'", printable(conn->handshake.client_name()),
          select->name);
  return write_sealed(conn->socket, conn->seal.get(), MsgType::kStreamSelected, {}, deadline, kPeer);
}

}  // namespace weightsync::detail
