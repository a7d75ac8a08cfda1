// The subscriber side of the publisher's local socket (local_session.h).
#include "transport/local_session.h"

#include "auth/client_connect.h"
#include "common/host_identity.h"
#include "net/unix_socket.h"
#include "wire/frame_io.h"

namespace weightsync::detail {

Result<LocalSession> open_local_session(const LocalChannelConfig& config, MsgType regions_type) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(config.connect_timeout_ms));
  auto connected =
      connect_and_authenticate([&](Deadline d) { return connect_unix_abstract(config.socket_name, d); },
                               config.secret, Role::kShm, config.session_id, config.client_name, deadline);
  if (!connected.ok()) return connected.status();
  auto frame = read_expected(connected->socket, regions_type, kMaxReplyPayload, deadline, kLocalPublisherPeer);
  if (!frame.ok()) return frame.status();
  return LocalSession{std::move(connected->socket), std::move(*frame), deadline};
}

Result<LocalChannelConfig> local_channel_config(const char* transport, const std::vector<std::uint8_t>& offer,
                                                const ChannelParams& params) {
  auto shm = ShmOffer::decode(offer);
  if (!shm.ok()) {
    return Status(ErrorCode::kProtocolError, std::string("the publisher's ") + transport + " offer is malformed");
  }
  auto host = host_identity();  // boot id + network namespace, or WEIGHTSYNC_HOST_ID
  if (!host.ok()) return host.status();
  if (host->empty() || shm->boot_id != *host) {
    return Status(ErrorCode::kInvalidConfig, "the publisher runs on another host (another kernel or network namespace)");
  }
  return LocalChannelConfig{shm->socket_name,         params.secret,     params.session_id, params.client_name,
                            params.connect_timeout_ms, params.slot_count, params.slot_bytes};
}

Result<std::string> local_host_for_serving() {
  auto host = host_identity();
  if (!host.ok()) return host.status();
  if (host->empty()) {
    return Status(ErrorCode::kInvalidConfig,
                  "no host identity: /proc/sys/kernel/random/boot_id or /proc/self/ns/net unreadable");
  }
  return *host;
}

}  // namespace weightsync::detail
