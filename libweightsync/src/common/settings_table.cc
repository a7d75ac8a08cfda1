// The settings table and its resolver (common/settings_table.h).
#include "common/settings_table.h"

#include <cerrno>
#include <cstdlib>

namespace weightsync::detail {
namespace {

using P = SettingParser;
using S = SettingSide;

// Keep in SettingId order, and keep weightsync/options.h's list in step.
constexpr std::array<SettingRow, kSettingCount> kTable{{
    {SettingId::kSecret, "secret", "WEIGHTSYNC_SECRET", "", P::kSecret, nullptr, S::kBoth,
     "(none: publishers listen on loopback only)", "shared secret for peer authentication"},
    {SettingId::kBindAddress, "bind_address", "WEIGHTSYNC_BIND", "127.0.0.1", P::kString, nullptr,
     S::kPublisher, nullptr,
     "publisher bind address (localhost means 127.0.0.1; any other non-loopback one needs a secret)"},
    {SettingId::kIoTimeout, "io_timeout_ms", "WEIGHTSYNC_TIMEOUT_MS", "10000", P::kMillis, nullptr, S::kBoth,
     nullptr, "I/O timeout on a stalled peer"},
    {SettingId::kHandshakeTimeout, "handshake_timeout_ms", "WEIGHTSYNC_HANDSHAKE_TIMEOUT_MS", "2000",
     P::kMillis, nullptr, S::kPublisher, nullptr, "time a new connection has to authenticate"},
    {SettingId::kIdleTimeout, "idle_timeout_ms", "WEIGHTSYNC_IDLE_TIMEOUT_MS", "0", P::kMillisOrZero, nullptr,
     S::kPublisher, nullptr, "close authenticated connections silent this long (0: never)"},
    {SettingId::kLeaseTimeout, "lease_timeout_ms", "WEIGHTSYNC_LEASE_TIMEOUT_MS", "60000", P::kMillis,
     nullptr, S::kPublisher, nullptr, "age after which a lease may be taken back under any policy"},
    {SettingId::kConnectTimeout, "connect_timeout_ms", "WEIGHTSYNC_CONNECT_TIMEOUT_MS", "5000", P::kMillis,
     nullptr, S::kSubscriber, nullptr, "connect + handshake timeout"},
    {SettingId::kTransport, "transport", "WEIGHTSYNC_TRANSPORT", "auto", P::kString, nullptr, S::kSubscriber,
     nullptr, "data transport: auto or a name from available_transports() (verbs, ucx, cuda_ipc, shm, tcp)"},
    {SettingId::kChecksum, "checksum", "WEIGHTSYNC_CHECKSUM", "0", P::kBool, nullptr, S::kPublisher, nullptr,
     "publisher computes xxHash3 per version (on with integrity)"},
    {SettingId::kDeltas, "deltas", "WEIGHTSYNC_DELTAS", "0", P::kBool, nullptr, S::kPublisher, nullptr,
     "publisher computes delta versions"},
    {SettingId::kIntegrity, "integrity", "WEIGHTSYNC_INTEGRITY", "0", P::kBool, nullptr, S::kBoth, nullptr,
     "keyed version tags and sealed control frames; needs a secret (on with encryption)"},
    {SettingId::kEncryption, "encryption", "WEIGHTSYNC_ENCRYPTION", "0", P::kBool, nullptr, S::kBoth, nullptr,
     "AES-128-GCM records on every TCP connection; needs a secret, implies integrity"},
    {SettingId::kSigningKey, "signing_key", "WEIGHTSYNC_SIGNING_KEY", "", P::kFilePath, nullptr,
     S::kPublisher, "(none: publishers sign nothing)",
     "Ed25519 private key (PEM file) that signs every version"},
    {SettingId::kTrustedKey, "trusted_key", "WEIGHTSYNC_TRUSTED_KEY", "", P::kFilePath, nullptr,
     S::kSubscriber, "(none: subscribers do not check signatures)",
     "the trainer's Ed25519 public key (PEM file): verify signatures"},
    {SettingId::kSlotAllocator, "slot_allocator", "WEIGHTSYNC_SLOT_ALLOCATOR", "auto", P::kEnum,
     "auto, memfd, ucx", S::kPublisher, nullptr, "who allocates the slots"},
    {SettingId::kHostId, "host_id", "WEIGHTSYNC_HOST_ID", "", P::kString, nullptr, S::kInformational,
     "(boot id:network namespace inode)",
     "which host this process counts as for shm/cuda_ipc; at most 64 of [A-Za-z0-9._:-]"},
    {SettingId::kVerbsDevice, "verbs_device", "WEIGHTSYNC_VERBS_DEVICE", "", P::kString, nullptr,
     S::kInformational, "(first with an active port)", "RDMA device for verbs"},
    {SettingId::kUcxAllowEmulatedRma, "ucx_allow_emulated_rma", "WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA", "0",
     P::kString, nullptr, S::kInformational, nullptr,
     "1: INSECURE, UCX also over transports where any peer can read and write the trainer's memory"},
    {SettingId::kUcxDirect, "ucx_direct", "WEIGHTSYNC_UCX_DIRECT", "1", P::kString, nullptr,
     S::kInformational, nullptr,
     "0: ucx subscribers read with ucp_get_nbx instead of mapping the slots directly"},
    {SettingId::kUcxTls, "ucx_transports", "UCX_TLS", "", P::kString, nullptr, S::kInformational,
     "(UCX default: all)", "UCX's own: the UCX transports it may use"},
    {SettingId::kTcpRcvLowat, "tcp_rcvlowat", "WEIGHTSYNC_TCP_RCVLOWAT", "1", P::kString, nullptr,
     S::kInformational, nullptr,
     "0: a tcp pull wakes on every arrival instead of once 1 MiB is queued (SO_RCVLOWAT)"},
    {SettingId::kLogLevel, "log_level", "WEIGHTSYNC_LOG_LEVEL", "warn", P::kEnum,
     "error, warn, info, debug, trace", S::kInformational, nullptr, "the library's log level"},
    {SettingId::kRelayUpstreams, "relay_upstreams", "WEIGHTSYNC_RELAY_UPSTREAMS", "", P::kString, nullptr,
     S::kInformational, "(none)", "weightsync-relay: upstream HOST:PORT list, failover in order (--upstream)"},
    {SettingId::kRelayListen, "relay_listen", "WEIGHTSYNC_RELAY_LISTEN", "", P::kString, nullptr,
     S::kInformational, "(WEIGHTSYNC_BIND, a free port)", "weightsync-relay: HOST:PORT its subscribers connect to (--listen)"},
    {SettingId::kRelayHealthAddress, "relay_health_address", "WEIGHTSYNC_RELAY_HEALTH_ADDRESS", "", P::kString,
     nullptr, S::kInformational, "(off)", "weightsync-relay: HTTP /livez and /readyz on HOST:PORT (--health-address)"},
    {SettingId::kRelayMetricsAddress, "relay_metrics_address", "WEIGHTSYNC_RELAY_METRICS_ADDRESS", "",
     P::kString, nullptr, S::kInformational, "(off)", "weightsync-relay: Prometheus /metrics on HOST:PORT (--metrics-address)"},
    {SettingId::kRelaySlots, "relay_slots", "WEIGHTSYNC_RELAY_SLOTS", "3", P::kString, nullptr,
     S::kInformational, nullptr, "weightsync-relay: slots of its ring (--slots)"},
}};

constexpr bool in_id_order() {
  for (std::size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<std::size_t>(kTable[i].id) != i) return false;
  }
  return true;
}
static_assert(in_id_order(), "settings table rows must be in SettingId order");

constexpr long kMaxMillis = 86'400'000;  // one day

bool accepts(const SettingRow& row, std::string_view text) {
  std::string_view list(row.accepted != nullptr ? row.accepted : "");
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (item == text) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

Status wrong_type(const SettingRow& row, const char* type) {
  return Status(ErrorCode::kInternal,
                std::string("setting ") + row.name + " (" + to_string(row.parser) + ") resolved as " + type);
}

// Text rows: only kEnum constrains the value.
bool valid_text(const SettingRow& row, std::string_view text) {
  return row.parser != P::kEnum || accepts(row, text);
}

Result<int> parse_millis(const SettingRow& row, const char* text, const std::string& from) {
  const long lowest = row.parser == P::kMillisOrZero ? 0 : 1;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < lowest || value > kMaxMillis) {
    return Status(ErrorCode::kInvalidConfig, from + "='" + text +
                                                 "' is not a whole number of milliseconds in [" +
                                                 std::to_string(lowest) + ", 86400000]");
  }
  return static_cast<int>(value);
}

Result<bool> parse_bool(const char* text, const std::string& from) {
  const std::string_view v(text);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  return Status(ErrorCode::kInvalidConfig, from + "='" + text + "' is not a boolean (use 0 or 1)");
}

bool is_text(SettingParser p) {
  return p == P::kString || p == P::kSecret || p == P::kFilePath || p == P::kEnum;
}

std::string shown_text(const SettingRow& row, const std::string& value) {
  if (row.parser == P::kSecret) {
    return value.empty() ? std::string(row.unset != nullptr ? row.unset : "(none)")
                         : "(set, " + std::to_string(value.size()) + " bytes)";
  }
  if (value.empty() && row.unset != nullptr) return row.unset;
  return value;
}

SettingReport make_report(SettingId id, std::string value, SettingSource source) {
  const SettingRow& row = setting_row(id);
  return SettingReport{row.name, row.environment, std::move(value), to_string(source), "", row.description};
}

}  // namespace

const char* to_string(SettingParser parser) noexcept {
  switch (parser) {
    case P::kString: return "string";
    case P::kSecret: return "secret";
    case P::kFilePath: return "file path";
    case P::kEnum: return "one of";
    case P::kMillis: return "milliseconds";
    case P::kMillisOrZero: return "milliseconds or 0";
    case P::kBool: return "boolean";
  }
  return "unknown";
}

const char* to_string(SettingSide side) noexcept {
  switch (side) {
    case S::kPublisher: return "publisher";
    case S::kSubscriber: return "subscriber";
    case S::kBoth: return "both";
    case S::kInformational: return "informational";
  }
  return "unknown";
}

const char* to_string(SettingSource source) noexcept {
  switch (source) {
    case SettingSource::kDefault: return "default";
    case SettingSource::kEnvironment: return "environment";
    case SettingSource::kOption: return "option";
  }
  return "unknown";
}

const std::array<SettingRow, kSettingCount>& setting_table() noexcept {
  return kTable;
}

const SettingRow& setting_row(SettingId id) noexcept {
  return kTable[static_cast<std::size_t>(id)];
}

const SettingRow* find_setting(std::string_view environment) noexcept {
  for (const SettingRow& row : kTable) {
    if (environment == row.environment) return &row;
  }
  return nullptr;
}

const char* environment_value(SettingId id) noexcept {
  const char* raw = std::getenv(setting_row(id).environment);
  return (raw != nullptr && *raw != '\0') ? raw : nullptr;
}

template <>
Result<Setting<std::string>> resolve_setting(SettingId id, const std::optional<std::string>& option) {
  const SettingRow& row = setting_row(id);
  if (!is_text(row.parser)) return wrong_type(row, "text");
  if (option) {
    if (!valid_text(row, *option)) {
      return Status(ErrorCode::kInvalidConfig, std::string(row.name) + " option '" + *option + "' (see " +
                                                   row.environment + ") is not one of " + row.accepted);
    }
    return Setting<std::string>{*option, SettingSource::kOption};
  }
  if (const char* raw = environment_value(id)) {
    if (!valid_text(row, raw)) {
      return Status(ErrorCode::kInvalidConfig,
                    std::string(row.environment) + "='" + raw + "' is not one of " + row.accepted);
    }
    return Setting<std::string>{raw, SettingSource::kEnvironment};
  }
  return default_setting<std::string>(id);
}

template <>
Result<Setting<int>> resolve_setting(SettingId id, const std::optional<int>& option) {
  const SettingRow& row = setting_row(id);
  if (row.parser != P::kMillis && row.parser != P::kMillisOrZero) return wrong_type(row, "milliseconds");
  if (option) {
    const int lowest = row.parser == P::kMillisOrZero ? 0 : 1;
    if (*option < lowest || *option > kMaxMillis) {
      return Status(ErrorCode::kInvalidConfig, std::string(row.name) + " option (see " + row.environment +
                                                   ") must be in [" + std::to_string(lowest) +
                                                   ", 86400000] ms, not " + std::to_string(*option));
    }
    return Setting<int>{*option, SettingSource::kOption};
  }
  if (const char* raw = environment_value(id)) {
    auto parsed = parse_millis(row, raw, row.environment);
    if (!parsed.ok()) return parsed.status();
    return Setting<int>{*parsed, SettingSource::kEnvironment};
  }
  return default_setting<int>(id);
}

template <>
Result<Setting<bool>> resolve_setting(SettingId id, const std::optional<bool>& option) {
  const SettingRow& row = setting_row(id);
  if (row.parser != P::kBool) return wrong_type(row, "boolean");
  if (option) return Setting<bool>{*option, SettingSource::kOption};
  if (const char* raw = environment_value(id)) {
    auto parsed = parse_bool(raw, row.environment);
    if (!parsed.ok()) return parsed.status();
    return Setting<bool>{*parsed, SettingSource::kEnvironment};
  }
  return default_setting<bool>(id);
}

// The defaults are the table's own text, checked by tests/unit/settings_table_test.cc
// to parse; a row that did not would show its type's zero.
template <>
Setting<std::string> default_setting(SettingId id) {
  return Setting<std::string>{setting_row(id).fallback, SettingSource::kDefault};
}

template <>
Setting<int> default_setting(SettingId id) {
  const SettingRow& row = setting_row(id);
  auto parsed = parse_millis(row, row.fallback, "default");
  return Setting<int>{parsed.ok() ? *parsed : 0, SettingSource::kDefault};
}

template <>
Setting<bool> default_setting(SettingId id) {
  auto parsed = parse_bool(setting_row(id).fallback, "default");
  return Setting<bool>{parsed.ok() && *parsed, SettingSource::kDefault};
}

SettingReport report_setting(SettingId id, const Setting<std::string>& setting) {
  return make_report(id, shown_text(setting_row(id), setting.value), setting.source);
}

SettingReport report_setting(SettingId id, const Setting<int>& setting) {
  return make_report(id, std::to_string(setting.value) + " ms", setting.source);
}

SettingReport report_setting(SettingId id, const Setting<bool>& setting) {
  return make_report(id, setting.value ? "on" : "off", setting.source);
}

std::string settings_log_text(const std::vector<SettingReport>& reports) {
  std::string out;
  for (const SettingReport& r : reports) {
    if (!out.empty()) out += ", ";
    out += r.name + " " + r.value + " (" + r.source + ")";
  }
  return out;
}

std::optional<LogLevel> parse_log_level(std::string_view text) noexcept {
  if (text == "error") return LogLevel::kError;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "info") return LogLevel::kInfo;
  if (text == "debug") return LogLevel::kDebug;
  if (text == "trace") return LogLevel::kTrace;
  return std::nullopt;
}

}  // namespace weightsync::detail
