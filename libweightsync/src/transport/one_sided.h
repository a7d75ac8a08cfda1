// What the one-sided network transports (ucx, verbs) refuse, in one place:
// CUDA slots (cuda_ipc serves them) and encryption (a one-sided read cannot
// be encrypted; tcp and the same-host transports serve instead).
#pragma once

#include "transport/transport.h"

namespace weightsync::detail {

inline Status one_sided_serve_refusal(const ServeSettings& settings) {
  if (settings.cuda_slots) {
    return Status(ErrorCode::kInvalidConfig, "the slots are CUDA memory (cuda_ipc serves them)");
  }
  if (settings.encryption) {
    return Status(ErrorCode::kInvalidConfig,
                  "encryption is on and one-sided reads cannot be encrypted (tcp and same-host shm serve)");
  }
  return Status();
}

inline Status one_sided_use_refusal(const ChannelParams& params) {
  if (!params.encryption) return Status();
  return Status(ErrorCode::kInvalidConfig,
                "not used with encryption: its one-sided reads cannot be encrypted (use tcp, or shm on the "
                "same host)");
}

}  // namespace weightsync::detail
