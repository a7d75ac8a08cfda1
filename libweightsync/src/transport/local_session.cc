// The subscriber side of the publisher's local socket (local_session.h).
#include "transport/local_session.h"

#include "auth/handshake.h"
#include "net/unix_socket.h"
#include "wire/frame_io.h"

namespace weightsync::detail {

Result<LocalSession> open_local_session(const LocalChannelConfig& config, MsgType regions_type) {
  const Deadline deadline = Deadline::after(std::chrono::milliseconds(config.connect_timeout_ms));
  auto socket = connect_unix_abstract(config.socket_name, deadline);
  if (!socket.ok()) return socket.status();
  auto session =
      client_handshake(*socket, config.secret, Role::kShm, config.session_id, config.client_name, deadline);
  if (!session.ok()) return session.status();
  auto frame = read_expected(*socket, regions_type, kMaxReplyPayload, deadline, kLocalPublisherPeer);
  if (!frame.ok()) return frame.status();
  return LocalSession{std::move(*socket), std::move(*frame), deadline};
}

}  // namespace weightsync::detail
