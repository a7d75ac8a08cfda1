#include "log_bridge.h"

#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "weightsync/log.h"

namespace py = pybind11;

namespace wspy {
namespace {

constexpr std::size_t kMaxQueued = 10000;

struct Queue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::pair<int, std::string>> lines;
  std::uint64_t dropped = 0;
  bool closed = false;
};

// Leaked on purpose: library threads may log during interpreter shutdown.
Queue& queue() {
  static Queue* q = new Queue();
  return *q;
}

void enqueue(weightsync::LogLevel level, std::string_view message) {
  Queue& q = queue();
  {
    std::lock_guard<std::mutex> lock(q.mutex);
    if (q.lines.size() >= kMaxQueued) {
      ++q.dropped;
      return;
    }
    q.lines.emplace_back(static_cast<int>(level), std::string(message));
  }
  q.ready.notify_one();
}

// (messages, dropped since the last batch): waits up to `timeout_s` for one.
std::tuple<std::vector<std::pair<int, std::string>>, std::uint64_t> next_batch(double timeout_s) {
  std::vector<std::pair<int, std::string>> out;
  std::uint64_t dropped = 0;
  {
    py::gil_scoped_release release;
    Queue& q = queue();
    std::unique_lock<std::mutex> lock(q.mutex);
    if (timeout_s > 0) {
      q.ready.wait_for(lock, std::chrono::duration<double>(timeout_s),
                       [&] { return !q.lines.empty() || q.dropped > 0 || q.closed; });
    }
    out.assign(std::make_move_iterator(q.lines.begin()), std::make_move_iterator(q.lines.end()));
    q.lines.clear();
    dropped = q.dropped;
    q.dropped = 0;
  }
  return {std::move(out), dropped};
}

}  // namespace

void bind_log_bridge(py::module_& m) {
  m.def("_log_bridge_install", [] {
    queue().closed = false;
    weightsync::set_log_sink(enqueue);
  }, "Route the library's log messages into the queue that weightsync._logbridge drains.");
  m.def("_log_bridge_remove", [] {
    weightsync::set_log_sink({});
    Queue& q = queue();
    {
      std::lock_guard<std::mutex> lock(q.mutex);
      q.closed = true;
    }
    q.ready.notify_all();
  }, "Send the library's log messages to stderr again and wake the drain thread.");
  m.def("_log_next_batch", &next_batch, py::arg("timeout_s"),
        "Queued (level, message) pairs and the count dropped since the last call; waits up to timeout_s.");
  m.def(
      "set_log_level",
      [](const std::string& level) {
        static const char* names[] = {"error", "warn", "info", "debug", "trace"};
        for (int i = 0; i < 5; ++i) {
          if (level == names[i] || (level == "warning" && i == 1)) {
            weightsync::set_log_level(static_cast<weightsync::LogLevel>(i));
            return;
          }
        }
        throw py::value_error("log level '" + level + "' is not one of error, warn, info, debug, trace");
      },
      py::arg("level"),
      "The level of messages the library produces: 'error', 'warn', 'info', 'debug' or 'trace'.");
  m.def("log_level", [] { return std::string(weightsync::to_string(weightsync::log_level())); },
        "The library's current log level.");
}

}  // namespace wspy
