// ControlClient: control-plane requests of a subscriber.
#include "subscriber/control_client.h"

#include <poll.h>

#include "auth/client_connect.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {
constexpr const char* kPeer = "publisher";
}

Result<ControlClient> ControlClient::connect(const HostPort& publisher, const std::string& secret,
                                             const std::string& client_name, int connect_timeout_ms,
                                             int io_timeout_ms) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(connect_timeout_ms));
  auto connected = connect_and_authenticate([&](Deadline d) { return connect_tcp(publisher, d); }, secret,
                                            Role::kControl, 0, client_name, deadline);
  if (!connected.ok()) return connected.status();
  return ControlClient(std::move(connected->socket), connected->session_id, io_timeout_ms);
}

Result<Frame> ControlClient::call(MsgType request, const std::vector<std::uint8_t>& payload, MsgType reply,
                                  int extra_wait_ms) {
  Status s = write_frame(socket_, request, payload,
                         Deadline::after(std::chrono::milliseconds(io_timeout_ms_)), kPeer);
  if (!s.ok()) return s;
  const auto wait = std::chrono::milliseconds(static_cast<long long>(io_timeout_ms_) + extra_wait_ms);
  return read_expected(socket_, reply, kMaxReplyPayload, Deadline::after(wait), kPeer);
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

Result<LeaseMsg> ControlClient::acquire(std::uint64_t newer_than, bool streaming) {
  auto frame = call(MsgType::kAcquire, AcquireMsg{newer_than, streaming}.encode(), MsgType::kLease);
  if (!frame.ok()) return frame.status();
  auto lease = LeaseMsg::decode(frame->payload);
  if (lease.ok() && lease->streaming() && !streaming) {
    return Status(ErrorCode::kProtocolError, "publisher leased an in-progress version that was not asked for");
  }
  return lease;
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
  return write_frame(socket_, MsgType::kRelease, ReleaseMsg{lease_id}.encode(),
                     Deadline::after(std::chrono::milliseconds(io_timeout_ms_)), kPeer);
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

void ControlClient::bye() {
  if (!socket_.valid()) return;
  (void)write_frame(socket_, MsgType::kBye, {}, Deadline::after(std::chrono::milliseconds(100)), kPeer);
  socket_.close();
}

}  // namespace weightsync::detail
