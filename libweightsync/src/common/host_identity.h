// Which "host" this process runs on, for the same-host transports (shm,
// cuda_ipc): a publisher offers them with its host identity, and a subscriber
// uses them only when its own identity is equal.
//
// The identity is WEIGHTSYNC_HOST_ID when set (an operator override: e.g. for
// sandboxes that hide or fake the procfs files below, give processes that can
// reach each other's abstract Unix sockets one id; or give processes
// different ids to keep them off the local transports), else
//   <boot id>:<network namespace inode>
// where the boot id is /proc/sys/kernel/random/boot_id (random, fixed until
// the next reboot: the kernel instance) and the inode is that of
// /proc/self/ns/net. The network namespace is part of it because the local
// transports meet on an abstract Unix socket, which exists only inside one
// network namespace: two namespaces of one kernel (containers, the test bed of
// scripts/testbed.sh) are two hosts to weightsync.
//
// Result: the identity (at most kMaxHostIdBytes bytes, the limit of the wire
// field that carries it); "" when it cannot be determined (procfs unreadable:
// then no peer is recognised as same-host and the local transports are not
// used); kInvalidConfig naming WEIGHTSYNC_HOST_ID when that variable is
// malformed (more than 64 bytes, or characters other than letters, digits and
// . _ : -). Reads the environment and procfs on every call (cheap; called when
// a publisher starts, a subscriber negotiates, or transports are probed).
#pragma once

#include <cstddef>
#include <string>

#include "weightsync/status.h"

namespace weightsync::detail {

inline constexpr std::size_t kMaxHostIdBytes = 64;  // ShmOffer's str16 field (wire/messages.cc)

Result<std::string> host_identity();

}  // namespace weightsync::detail
