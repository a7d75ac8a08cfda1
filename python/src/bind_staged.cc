// weightsync._StagedUpdates: a StagedUpdates over a _Subscriber's Subscriber
// (bind_staged.h has the contract).
#include "bind_staged.h"

#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bind_subscriber.h"
#include "errors.h"
#include "locked_call.h"
#include "weightsync/staged_updates.h"

namespace py = pybind11;
using weightsync::ErrorCode;
using weightsync::InstallMode;
using weightsync::StagedUpdates;
using weightsync::Status;

namespace wspy {
namespace {

unsigned long g_main_thread = 0;  // threading.main_thread().ident, at import
constexpr std::chrono::milliseconds kWaitSlice{20};

bool interpreter_running() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// The deleter of the shared StagedUpdates: the destructor joins the
// background thread (a poll interval, or one transfer), so let other Python
// threads run meanwhile when the last owner held the GIL.
void destroy(StagedUpdates* staged) noexcept {
  if (interpreter_running() && PyGILState_Check()) {
    PyThreadState* state = PyEval_SaveThread();
    delete staged;
    PyEval_RestoreThread(state);
  } else {
    delete staged;
  }
}

struct StagedCore {
  std::mutex mutex;                       // install(), the live accessors, close()
  std::shared_ptr<StagedUpdates> staged;  // null once closed
  InstallMode mode = InstallMode::kSwap;
  weightsync::MemoryKind memory = weightsync::MemoryKind::kHost;
  std::size_t buffer_bytes = 0;     // kSwap: the size of each buffer
  std::array<void*, 2> buffers{};   // kSwap: their addresses, as learnt (mutex)
  std::atomic<bool> cancel{false};  // makes the wait in progress, or the next, raise Cancelled
  std::atomic<bool> closed{false};  // set by close(), seen by a wait in progress
};

// A kSwap buffer, exported through the buffer protocol; holds the object.
struct StagedBuffer {
  std::shared_ptr<StagedUpdates> owner;
  void* data = nullptr;
  std::size_t bytes = 0;
};

template <typename F>
auto locked(StagedCore& c, F&& f) {
  return locked_call(c.mutex, c.staged, "StagedUpdates", std::forward<F>(f));
}

// The object, for the calls any thread may make without the mutex.
std::shared_ptr<StagedUpdates> shared(StagedCore& c) {
  std::shared_ptr<StagedUpdates> out;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(c.mutex);
    out = c.staged;
  }
  if (!out) raise_status(Status(ErrorCode::kInvalidArgument, "this StagedUpdates is closed"));
  return out;
}

std::chrono::milliseconds to_ms(double seconds, const char* what) {
  if (std::isnan(seconds) || seconds < 0)
    throw py::value_error(std::string(what) + " must be a number of seconds >= 0");
  if (seconds > 1e9) return std::chrono::milliseconds(std::chrono::milliseconds::max().count() / 2);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

weightsync::MemoryKind memory_of(const std::string& device) {
  if (device == "cpu" || device == "host") return weightsync::MemoryKind::kHost;
  if (device == "cuda") return weightsync::MemoryKind::kCuda;
  throw py::value_error("memory on device '" + device + "' is not supported (cpu or cuda)");
}

using Entry = std::tuple<std::string, std::uintptr_t, std::size_t>;

weightsync::StagedUpdatesOptions options_from(const std::string& mode, const std::vector<Entry>& live,
                                              bool contiguous, const std::string& device) {
  weightsync::StagedUpdatesOptions o;
  o.memory = memory_of(device);
  if (mode == "swap") {
    o.mode = InstallMode::kSwap;
    if (!live.empty())
      throw py::value_error("swap mode takes no live entries: the library owns both buffers");
    return o;
  }
  if (mode != "copy") throw py::value_error("mode must be 'swap' or 'copy', not '" + mode + "'");
  o.mode = InstallMode::kCopy;
  if (live.empty())
    throw py::value_error("copy mode needs the live weights: (name, address, nbytes) entries");
  if (contiguous) {
    if (live.size() != 1)
      throw py::value_error("a contiguous live destination is one (name, address, nbytes)");
    o.live = weightsync::Destination::contiguous(reinterpret_cast<void*>(std::get<1>(live[0])),
                                                 std::get<2>(live[0]), o.memory);
    return o;
  }
  std::vector<weightsync::ScatterEntry> scatter;
  scatter.reserve(live.size());
  for (const auto& [name, ptr, bytes] : live) scatter.push_back({name, reinterpret_cast<void*>(ptr), bytes});
  o.live = weightsync::Destination::scatter(std::move(scatter), o.memory);
  return o;
}

std::shared_ptr<StagedCore> create(py::handle subscriber, weightsync::StagedUpdatesOptions options) {
  const weightsync::MemoryKind memory = options.memory;
  auto taken = take_subscriber(subscriber);  // closes the _Subscriber
  weightsync::Result<std::unique_ptr<StagedUpdates>> made(Status(ErrorCode::kInternal, "not created"));
  {
    py::gil_scoped_release release;
    made = StagedUpdates::create(std::move(taken), std::move(options));
  }
  auto core = std::make_shared<StagedCore>();
  core->staged = std::shared_ptr<StagedUpdates>(unwrap(std::move(made)).release(), destroy);
  core->mode = core->staged->mode();
  core->memory = memory;
  if (core->mode == InstallMode::kSwap) {
    core->buffers[0] = core->staged->live_data();  // buffer 0 is live until the first install
    core->buffer_bytes = core->staged->live_bytes();
  }
  return core;
}

// The index of the live kSwap buffer; learns the second buffer's address at
// the first install that makes it live (mutex held).
std::size_t live_index(StagedCore& c, const StagedUpdates& s) {
  void* live = s.live_data();
  if (live == c.buffers[0]) return 0;
  if (c.buffers[1] == nullptr) c.buffers[1] = live;
  return 1;
}

void require_swap(const StagedCore& c, const char* what) {
  if (c.mode != InstallMode::kSwap) {
    raise_status(
        Status(ErrorCode::kInvalidArgument,
               std::string(what) + " is for swap mode: in copy mode the live weights are the engine's own"));
  }
}

py::object install(StagedCore& c) {
  auto r = locked(c, [&](StagedUpdates& s) {
    auto out = s.install();
    if (out.ok() && c.mode == InstallMode::kSwap) live_index(c, s);
    return out;
  });
  if (r.ok()) return py::cast(std::move(r).value());
  if (r.status().code() == ErrorCode::kNotReady) return py::none();
  raise_status(r.status());
}

py::object wait_staged(StagedCore& c, double timeout_s) {
  const auto timeout = to_ms(timeout_s, "a wait");
  auto staged = shared(c);
  const bool main_thread = PyThread_get_thread_ident() == g_main_thread;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    weightsync::Result<std::uint64_t> r(Status(ErrorCode::kInternal, "not waited"));
    {
      py::gil_scoped_release release;
      r = staged->wait_staged(std::max(std::chrono::milliseconds(0), std::min(left, kWaitSlice)));
    }
    if (r.ok()) return py::int_(*r);
    if (r.status().code() != ErrorCode::kTimeout) raise_status(r.status());  // the background thread stopped
    if (c.cancel.exchange(false)) {
      raise_status(Status(ErrorCode::kCancelled, "the wait for a staged version was cancelled"));
    }
    if (main_thread && PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (c.closed)
      raise_status(Status(ErrorCode::kInvalidArgument, "this StagedUpdates was closed during the wait"));
    if (left <= kWaitSlice) return py::none();
  }
}

py::object buffer(StagedCore& c, std::size_t index) {
  require_swap(c, "buffer()");
  if (c.memory != weightsync::MemoryKind::kHost) {
    raise_status(Status(ErrorCode::kInvalidArgument,
                        "the buffers are device memory: no memoryview (use live_address and buffer_bytes)"));
  }
  if (index > 1) throw py::index_error("swap mode has buffers 0 and 1");
  auto out = locked(c, [&](StagedUpdates& s) {
    live_index(c, s);
    return StagedBuffer{c.staged, c.buffers[index], c.buffer_bytes};
  });
  if (out.data == nullptr) return py::none();  // not live yet: its address is learnt at the first install
  return py::memoryview(py::cast(std::move(out)));
}

py::dict stats(StagedCore& c) {
  const auto s = shared(c)->stats();
  py::dict d;
  d["staged"] = s.staged;
  d["installs"] = s.installs;
  d["failed_pulls"] = s.failed_pulls;
  d["not_ready"] = s.not_ready;
  d["pull_seconds"] = s.pull_seconds;
  d["blocked_count"] = s.blocked.count;
  d["blocked_median_seconds"] = s.blocked.median_seconds;
  d["blocked_p99_seconds"] = s.blocked.p99_seconds;
  d["blocked_max_seconds"] = s.blocked.max_seconds;
  d["blocked_total_seconds"] = s.blocked.total_seconds;
  d["subscriber"] = subscriber_stats_dict(s.subscriber);
  return d;
}

void close_core(StagedCore& c) {
  c.closed = true;
  std::shared_ptr<StagedUpdates> dropped;
  py::gil_scoped_release release;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    dropped = std::move(c.staged);
  }
  dropped.reset();  // the destructor runs here, GIL released, unless a buffer view or a waiter holds it
}

void bind_install_result(py::module_& m) {
  using weightsync::InstallResult;
  py::class_<InstallResult>(m, "InstallResult", "A version StagedUpdates.install() made live.")
      .def_readonly("version", &InstallResult::version, "The version live now.")
      .def_readonly("previous", &InstallResult::previous, "The version live before (0: none).")
      .def_property_readonly("mode", [](const InstallResult& r) { return std::string(to_string(r.mode)); })
      .def_readonly("blocked_seconds", &InstallResult::blocked_seconds,
                    "Time the caller was blocked in install(): the engine's pause.")
      .def_readonly("staged_seconds", &InstallResult::staged_seconds, "How long the version waited staged.")
      .def_readonly("pull", &InstallResult::pull, "The background pull that staged it (its own time).")
      .def("__repr__", [](const InstallResult& r) {
        return "InstallResult(version=" + std::to_string(r.version) +
               ", previous=" + std::to_string(r.previous) + ", mode=" + to_string(r.mode) +
               ", blocked_seconds=" + std::to_string(r.blocked_seconds) + ")";
      });
}

}  // namespace

void bind_staged(py::module_& m) {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  bind_install_result(m);

  py::class_<StagedBuffer>(m, "_StagedBuffer", py::buffer_protocol(),
                           "A swap-mode buffer of a _StagedUpdates.")
      .def_buffer([](StagedBuffer& b) {
        return py::buffer_info(b.data, 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes)}, {static_cast<py::ssize_t>(1)}, false);
      });

  py::class_<StagedCore, std::shared_ptr<StagedCore>>(m, "_StagedUpdates",
                                                      "A weightsync StagedUpdates (C++ core).")
      .def(py::init([](py::object subscriber, const std::string& mode, const std::vector<Entry>& live,
                       bool contiguous, const std::string& device, bool require_checksum, bool deltas,
                       bool every_version, double poll_s, double retry_backoff_s, bool lock_host) {
             auto options = options_from(mode, live, contiguous, device);
             options.require_checksum = require_checksum;
             options.deltas = deltas;
             options.every_version = every_version;
             options.poll = std::max(std::chrono::milliseconds(1), to_ms(poll_s, "poll"));
             options.retry_backoff = to_ms(retry_backoff_s, "retry_backoff");
             options.lock_host = lock_host;
             return create(subscriber, std::move(options));
           }),
           py::arg("subscriber"), py::arg("mode") = "swap", py::arg("live") = std::vector<Entry>{},
           py::arg("contiguous") = false, py::arg("device") = "cpu", py::arg("require_checksum") = true,
           py::arg("deltas") = true, py::arg("every_version") = false, py::arg("poll_s") = 0.1,
           py::arg("retry_backoff_s") = 0.02, py::arg("lock_host") = false)
      .def_property_readonly("mode", [](StagedCore& c) { return std::string(to_string(c.mode)); })
      .def_property_readonly(
          "device", [](StagedCore& c) { return c.memory == weightsync::MemoryKind::kHost ? "cpu" : "cuda"; })
      .def_property_readonly("layout",
                             [](StagedCore& c) { return locked(c, [](auto& s) { return s.layout(); }); })
      .def_property_readonly("transport",
                             [](StagedCore& c) { return locked(c, [](auto& s) { return s.transport(); }); })
      .def_property_readonly("live_version", [](StagedCore& c) { return shared(c)->live_version(); })
      .def_property_readonly("staged_version", [](StagedCore& c) { return shared(c)->staged_version(); })
      .def_property_readonly("buffer_bytes", [](StagedCore& c) { return c.buffer_bytes; })
      .def_property_readonly("live_index",
                             [](StagedCore& c) -> py::object {
                               if (c.mode != InstallMode::kSwap) return py::none();
                               return py::int_(locked(c, [&](auto& s) { return live_index(c, s); }));
                             })
      .def_property_readonly("live_address",
                             [](StagedCore& c) -> py::object {
                               if (c.mode != InstallMode::kSwap) return py::none();
                               return py::int_(locked(c, [](auto& s) {
                                 return reinterpret_cast<std::uintptr_t>(s.live_data());
                               }));
                             })
      .def_property_readonly("closed",
                             [](StagedCore& c) {
                               py::gil_scoped_release release;
                               std::lock_guard<std::mutex> lock(c.mutex);
                               return c.staged == nullptr;
                             })
      .def("buffer", &buffer, py::arg("index"),
           "Swap mode, host memory: buffer `index` (0 or 1) as a writable memoryview, or None before "
           "its address is known (buffer 1: the first install). The view keeps the buffer alive.")
      .def("install", &install,
           "Makes the staged version live: an InstallResult, or None if nothing is staged.")
      .def("wait_staged", &wait_staged, py::arg("timeout_s"),
           "Waits up to timeout_s for a staged version: its number, or None. Raises the background "
           "thread's error once it stopped.")
      .def(
          "cancel", [](StagedCore& c) { c.cancel = true; },
          "Makes the wait_staged() in progress (or, if none is, the next one) raise Cancelled. Any thread.")
      .def("_reset_cancel", [](StagedCore& c) { c.cancel = false; })
      .def(
          "status", [](StagedCore& c) { check(shared(c)->status()); },
          "Raises the background thread's error once it stopped (then make a new Subscriber).")
      .def(
          "last_failure", [](StagedCore& c) { return status_exception(shared(c)->last_failure()); },
          "The last failed background pull's error (not raised), or None.")
      .def("stats", &stats)
      .def("close", &close_core,
           "Stops the background pull and frees the buffers, once no memoryview of them is left.");
}

}  // namespace wspy
