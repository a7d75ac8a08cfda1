// weightsync/transports.h: which data transports this build has, and whether
// each can work on this machine.
//
// Contract
// - available_transports() lists every transport compiled into the library,
//   in negotiation preference order (best first). `viable` says whether it can
//   be used on this machine; when it cannot, `reason` says why, in words an
//   operator can act on. Probing is cheap (it may open and close a device, a
//   memfd and a socket) and leaves nothing behind.
// - A subscriber takes the best transport that is viable, offered by the
//   publisher, and allowed by SubscriberOptions::transport /
//   WEIGHTSYNC_TRANSPORT ("auto" allows all). Subscriber::transport() names
//   the one chosen. Thread-safe.
#pragma once

#include <string>
#include <vector>

namespace weightsync {

struct TransportInfo {
  std::string name;         // "shm", "tcp"
  std::string description;  // one line: what it does
  bool viable = false;
  std::string reason;  // why not, when !viable
  // Memory kinds it works with directly (docs/gpu.md). Every transport reads
  // host slots and writes host destinations except where noted; a transport
  // that cannot write CUDA memory still serves CUDA destinations, through the
  // subscriber's page-locked staging ring.
  bool reads_cuda_slots = false;    // serves publishers whose slots are CUDA memory (and then only those)
  bool writes_cuda_memory = false;  // copies straight into CUDA destinations
};

std::vector<TransportInfo> available_transports();

}  // namespace weightsync
