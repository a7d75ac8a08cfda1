// weightsync/log.h: the library's log level.
//
// Contract
// - The library logs to stderr, one line per message, prefixed with
//   "[weightsync <level>]". The level starts from WEIGHTSYNC_LOG_LEVEL
//   (error, warn, info, debug, trace; default warn) and can be changed at any
//   time from any thread with set_log_level().
#pragma once

#include <cstdint>

namespace weightsync {

enum class LogLevel : std::uint8_t { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

void set_log_level(LogLevel level) noexcept;
LogLevel log_level() noexcept;
const char* to_string(LogLevel level) noexcept;

}  // namespace weightsync
