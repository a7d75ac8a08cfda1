// weightsync/status.h: errors as values.
//
// Contract
// - Every fallible library call returns a Status or a Result<T>. No exception
//   crosses the library boundary.
// - Each ErrorCode maps to exactly one Action (action_for()) that tells the
//   caller what to do next. The set is deliberately small; see docs/protocol.md
//   for the codes that travel on the wire.
// - Status and Result are plain values: copyable, movable, not thread-safe to
//   mutate concurrently (like any value type).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace weightsync {

enum class ErrorCode : std::uint8_t {
  kOk = 0,
  // The operation did not finish within its deadline. Retry it.
  kTimeout = 1,
  // No version newer than the one asked for is published yet. Wait, then retry.
  kNotReady = 2,
  // The publisher took the slot back while it was being read (lease revoked or
  // seqlock stamp changed). The destination holds undefined bytes. Pull again:
  // a newer version is available.
  kVersionRevoked = 3,
  // The delivered bytes do not hash to the publisher's checksum. The
  // destination holds undefined bytes. Retry the pull.
  kChecksumMismatch = 4,
  // Every slot is leased and the publisher's policy is kSkip: this version was
  // not published. Publish the next one.
  kBusy = 5,
  // The peer closed the connection, reset it, or could not be reached.
  // Reconnect (create a new Subscriber).
  kConnectionLost = 6,
  // The peer sent bytes that break the protocol. Reconnect; if it persists the
  // two sides run incompatible versions.
  kProtocolError = 7,
  // Authentication failed (wrong or missing secret on one side). Fix the
  // configuration; retrying will not help.
  kAuthFailed = 8,
  // The configuration is invalid (bad environment variable, bind address not
  // allowed without a secret, unsupported memory kind, ...). Fix it.
  kInvalidConfig = 9,
  // The call's arguments are invalid (bad layout, wrong destination size,
  // non-increasing version, ...). Fix the call.
  kInvalidArgument = 10,
  // A bug in weightsync. Reconnect, and please report it.
  kInternal = 11,
  // The caller cancelled the call (weightsync/cancel.h: a CancelToken, or
  // Ctrl-C in Python). Nothing is broken: call again when you want to.
  // Never sent on the wire.
  kCancelled = 12,
};

// What a caller should do about an error.
enum class Action : std::uint8_t {
  kNone,              // success
  kRetry,             // retry the same call (maybe after a wait)
  kTakeNewerVersion,  // pull again; a newer version is available
  kReconnect,         // the connection is unusable; connect again
  kFixConfiguration,  // operator error: secrets, addresses, environment
  kFixCall,           // programmer error: arguments
};

Action action_for(ErrorCode code) noexcept;
const char* to_string(ErrorCode code) noexcept;
const char* to_string(Action action) noexcept;

// An error code and a human-readable message that says what went wrong and
// what to do next. A default-constructed Status is OK.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const noexcept { return code_ == ErrorCode::kOk; }
  ErrorCode code() const noexcept { return code_; }
  Action action() const noexcept { return action_for(code_); }
  const std::string& message() const noexcept { return message_; }
  // "<code>: <message>"; "ok" for success.
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Either a value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok())
      status_ = Status(ErrorCode::kInternal, "Result built from an OK Status without a value");
  }

  bool ok() const noexcept { return value_.has_value(); }
  const Status& status() const noexcept { return status_; }

  // Precondition: ok(). Checked only by the standard library's optional.
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace weightsync
