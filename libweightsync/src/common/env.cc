// Settings resolution from options and WEIGHTSYNC_* environment variables.
#include "common/env.h"

#include <cerrno>
#include <cstdlib>

namespace weightsync::detail {

const char* to_string(SettingSource source) noexcept {
  switch (source) {
    case SettingSource::kDefault: return "default";
    case SettingSource::kEnvironment: return "environment";
    case SettingSource::kOption: return "option";
  }
  return "unknown";
}

std::optional<LogLevel> parse_log_level(std::string_view text) noexcept {
  if (text == "error") return LogLevel::kError;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "info") return LogLevel::kInfo;
  if (text == "debug") return LogLevel::kDebug;
  if (text == "trace") return LogLevel::kTrace;
  return std::nullopt;
}

namespace {
constexpr long kMaxMillis = 86'400'000;  // one day

const char* env_value(const char* name) {
  const char* raw = std::getenv(name);
  return (raw != nullptr && *raw != '\0') ? raw : nullptr;
}
}  // namespace

Result<Setting<std::string>> resolve_string(const std::optional<std::string>& option, const char* env_name,
                                            std::string fallback) {
  if (option) return Setting<std::string>{*option, SettingSource::kOption};
  if (const char* raw = env_value(env_name)) return Setting<std::string>{raw, SettingSource::kEnvironment};
  return Setting<std::string>{std::move(fallback), SettingSource::kDefault};
}

Result<Setting<int>> resolve_millis(const std::optional<int>& option, const char* env_name, int fallback,
                                    bool zero_allowed) {
  const int lowest = zero_allowed ? 0 : 1;
  const std::string range = "[" + std::to_string(lowest) + ", 86400000]";
  if (option) {
    if (*option < lowest || *option > kMaxMillis) {
      return Status(ErrorCode::kInvalidConfig, std::string("timeout option (see ") + env_name +
                                                   ") must be in " + range + " ms, not " +
                                                   std::to_string(*option));
    }
    return Setting<int>{*option, SettingSource::kOption};
  }
  if (const char* raw = env_value(env_name)) {
    errno = 0;
    char* end = nullptr;
    long value = std::strtol(raw, &end, 10);
    if (errno != 0 || end == raw || *end != '\0' || value < lowest || value > kMaxMillis) {
      return Status(ErrorCode::kInvalidConfig, std::string(env_name) + "='" + raw +
                                                   "' is not a whole number of milliseconds in " + range);
    }
    return Setting<int>{static_cast<int>(value), SettingSource::kEnvironment};
  }
  return Setting<int>{fallback, SettingSource::kDefault};
}

Result<Setting<bool>> resolve_bool(const std::optional<bool>& option, const char* env_name, bool fallback) {
  if (option) return Setting<bool>{*option, SettingSource::kOption};
  if (const char* raw = env_value(env_name)) {
    std::string_view v(raw);
    if (v == "1" || v == "true" || v == "on" || v == "yes")
      return Setting<bool>{true, SettingSource::kEnvironment};
    if (v == "0" || v == "false" || v == "off" || v == "no")
      return Setting<bool>{false, SettingSource::kEnvironment};
    return Status(ErrorCode::kInvalidConfig,
                  std::string(env_name) + "='" + raw + "' is not a boolean (use 0 or 1)");
  }
  return Setting<bool>{fallback, SettingSource::kDefault};
}

}  // namespace weightsync::detail
