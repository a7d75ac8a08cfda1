// TCP data transport, subscriber side.
#include "transport/tcp/tcp_data_channel.h"

#include <sys/uio.h>

#include <cstdlib>
#include <string>

#include "auth/client_connect.h"
#include "auth/integrity.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

constexpr const char* kPeer = "publisher";

// A transfer's waits wake the reader once this much is queued (SO_RCVLOWAT):
// at 1 Gbit/s about one wakeup per 1 MiB instead of one per 100-130 KiB, the
// relay's forwarding thread's largest cost after its copy
// (docs/perf/relay_cpu.md). WEIGHTSYNC_TCP_RCVLOWAT=0: every arrival wakes it.
constexpr std::size_t kWakeBytes = 1u << 20;

std::size_t wake_bytes() {
  static const std::size_t bytes = [] {
    const char* setting = std::getenv("WEIGHTSYNC_TCP_RCVLOWAT");
    return setting != nullptr && std::string(setting) == "0" ? std::size_t{1} : kWakeBytes;
  }();
  return bytes;
}

class TcpDataChannel final : public DataChannel {
 public:
  explicit TcpDataChannel(Socket socket) : socket_(std::move(socket)) {}
  ~TcpDataChannel() override { close(); }

  const char* name() const override { return "tcp"; }

  Result<std::uint64_t> read(const ReadRequest& request) override {
    const auto& plan = *request.plan;
    std::uint64_t stamp = request.stamp;
    // One READ per batch of ranges; the publisher streams each batch while we
    // receive it, so a batch is one pipelined transfer.
    for (std::size_t first = 0; first < plan.size(); first += kMaxReadRanges) {
      const std::size_t last = std::min(plan.size(), first + kMaxReadRanges);
      ReadMsg msg;
      msg.ranges.reserve(last - first);
      msg.lease_id = request.lease_id;
      std::uint64_t total = 0;
      iov_.clear();
      for (std::size_t i = first; i < last; ++i) {
        msg.ranges.push_back(ByteRange{plan[i].slot_offset, plan[i].length});
        iov_.push_back(iovec{plan[i].dest, plan[i].length});
        total += plan[i].length;
      }
      Status s = write_frame(socket_, MsgType::kRead, msg.encode(),
                             Deadline::after(std::chrono::milliseconds(request.stall_ms)), kPeer);
      if (!s.ok()) return s;
      auto data = read_expected(socket_, MsgType::kData, kMaxReplyPayload,
                                Deadline::after(std::chrono::milliseconds(request.stall_ms)), kPeer);
      if (!data.ok()) return data.status();
      auto header = DataMsg::decode(data->payload);
      if (!header.ok()) return header.status();
      if (header->total != total) {
        return Status(ErrorCode::kProtocolError, "publisher announced " + std::to_string(header->total) +
                                                     " bytes for a READ of " + std::to_string(total));
      }
      s = recv_iov(socket_, iov_.data(), iov_.size(), request.stall_ms, kPeer, request.on_bytes, wake_bytes());
      if (!s.ok()) return s;
      auto end = read_expected(socket_, MsgType::kDataEnd, kMaxReplyPayload,
                               Deadline::after(std::chrono::milliseconds(request.stall_ms)), kPeer);
      if (!end.ok()) return end.status();
      auto trailer = DataEndMsg::decode(end->payload);
      if (!trailer.ok()) return trailer.status();
      if (trailer->stamp_after != request.stamp) stamp = trailer->stamp_after;
    }
    return stamp;
  }

  void close() override {
    if (!socket_.valid()) return;
    (void)write_frame(socket_, MsgType::kBye, {}, Deadline::after(std::chrono::milliseconds(100)), kPeer);
    socket_.close();
  }

 private:
  Socket socket_;
  std::vector<iovec> iov_;
};

}  // namespace

Result<std::unique_ptr<DataChannel>> open_tcp_data_channel(const TcpChannelConfig& config) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(config.connect_timeout_ms));
  auto connected =
      connect_and_authenticate([&](Deadline d) { return connect_tcp(config.publisher, d); }, config.secret,
                               Role::kData, config.session_id, config.client_name, deadline,
                               hello_features(Role::kData, false, config.encryption));
  if (!connected.ok()) return connected.status();
  if (config.encryption) {
    Status s = enable_encryption(connected->socket, config.secret, connected->session_id,
                                 connected->outcome.client_nonce, connected->outcome.server_nonce,
                                 /*publisher_side=*/false);
    if (!s.ok()) return s;
  }
  return std::unique_ptr<DataChannel>(new TcpDataChannel(std::move(connected->socket)));
}

}  // namespace weightsync::detail
