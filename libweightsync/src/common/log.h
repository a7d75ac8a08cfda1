// Internal logging: WS_LOG(level, fmt, args...) formats with fmt only when the
// level is enabled. Thread-safe: each message is one write(2) to stderr.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "weightsync/log.h"

namespace weightsync::detail {

bool log_enabled(LogLevel level) noexcept;
void log_write(LogLevel level, std::string_view message) noexcept;

}  // namespace weightsync::detail

#define WS_LOG(level, ...)                                                \
  do {                                                                    \
    if (::weightsync::detail::log_enabled(level)) {                       \
      ::weightsync::detail::log_write(level, ::fmt::format(__VA_ARGS__)); \
    }                                                                     \
  } while (0)
#define WS_ERROR(...) WS_LOG(::weightsync::LogLevel::kError, __VA_ARGS__)
#define WS_WARN(...) WS_LOG(::weightsync::LogLevel::kWarn, __VA_ARGS__)
#define WS_INFO(...) WS_LOG(::weightsync::LogLevel::kInfo, __VA_ARGS__)
#define WS_DEBUG(...) WS_LOG(::weightsync::LogLevel::kDebug, __VA_ARGS__)
