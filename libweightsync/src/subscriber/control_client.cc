// ControlClient: control-plane requests of a subscriber.
#include "subscriber/control_client.h"

#include <poll.h>

#include "auth/client_connect.h"
#include "wire/frame_io.h"
#include "wire/stream_messages.h"

namespace weightsync::detail {
namespace {
constexpr const char* kPeer = "publisher";
}

Result<ControlClient> ControlClient::connect(const HostPort& publisher, const std::string& secret,
                                             const std::string& client_name, int connect_timeout_ms,
                                             int io_timeout_ms, bool integrity, bool encryption) {
  integrity = integrity || encryption;
  if (integrity && secret.empty()) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string(encryption ? "encryption" : "integrity") +
                      " needs a secret: set WEIGHTSYNC_SECRET on both sides");
  }
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(connect_timeout_ms));
  auto connected = connect_and_authenticate([&](Deadline d) { return connect_tcp(publisher, d); }, secret,
                                            Role::kControl, 0, client_name, deadline,
                                            hello_features(Role::kControl, integrity, encryption));
  if (!connected.ok()) return connected.status();
  if (encryption) {
    Status s = enable_encryption(connected->socket, secret, connected->session_id, connected->outcome.client_nonce,
                                 connected->outcome.server_nonce, /*publisher_side=*/false);
    if (!s.ok()) return s;
  }
  std::unique_ptr<FrameSeal> seal;
  if (integrity) {
    auto keys = derive_session_keys(secret, connected->session_id, connected->outcome.client_nonce,
                                    connected->outcome.server_nonce);
    if (!keys.ok()) return keys.status();
    seal = std::make_unique<FrameSeal>(keys->to_publisher, keys->to_subscriber);
  }
  return ControlClient(std::move(connected->socket), connected->session_id, io_timeout_ms, std::move(seal));
}

Result<Frame> ControlClient::call(MsgType request, const std::vector<std::uint8_t>& payload, MsgType reply,
                                  int extra_wait_ms) {
  Status s = write_sealed(socket_, seal_.get(), request, payload,
                          Deadline::after(std::chrono::milliseconds(io_timeout_ms_)), kPeer);
  if (!s.ok()) return s;
  const auto wait = std::chrono::milliseconds(static_cast<long long>(io_timeout_ms_) + extra_wait_ms);
  return read_expected_sealed(socket_, seal_.get(), reply, kMaxReplyPayload, Deadline::after(wait), kPeer);
}

Status ControlClient::select_stream(const std::string& name) {
  auto frame = call(MsgType::kSelectStream, SelectStreamMsg{name}.encode(), MsgType::kStreamSelected);
  if (!frame.ok()) return frame.status();
  if (!frame->payload.empty()) return Status(ErrorCode::kProtocolError, "malformed STREAM_SELECTED message");
  return Status();
}

Result<WeightLayout> ControlClient::get_layout() {
  auto frame = call(MsgType::kGetLayout, {}, MsgType::kLayout);
  if (!frame.ok()) return frame.status();
  auto msg = LayoutMsg::decode(frame->payload);
  if (!msg.ok()) return msg.status();
  auto layout = WeightLayout::deserialize(msg->layout.data(), msg->layout.size());
  if (!layout.ok())
    return Status(ErrorCode::kProtocolError, "publisher sent a bad layout: " + layout.status().message());
  return layout;
}

Result<SlotTableMsg> ControlClient::get_slot_table() {
  auto frame = call(MsgType::kGetSlotTable, {}, MsgType::kSlotTable);
  if (!frame.ok()) return frame.status();
  return SlotTableMsg::decode(frame->payload);
}

Result<std::uint64_t> ControlClient::query_version(std::uint64_t newer_than, std::uint32_t wait_ms,
                                                   bool streaming) {
  auto frame = call(MsgType::kQueryVersion, QueryVersionMsg{newer_than, wait_ms, streaming}.encode(),
                    MsgType::kVersion,
                    static_cast<int>(wait_ms));
  if (!frame.ok()) return frame.status();
  auto msg = VersionMsg::decode(frame->payload);
  if (!msg.ok()) return msg.status();
  return msg->latest;
}

Result<DeltaMsg> ControlClient::fetch_delta(const FetchDeltaMsg& request, std::vector<std::uint8_t>& bytes) {
  auto frame = call(MsgType::kFetchDelta, request.encode(), MsgType::kDelta, static_cast<int>(request.wait_ms));
  if (!frame.ok()) return frame.status();
  auto delta = DeltaMsg::decode(frame->payload);
  if (!delta.ok()) return delta.status();
  const std::uint64_t total = delta->total_bytes();
  if (delta->links.front().from != request.have || delta->links.back().to < request.at_least ||
      total >= request.max_bytes) {
    return Status(ErrorCode::kProtocolError, "publisher sent a delta chain that was not asked for (" +
                                                 std::to_string(delta->links.front().from) + " -> " +
                                                 std::to_string(delta->links.back().to) + ", " +
                                                 std::to_string(total) + " bytes)");
  }
  bytes.resize(total);
  iovec iov{bytes.data(), bytes.size()};
  Status s = recv_iov(socket_, &iov, 1, io_timeout_ms_, kPeer, nullptr);
  if (!s.ok()) return s;
  return delta;
}

Result<LeaseMsg> ControlClient::acquire(std::uint64_t newer_than, bool streaming) {
  auto frame = call(MsgType::kAcquire, AcquireMsg{newer_than, streaming}.encode(), MsgType::kLease);
  if (!frame.ok()) return frame.status();
  auto lease = LeaseMsg::decode(frame->payload);
  if (lease.ok() && lease->streaming() && !streaming) {
    return Status(ErrorCode::kProtocolError, "publisher leased an in-progress version that was not asked for");
  }
  return lease;
}

Result<LeaseMsg> ControlClient::acquire_view(std::uint64_t version, bool exact, std::uint32_t view_id) {
  auto frame = call(MsgType::kAcquireView, AcquireViewMsg{version, exact, view_id}.encode(), MsgType::kLease);
  if (!frame.ok()) return frame.status();
  auto lease = LeaseMsg::decode(frame->payload);
  if (!lease.ok()) return lease;
  if (lease->streaming()) {
    return Status(ErrorCode::kProtocolError, "publisher leased an in-progress version that was not asked for");
  }
  if (exact && lease->version != version) {
    return Status(ErrorCode::kProtocolError, "publisher leased version " + std::to_string(lease->version) +
                                                 " for an exact request of version " + std::to_string(version));
  }
  if (!exact && lease->version <= version) {
    return Status(ErrorCode::kProtocolError, "publisher leased version " + std::to_string(lease->version) +
                                                 ", not newer than " + std::to_string(version));
  }
  return lease;
}

Result<std::uint32_t> ControlClient::register_view(const std::vector<ViewEntry>& entries) {
  if (entries.empty()) return Status(ErrorCode::kInvalidArgument, "a view needs at least one range");
  std::uint32_t id = 0;
  for (std::size_t first = 0; first < entries.size(); first += kMaxViewEntriesPerMessage) {
    const std::size_t last = std::min<std::size_t>(entries.size(), first + kMaxViewEntriesPerMessage);
    RegisterViewMsg part;
    part.view_id = id;
    part.entries.assign(entries.begin() + static_cast<std::ptrdiff_t>(first),
                        entries.begin() + static_cast<std::ptrdiff_t>(last));
    auto frame = call(MsgType::kRegisterView, part.encode(), MsgType::kView);
    if (!frame.ok()) return frame.status();
    auto view = ViewMsg::decode(frame->payload);
    if (!view.ok()) return view.status();
    if ((id != 0 && view->view_id != id) || view->entries != last) {
      return Status(ErrorCode::kProtocolError, "publisher's VIEW does not match the registered ranges");
    }
    id = view->view_id;
  }
  return id;
}

Result<WatermarkMsg> ControlClient::wait_watermark(std::uint64_t lease_id, std::uint64_t bytes) {
  // The publisher answers within min(our I/O timeout, its own); the reply
  // itself gets our I/O timeout on top.
  const auto wait = static_cast<std::uint32_t>(io_timeout_ms_);
  auto frame = call(MsgType::kWaitWatermark, WaitWatermarkMsg{lease_id, bytes, wait}.encode(),
                    MsgType::kWatermark, io_timeout_ms_);
  if (!frame.ok()) return frame.status();
  return WatermarkMsg::decode(frame->payload);
}

Status ControlClient::release(std::uint64_t lease_id) {
  return write_sealed(socket_, seal_.get(), MsgType::kRelease, ReleaseMsg{lease_id}.encode(),
                      Deadline::after(std::chrono::milliseconds(io_timeout_ms_)), kPeer);
}

Result<std::vector<std::uint8_t>> ControlClient::fetch_signature(std::uint64_t version) {
  auto frame = call(MsgType::kFetchSignature, FetchSignatureMsg{version}.encode(), MsgType::kSignature);
  if (!frame.ok()) return frame.status();
  return std::move(frame->payload);
}

Result<std::vector<std::uint8_t>> ControlClient::transport_connect(const std::string& transport,
                                                                   const std::vector<std::uint8_t>& blob) {
  auto frame = call(MsgType::kTransportConnect, TransportConnectMsg{transport, blob}.encode(),
                    MsgType::kTransportAccept);
  if (!frame.ok()) return frame.status();
  auto msg = TransportConnectMsg::decode(frame->payload);
  if (!msg.ok()) return msg.status();
  if (msg->transport != transport)
    return Status(ErrorCode::kProtocolError, "TRANSPORT_ACCEPT for another transport");
  return msg->blob;
}

bool ControlClient::peer_alive() const {
  pollfd p{socket_.fd(), POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

bool ControlClient::quiet() const {
  if (socket_.has_pending_input()) return false;
  pollfd p{socket_.fd(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0;
}

void ControlClient::bye() {
  if (!socket_.valid()) return;
  (void)write_sealed(socket_, seal_.get(), MsgType::kBye, {}, Deadline::after(std::chrono::milliseconds(100)), kPeer);
  socket_.close();
}

}  // namespace weightsync::detail
