// connect_and_authenticate(): the handshake with backoff on kBusy.
#include "auth/client_connect.h"

#include <algorithm>
#include <random>
#include <thread>

namespace weightsync::detail {

Result<AuthenticatedSocket> connect_and_authenticate(const std::function<Result<Socket>(Deadline)>& open,
                                                     const std::string& secret, Role role,
                                                     std::uint64_t session_id, const std::string& client_name,
                                                     Deadline deadline, std::uint8_t features) {
  std::minstd_rand jitter(std::random_device{}());
  std::chrono::milliseconds backoff(10);
  for (;;) {
    auto socket = open(deadline);
    if (!socket.ok()) return socket.status();
    HandshakeOutcome outcome;
    auto session = client_handshake(*socket, secret, role, session_id, client_name, deadline, features, &outcome);
    if (session.ok()) return AuthenticatedSocket{std::move(*socket), *session, outcome};
    if (session.status().code() != ErrorCode::kBusy) return session.status();
    const auto pause = backoff + std::chrono::milliseconds(jitter() % (backoff.count() / 2 + 1));
    const int left = deadline.poll_millis();
    if (left >= 0 && left <= pause.count()) return session.status();
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
}

}  // namespace weightsync::detail
