// Settings resolution: explicit option > WEIGHTSYNC_* environment > default,
// remembering where each value came from (for the start-up logs).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "weightsync/log.h"
#include "weightsync/status.h"

namespace weightsync::detail {

enum class SettingSource { kDefault, kEnvironment, kOption };
const char* to_string(SettingSource source) noexcept;

template <typename T>
struct Setting {
  T value{};
  SettingSource source = SettingSource::kDefault;
};

std::optional<LogLevel> parse_log_level(std::string_view text) noexcept;

// Each returns the option if set, else the parsed environment variable if
// present and non-empty, else the default. A malformed variable is
// kInvalidConfig naming the variable and the accepted values.
Result<Setting<std::string>> resolve_string(const std::optional<std::string>& option, const char* env_name,
                                            std::string fallback);
// Milliseconds in [1, 86400000], or [0, 86400000] with `zero_allowed` (where 0 means "never").
Result<Setting<int>> resolve_millis(const std::optional<int>& option, const char* env_name, int fallback,
                                    bool zero_allowed = false);
Result<Setting<bool>> resolve_bool(const std::optional<bool>& option, const char* env_name, bool fallback);

}  // namespace weightsync::detail
