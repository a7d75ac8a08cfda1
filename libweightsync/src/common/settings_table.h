// The settings table: one row per setting weightsync reads from the
// environment, with its option name, variable, default, parser, side and a
// one-line description; and the generic resolver over it.
//
// Contract
// - Resolution is: explicit option > the row's environment variable (when set
//   and non-empty) > the row's default, remembering which one gave the value.
// - A malformed option or variable is kInvalidConfig naming the variable and
//   the accepted values. Resolving a row with the wrong type (a bool row as
//   milliseconds) is kInternal: a bug, not a configuration.
// - Publisher::create() (publisher/publisher_settings.h), Subscriber::connect()
//   (subscriber/subscriber_settings.h), describe_settings() and weightsync-info
//   read their settings from this table; the list in the header comment of
//   weightsync/options.h names every row (tests/unit/settings_table_test.cc
//   checks both ways, and that every WEIGHTSYNC_* name in the sources is a row).
// - Rows marked kInformational are read by the code that uses them (the
//   transports, the logger, host_identity()); the table documents and reports
//   them.
// - The table is immutable; every function is thread-safe (they read the
//   environment, which nothing in the library writes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/log.h"
#include "weightsync/settings.h"
#include "weightsync/status.h"

namespace weightsync::detail {

// One per row, in table order.
enum class SettingId : std::uint8_t {
  kSecret,
  kBindAddress,
  kIoTimeout,
  kHandshakeTimeout,
  kIdleTimeout,
  kLeaseTimeout,
  kConnectTimeout,
  kTransport,
  kChecksum,
  kDeltas,
  kIntegrity,
  kEncryption,
  kSigningKey,
  kTrustedKey,
  kSlotAllocator,
  kHostId,
  kVerbsDevice,
  kUcxAllowEmulatedRma,
  kUcxDirect,
  kUcxTls,
  kTcpRcvLowat,
  kLogLevel,
  // Read by the weightsync-relay daemon (tools/relay), not by the library.
  kRelayUpstreams,
  kRelayListen,
  kRelayHealthAddress,
  kRelayMetricsAddress,
  kRelaySlots,
};
inline constexpr std::size_t kSettingCount = static_cast<std::size_t>(SettingId::kRelaySlots) + 1;

// How a row's text (option, variable or default) is read.
enum class SettingParser : std::uint8_t {
  kString,        // any text
  kSecret,        // any text; reported only as set (with its length) or not
  kFilePath,      // a file's path; "" means none
  kEnum,          // one of the row's `accepted` values
  kMillis,        // whole milliseconds in [1, 86400000]
  kMillisOrZero,  // whole milliseconds in [0, 86400000]; 0 means never
  kBool,          // 1, true, on, yes / 0, false, off, no
};

// Who reads a row.
enum class SettingSide : std::uint8_t {
  kPublisher,      // resolved by Publisher::create()
  kSubscriber,     // resolved by Subscriber::connect()
  kBoth,           // resolved by both
  kInformational,  // read where it is used (a transport, the logger); reported only
};

const char* to_string(SettingParser parser) noexcept;
const char* to_string(SettingSide side) noexcept;

struct SettingRow {
  SettingId id;
  const char* name;  // the PublisherOptions / SubscriberOptions field ("io_timeout_ms"), or the report's name
  const char* environment;  // "WEIGHTSYNC_TIMEOUT_MS" (UCX_TLS: UCX's own variable)
  const char* fallback;     // the default, spelled as the variable would be ("10000", "0", "auto", "")
  SettingParser parser;
  const char* accepted;  // kEnum: "auto, memfd, ucx"; else nullptr
  SettingSide side;
  const char* unset;        // shown instead of an empty value ("(none: publishers sign nothing)"), or nullptr
  const char* description;  // one line
};

// Every row, in SettingId order.
const std::array<SettingRow, kSettingCount>& setting_table() noexcept;
const SettingRow& setting_row(SettingId id) noexcept;
// The row of an environment variable, or nullptr.
const SettingRow* find_setting(std::string_view environment) noexcept;

enum class SettingSource { kDefault, kEnvironment, kOption };
const char* to_string(SettingSource source) noexcept;

template <typename T>
struct Setting {
  T value{};
  SettingSource source = SettingSource::kDefault;
};

// The row's variable when set and non-empty, else nullptr.
const char* environment_value(SettingId id) noexcept;

// Resolves a row: the option if set, else the parsed variable, else the
// parsed default. T is std::string (kString, kSecret, kFilePath, kEnum), int
// (kMillis, kMillisOrZero) or bool (kBool).
template <typename T>
Result<Setting<T>> resolve_setting(SettingId id, const std::optional<T>& option);
// The row's default, parsed (what a malformed value leaves in place).
template <typename T>
Setting<T> default_setting(SettingId id);

template <>
Result<Setting<std::string>> resolve_setting(SettingId id, const std::optional<std::string>& option);
template <>
Result<Setting<int>> resolve_setting(SettingId id, const std::optional<int>& option);
template <>
Result<Setting<bool>> resolve_setting(SettingId id, const std::optional<bool>& option);
template <>
Setting<std::string> default_setting(SettingId id);
template <>
Setting<int> default_setting(SettingId id);
template <>
Setting<bool> default_setting(SettingId id);

// A problem found while resolving the settings of one side, with the row it
// concerns (nullopt: an option without a row, e.g. max_connections).
struct SettingProblem {
  std::optional<SettingId> row;
  Status status;
};

// resolve_setting(), or on failure the default, with the failure appended to `problems`.
template <typename T>
Setting<T> resolve_or_default(SettingId id, const std::optional<T>& option,
                              std::vector<SettingProblem>& problems) {
  auto resolved = resolve_setting<T>(id, option);
  if (resolved.ok()) return std::move(*resolved);
  problems.push_back(SettingProblem{id, resolved.status()});
  return default_setting<T>(id);
}

// A resolved row as reported (describe_settings(), Publisher::settings(),
// Subscriber::settings()): the secret as "(set, N bytes)", milliseconds as
// "N ms", booleans as on/off, an empty value as the row's `unset` text.
SettingReport report_setting(SettingId id, const Setting<std::string>& setting);
SettingReport report_setting(SettingId id, const Setting<int>& setting);
SettingReport report_setting(SettingId id, const Setting<bool>& setting);

// "name value (source), ..." for a start-up log line.
std::string settings_log_text(const std::vector<SettingReport>& reports);

// WEIGHTSYNC_LOG_LEVEL's values ("warning" too).
std::optional<LogLevel> parse_log_level(std::string_view text) noexcept;

}  // namespace weightsync::detail
