// The subscriber side of the publisher's local socket (local_session.h).
#include "transport/local_session.h"

#include "auth/client_connect.h"
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

}  // namespace weightsync::detail
