// Who is on the other end of a local connection: the uid that owns the peer's
// socket, as the kernel records it. Without a configured secret the publisher
// serves only its own uid (issue 14), and asks here who connected.
//
// Contract
// - What it proves: the kernel's word on the uid that owns the peer socket
//   (SO_PEERCRED for Unix sockets: the uid at connect() or socketpair();
//   NETLINK_SOCK_DIAG / inet_diag for TCP over loopback: the uid that created
//   the peer's socket, mapped into this process's user namespace). It says
//   nothing about what that process will do: a root peer can own any socket
//   (and a root-owned relay, e.g. a port forwarder, reports uid 0), and a
//   process can hand its connected socket to another process of another user.
// - Threads: every function is safe to call from any thread, concurrently;
//   each TCP lookup opens and closes its own netlink socket (close-on-exec).
// - Time: tcp_loopback_peer_uid() waits at most kPeerLookupTimeoutMs for the
//   kernel's reply (poll with a deadline); the others do not block.
// - Errors:
//   kAuthFailed       no owner can be established for the peer: it is not on
//                     this host (not 127.0.0.0/8 or ::1), or the kernel has no
//                     live socket with that 4-tuple (the peer already closed,
//                     or it is in another network namespace), or a Unix peer
//                     carries no credentials. The caller must treat the peer
//                     as unidentified and refuse it; the operator's fix is a
//                     secret (kFixConfiguration), which is why this code and
//                     not kInvalidArgument ("fix the call") is used.
//   kInvalidArgument  the socket is not a connected socket of the asked kind
//                     (a TCP lookup on a Unix socket, or the reverse).
//   kInternal         the lookup itself failed (no netlink socket, the kernel
//                     has no tcp_diag, a malformed or late reply); messages
//                     say which step failed and why.
#pragma once

#include <sys/types.h>

#include "net/socket.h"
#include "weightsync/status.h"

namespace weightsync::detail {

// Longest wait for the kernel's inet_diag reply.
inline constexpr int kPeerLookupTimeoutMs = 2000;

// The uid of the peer of a connected AF_UNIX socket (SO_PEERCRED).
Result<uid_t> unix_peer_uid(const Socket& socket);

// The uid owning the peer's socket of an accepted (or connected) TCP
// connection whose peer is on this host, IPv4 or IPv6 (v4-mapped included):
// an exact SOCK_DIAG_BY_FAMILY lookup of the socket whose local address is our
// peer address and whose remote address is our local address.
Result<uid_t> tcp_loopback_peer_uid(const Socket& socket);

// unix_peer_uid() when `is_unix`, else tcp_loopback_peer_uid().
Result<uid_t> peer_uid(const Socket& socket, bool is_unix);

// True when `uid` is this process's effective uid.
bool same_uid_as_me(uid_t uid) noexcept;

}  // namespace weightsync::detail
