// Status, Result helpers and the ErrorCode -> Action table.
#include "weightsync/status.h"

namespace weightsync {

Action action_for(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk: return Action::kNone;
    case ErrorCode::kTimeout: return Action::kRetry;
    case ErrorCode::kNotReady: return Action::kRetry;
    case ErrorCode::kVersionRevoked: return Action::kTakeNewerVersion;
    case ErrorCode::kChecksumMismatch: return Action::kRetry;
    case ErrorCode::kBusy: return Action::kRetry;
    case ErrorCode::kConnectionLost: return Action::kReconnect;
    case ErrorCode::kProtocolError: return Action::kReconnect;
    case ErrorCode::kAuthFailed: return Action::kFixConfiguration;
    case ErrorCode::kInvalidConfig: return Action::kFixConfiguration;
    case ErrorCode::kInvalidArgument: return Action::kFixCall;
    case ErrorCode::kInternal: return Action::kReconnect;
    case ErrorCode::kCancelled: return Action::kRetry;
  }
  return Action::kReconnect;
}

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kNotReady: return "not_ready";
    case ErrorCode::kVersionRevoked: return "version_revoked";
    case ErrorCode::kChecksumMismatch: return "checksum_mismatch";
    case ErrorCode::kBusy: return "busy";
    case ErrorCode::kConnectionLost: return "connection_lost";
    case ErrorCode::kProtocolError: return "protocol_error";
    case ErrorCode::kAuthFailed: return "auth_failed";
    case ErrorCode::kInvalidConfig: return "invalid_config";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kCancelled: return "cancelled";
  }
  return "unknown";
}

const char* to_string(Action action) noexcept {
  switch (action) {
    case Action::kNone: return "none";
    case Action::kRetry: return "retry";
    case Action::kTakeNewerVersion: return "take_newer_version";
    case Action::kReconnect: return "reconnect";
    case Action::kFixConfiguration: return "fix_configuration";
    case Action::kFixCall: return "fix_call";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(weightsync::to_string(code_)) + ": " + message_;
}

}  // namespace weightsync
