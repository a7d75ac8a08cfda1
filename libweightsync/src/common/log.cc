// Log level state (initialised from WEIGHTSYNC_LOG_LEVEL) and the stderr sink.
#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "common/settings_table.h"

namespace weightsync {
namespace {

LogLevel initial_level() noexcept {
  const char* raw = std::getenv("WEIGHTSYNC_LOG_LEVEL");
  if (raw == nullptr || *raw == '\0') return LogLevel::kWarn;
  auto parsed = detail::parse_log_level(raw);
  if (!parsed) {
    std::string line = std::string("[weightsync warn] WEIGHTSYNC_LOG_LEVEL='") + raw +
                       "' is not one of error, warn, info, debug, trace; using warn\n";
    (void)!::write(2, line.data(), line.size());
    return LogLevel::kWarn;
  }
  return *parsed;
}

std::atomic<int>& level_storage() noexcept {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

// The sink, if any. Copied out under the mutex (messages are rare), so a sink
// replaced mid-message lives until that message is written.
struct SinkSlot {
  std::mutex mutex;
  std::shared_ptr<const LogSink> sink;
  std::atomic<bool> installed{false};
};

SinkSlot& sink_slot() noexcept {
  static SinkSlot slot;
  return slot;
}

}  // namespace

void set_log_sink(LogSink sink) {
  SinkSlot& slot = sink_slot();
  std::shared_ptr<const LogSink> next;
  if (sink) next = std::make_shared<const LogSink>(std::move(sink));
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.installed.store(next != nullptr);
  slot.sink = std::move(next);
}

void set_log_level(LogLevel level) noexcept {
  level_storage().store(static_cast<int>(level));
}

LogLevel log_level() noexcept {
  return static_cast<LogLevel>(level_storage().load());
}

const char* to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kTrace: return "trace";
  }
  return "unknown";
}

namespace detail {

bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= level_storage().load(std::memory_order_relaxed);
}

void log_write(LogLevel level, std::string_view message) noexcept {
  SinkSlot& slot = sink_slot();
  if (slot.installed.load()) {
    std::shared_ptr<const LogSink> sink;
    {
      std::lock_guard<std::mutex> lock(slot.mutex);
      sink = slot.sink;
    }
    if (sink) {
      try {
        (*sink)(level, message);
      } catch (...) {
        // A sink that throws loses its message; the library goes on.
      }
      return;
    }
  }
  try {
    std::string line = fmt::format("[weightsync {}] {}\n", to_string(level), message);
    (void)!::write(2, line.data(), line.size());
  } catch (...) {
    // Logging must never throw out of the library.
  }
}

}  // namespace detail
}  // namespace weightsync
