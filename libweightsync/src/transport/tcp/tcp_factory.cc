// The TCP transport's factory and its publisher side: data connections
// (handshake role kData) whose READ requests a server worker answers.
#include <string>

#include "transport/tcp/tcp_data_channel.h"
#include "transport/tcp/tcp_data_server.h"
#include "transport/tcp/tcp_transport.h"
#include "wire/frame_io.h"

namespace weightsync::detail {
namespace {

class TcpServed final : public ServedTransport {
 public:
  const char* name() const override { return "tcp"; }
  Status start(SlotRing& ring) override {
    ring_ = &ring;
    offer_ = TcpOffer{kTcpFeatureStreaming}.encode();
    return Status();
  }
  const std::vector<std::uint8_t>& offer() const override { return offer_; }
  std::optional<Role> connection_role() const override { return Role::kData; }

  ConnectionReply serve_connection(const ConnectionRequest& request) override {
    const Frame& frame = *request.frame;
    if (frame.type == MsgType::kBye) return ConnectionReply{Status(), true};
    if (frame.type != MsgType::kRead) {
      return ConnectionReply{
          reply_error(*request.socket, ErrorCode::kProtocolError,
                      std::string("unexpected ") + to_string(frame.type) + " on a data connection",
                      Deadline::after(std::chrono::milliseconds(request.io_timeout_ms)), "subscriber"),
          false};
    }
    return ConnectionReply{serve_tcp_read(*request.socket, *ring_, request.session, frame.payload,
                                          request.io_timeout_ms, request.bytes_served),
                           false};
  }

 private:
  SlotRing* ring_ = nullptr;
  std::vector<std::uint8_t> offer_;
};

class TcpFactory final : public TransportFactory {
 public:
  const char* name() const override { return "tcp"; }
  TransportInfo probe() const override {
    return TransportInfo{"tcp", "TCP streams on a second authenticated connection", true, ""};
  }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings& settings) const override {
    if (settings.cuda_slots) {
      return Status(ErrorCode::kInvalidConfig, "the slots are CUDA memory (cuda_ipc serves them)");
    }
    return std::unique_ptr<ServedTransport>(new TcpServed());
  }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>& /*offer*/,
                                            const ChannelParams& p) const override {
    return open_tcp_data_channel(TcpChannelConfig{p.publisher, p.secret, p.session_id, p.client_name,
                                                  p.connect_timeout_ms, p.encryption});
  }
};

}  // namespace

const TransportFactory& tcp_transport_factory() {
  static const TcpFactory factory;
  return factory;
}

}  // namespace weightsync::detail
