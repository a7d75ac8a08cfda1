// weightsync/log.h: the library's log level.
//
// Contract
// - The library logs to stderr, one line per message, prefixed with
//   "[weightsync <level>]". The level starts from WEIGHTSYNC_LOG_LEVEL
//   (error, warn, info, debug, trace; default warn) and can be changed at any
//   time from any thread with set_log_level().
// - set_log_sink() sends each message (without prefix or newline) to a
//   function instead of stderr: Python's `logging`, say. The sink is called
//   on whichever library thread logs, possibly on several at once, so it
//   must be thread-safe, quick, must not throw (what it throws is dropped)
//   and must not call into weightsync. An empty function restores stderr.
//   A message being written when the sink is replaced may still reach the
//   old one; the library keeps it alive until that call returns.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace weightsync {

enum class LogLevel : std::uint8_t { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

void set_log_level(LogLevel level) noexcept;
LogLevel log_level() noexcept;
const char* to_string(LogLevel level) noexcept;

using LogSink = std::function<void(LogLevel level, std::string_view message)>;
void set_log_sink(LogSink sink);

}  // namespace weightsync
