// Unix-domain stream sockets in the abstract namespace (no file to create or
// clean up; the name is random and never guessable) and descriptor passing
// with SCM_RIGHTS, for the same-host shared-memory transport. Errors follow
// net/socket.h: kTimeout, kConnectionLost; messages name `peer`.
#pragma once

#include <string>
#include <vector>

#include "net/socket.h"

namespace weightsync::detail {

// Most descriptors send_fds()/recv_fds() pass in one message.
inline constexpr std::size_t kMaxPassedFds = 250;

// `name` is used without the leading NUL of abstract socket names.
Result<Socket> listen_unix_abstract(const std::string& name);
Result<Socket> connect_unix_abstract(const std::string& name, Deadline deadline);
Result<Socket> accept_unix(const Socket& listener);

// Sends one marker byte carrying `fds` (at most 250).
Status send_fds(const Socket& socket, const std::vector<int>& fds, Deadline deadline, const char* peer);
// Receives the marker byte and exactly `count` descriptors (the caller owns them).
Result<std::vector<int>> recv_fds(const Socket& socket, std::size_t count, Deadline deadline,
                                  const char* peer);

}  // namespace weightsync::detail
