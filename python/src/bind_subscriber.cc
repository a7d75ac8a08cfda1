#include "bind_subscriber.h"

#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "errors.h"
#include "locked_call.h"
#include "weightsync/cancel.h"
#include "weightsync/subscriber.h"

namespace py = pybind11;
using weightsync::ErrorCode;
using weightsync::Status;

namespace wspy {
namespace {

unsigned long g_main_thread = 0;  // threading.main_thread().ident, at import

// Lock order as in bind_publisher.cc: the GIL is never acquired while
// `mutex` is held, except by the signal poll, which runs on the thread that
// holds `mutex` and only for PyErr_CheckSignals (it calls no weightsync code).
struct SubscriberCore {
  std::mutex mutex;
  std::unique_ptr<weightsync::Subscriber> sub;
  weightsync::CancelToken token;
};

struct PlanCore {
  std::shared_ptr<SubscriberCore> owner;
  weightsync::PullPlan plan;
};

template <typename F>
auto locked(SubscriberCore& c, F&& f) {
  return locked_call(c.mutex, c.sub, "Subscriber", std::forward<F>(f));
}

std::chrono::milliseconds to_ms(double seconds) {
  if (std::isnan(seconds) || seconds < 0) throw py::value_error("a wait must be a number of seconds >= 0");
  // Anything past ~30 years is "forever": the library saturates long waits.
  if (seconds > 1e9) return std::chrono::milliseconds(std::chrono::milliseconds::max().count() / 2);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

// Cancellation for a call made on this thread: the core's token, and on the
// main thread a poll that runs Python's signal handlers.
struct CallCancel {
  weightsync::Cancellation cancel;
  std::shared_ptr<std::atomic<bool>> python_error = std::make_shared<std::atomic<bool>>(false);

  explicit CallCancel(SubscriberCore& c) {
    cancel.token = &c.token;
    if (PyThread_get_thread_ident() == g_main_thread) {
      auto flag = python_error;
      cancel.poll = [flag] {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) {
          *flag = true;  // the handler raised (KeyboardInterrupt): it stays set for the caller
          return true;
        }
        return false;
      };
    }
  }

  // After the call returned kCancelled: re-raise the signal handler's
  // exception, or consume the token and raise Cancelled.
  [[noreturn]] void raise(SubscriberCore& c, const Status& status) {
    if (*python_error) throw py::error_already_set();
    c.token.reset();
    raise_status(status);
  }
};

}  // namespace

py::dict subscriber_stats_dict(const weightsync::SubscriberStats& s) {
  py::dict d;
  d["pulls"] = s.pulls;
  d["retries"] = s.retries;
  d["bytes"] = s.bytes;
  d["registrations"] = s.registrations;
  d["registrations_released"] = s.registrations_released;
  d["staged_pulls"] = s.staged_pulls;
  d["streamed_pulls"] = s.streamed_pulls;
  d["views"] = s.views;
  d["delta_pulls"] = s.delta_pulls;
  d["delta_fallbacks"] = s.delta_fallbacks;
  d["delta_bytes"] = s.delta_bytes;
  d["signatures_verified"] = s.signatures_verified;
  d["signatures_refused"] = s.signatures_refused;
  d["verify_seconds"] = s.verify_seconds;
  return d;
}

namespace {

weightsync::MemoryKind kind_of(const std::string& device) {
  if (device == "cpu" || device == "host") return weightsync::MemoryKind::kHost;
  if (device == "cuda") return weightsync::MemoryKind::kCuda;
  throw py::value_error("memory on device '" + device + "' is not supported (cpu or cuda)");
}

using Entry = std::tuple<std::string, std::uintptr_t, std::size_t>;

}  // namespace

std::unique_ptr<weightsync::Subscriber> take_subscriber(py::handle core) {
  if (!py::isinstance<SubscriberCore>(core)) throw py::type_error("expected a weightsync._Subscriber");
  auto& c = core.cast<SubscriberCore&>();
  c.token.cancel();  // a waiting pull returns within the poll interval, as in close()
  std::unique_ptr<weightsync::Subscriber> out;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(c.mutex);
    out = std::move(c.sub);
    c.token.reset();
  }
  if (!out) raise_status(Status(ErrorCode::kInvalidArgument, "this Subscriber is closed"));
  return out;
}

void bind_subscriber(py::module_& m) {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  py::class_<weightsync::PullResult>(m, "PullResult", "What one pull delivered.")
      .def_readonly("version", &weightsync::PullResult::version)
      .def_readonly("bytes", &weightsync::PullResult::bytes, "Payload bytes delivered.")
      .def_readonly("retries", &weightsync::PullResult::retries, "Revoked or corrupt attempts retried.")
      .def_readonly("seconds", &weightsync::PullResult::seconds, "Transfer time, retries included, waiting excluded.")
      .def_readonly("wait_seconds", &weightsync::PullResult::wait_seconds,
                    "Time spent waiting for a newer version to be published.")
      .def_readonly("checksum_verified", &weightsync::PullResult::checksum_verified)
      .def_readonly("checksum", &weightsync::PullResult::checksum, "The trainer's xxHash3-64; 0 unless verified.")
      .def_readonly("signature_verified", &weightsync::PullResult::signature_verified,
                    "The trainer's signature and its digests matched (trusted_key).")
      .def_readonly("staged", &weightsync::PullResult::staged)
      .def_readonly("partial", &weightsync::PullResult::partial)
      .def_readonly("delta", &weightsync::PullResult::delta, "Delivered by a chain of deltas (pull(delta_base=...)).")
      .def_readonly("wire_bytes", &weightsync::PullResult::wire_bytes,
                    "Bytes received for it: bytes, or the compressed deltas.")
      .def("__repr__", [](const weightsync::PullResult& r) {
        return "PullResult(version=" + std::to_string(r.version) + ", bytes=" + std::to_string(r.bytes) +
               ", seconds=" + std::to_string(r.seconds) + ", retries=" + std::to_string(r.retries) +
               ", checksum_verified=" + (r.checksum_verified ? "True" : "False") + ")";
      });

  py::class_<PlanCore, std::shared_ptr<PlanCore>>(m, "_Plan", "A destination checked and registered once.")
      .def_property_readonly("nbytes", [](PlanCore& p) { return p.plan.bytes(); })
      .def_property_readonly("pieces", [](PlanCore& p) { return p.plan.pieces(); });

  py::class_<SubscriberCore, std::shared_ptr<SubscriberCore>>(m, "_Subscriber", "A weightsync Subscriber (C++ core).")
      .def(py::init([](const std::vector<std::string>& addresses, std::optional<std::string> secret,
                       std::optional<std::string> transport, std::optional<int> connect_timeout_ms,
                       std::optional<int> io_timeout_ms, bool verify_checksum, int max_retries,
                       const std::string& client_name, bool accept_streaming, std::optional<bool> integrity,
                       std::optional<bool> encryption, std::optional<std::string> trusted_key,
                       const std::string& adapter) {
             weightsync::SubscriberOptions o;
             o.adapter = adapter;
             o.trusted_key = std::move(trusted_key);
             o.integrity = integrity;
             o.encryption = encryption;
             o.secret = std::move(secret);
             o.transport = std::move(transport);
             o.connect_timeout_ms = connect_timeout_ms;
             o.io_timeout_ms = io_timeout_ms;
             o.verify_checksum = verify_checksum;
             o.max_retries = max_retries;
             o.client_name = client_name;
             o.accept_streaming = accept_streaming;
             weightsync::Result<std::unique_ptr<weightsync::Subscriber>> connected(
                 Status(ErrorCode::kInternal, "not connected"));
             {
               py::gil_scoped_release release;
               connected = weightsync::Subscriber::connect_any(addresses, std::move(o));
             }
             auto core = std::make_shared<SubscriberCore>();
             core->sub = unwrap(std::move(connected));
             return core;
           }),
           py::arg("addresses"), py::arg("secret") = py::none(), py::arg("transport") = py::none(),
           py::arg("connect_timeout_ms") = py::none(), py::arg("io_timeout_ms") = py::none(),
           py::arg("verify_checksum") = true, py::arg("max_retries") = 16, py::arg("client_name") = "python",
           py::arg("accept_streaming") = false, py::arg("integrity") = py::none(),
           py::arg("encryption") = py::none(), py::arg("trusted_key") = py::none(), py::arg("adapter") = "")
      .def_property_readonly("layout", [](SubscriberCore& c) { return locked(c, [](auto& s) { return s.layout(); }); })
      .def_property_readonly("transport",
                             [](SubscriberCore& c) { return locked(c, [](auto& s) { return s.transport(); }); })
      .def_property_readonly("slot_count",
                             [](SubscriberCore& c) { return locked(c, [](auto& s) { return s.slot_count(); }); })
      .def_property_readonly("publisher_checksums", [](SubscriberCore& c) {
        return locked(c, [](auto& s) { return s.publisher_checksums(); });
      })
      .def_property_readonly("encrypted",
                             [](SubscriberCore& c) { return locked(c, [](auto& s) { return s.encrypted(); }); })
      .def_property_readonly("publisher_deltas",
                             [](SubscriberCore& c) { return locked(c, [](auto& s) { return s.publisher_deltas(); }); })
      .def_property_readonly("held_version",
                             [](SubscriberCore& c) { return locked(c, [](auto& s) { return s.held_version(); }); })
      .def_property_readonly("closed", [](SubscriberCore& c) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        return c.sub == nullptr;
      })
      .def("status",
           [](SubscriberCore& c) {
             check(locked(c, [](auto& s) { return s.status(); }));
           },
           "Raises the sticky connection error, if there is one.")
      .def("stats", [](SubscriberCore& c) { return subscriber_stats_dict(locked(c, [](auto& s) { return s.stats(); })); })
      .def("latest_version",
           [](SubscriberCore& c) { return unwrap(locked(c, [](auto& s) { return s.latest_version(); })); })
      .def(
          "wait_for_version",
          [](SubscriberCore& c, std::uint64_t newer_than, double timeout_s) -> py::object {
            const auto timeout = to_ms(timeout_s);
            CallCancel cancel(c);
            auto r = locked(c, [&](auto& s) { return s.wait_for_version(newer_than, timeout, cancel.cancel); });
            if (r.ok()) return py::int_(*r);
            if (r.status().code() == ErrorCode::kTimeout) return py::none();
            if (r.status().code() == ErrorCode::kCancelled) cancel.raise(c, r.status());
            raise_status(r.status());
          },
          py::arg("newer_than"), py::arg("timeout_s"))
      .def(
          "prepare",
          [](const std::shared_ptr<SubscriberCore>& c, const std::vector<Entry>& entries, const std::string& device,
             bool contiguous) {
            const auto kind = kind_of(device);
            weightsync::Destination destination = weightsync::Destination::contiguous(nullptr, 0);
            if (contiguous) {
              if (entries.size() != 1) throw py::value_error("a contiguous destination is one (name, address, nbytes)");
              destination = weightsync::Destination::contiguous(reinterpret_cast<void*>(std::get<1>(entries[0])),
                                                               std::get<2>(entries[0]), kind);
            } else {
              std::vector<weightsync::ScatterEntry> scatter;
              scatter.reserve(entries.size());
              for (const auto& [name, ptr, bytes] : entries) scatter.push_back({name, reinterpret_cast<void*>(ptr), bytes});
              destination = weightsync::Destination::scatter(std::move(scatter), kind);
            }
            auto plan = std::make_shared<PlanCore>();
            plan->plan = unwrap(locked(*c, [&](auto& s) { return s.prepare(destination); }));
            plan->owner = c;
            return plan;
          },
          py::arg("entries"), py::arg("device") = "cpu", py::arg("contiguous") = false)
      .def(
          "pull",
          [](SubscriberCore& c, const PlanCore& plan, double wait_s, std::optional<std::uint64_t> newer_than,
             std::optional<std::uint64_t> version, std::optional<std::uint64_t> delta_base) -> py::object {
            weightsync::PullOptions options;
            options.wait = to_ms(wait_s);
            options.newer_than = newer_than;
            options.version = version;
            options.delta_base = delta_base;
            CallCancel cancel(c);
            options.cancel = cancel.cancel;
            auto r = locked(c, [&](auto& s) { return s.pull(plan.plan, options); });
            if (r.ok()) return py::cast(std::move(r).value());
            if (r.status().code() == ErrorCode::kNotReady && !version) return py::none();
            if (r.status().code() == ErrorCode::kCancelled) cancel.raise(c, r.status());
            raise_status(r.status());
          },
          py::arg("plan"), py::arg("wait_s") = 0.0, py::arg("newer_than") = py::none(),
          py::arg("version") = py::none(), py::arg("delta_base") = py::none())
      .def("cancel", [](SubscriberCore& c) { c.token.cancel(); },
           "Makes the pull or wait in progress (or, if none is, the next one) raise Cancelled. Any thread.")
      .def("_reset_cancel", [](SubscriberCore& c) { c.token.reset(); })
      .def(
          "register_memory",
          [](SubscriberCore& c, std::uintptr_t ptr, std::size_t bytes) {
            check(locked(c, [&](auto& s) { return s.register_memory(reinterpret_cast<void*>(ptr), bytes); }));
          },
          py::arg("address"), py::arg("nbytes"))
      .def(
          "release_memory",
          [](SubscriberCore& c, std::uintptr_t ptr, std::size_t bytes) {
            check(locked(c, [&](auto& s) { return s.release_memory(reinterpret_cast<void*>(ptr), bytes); }));
          },
          py::arg("address"), py::arg("nbytes"))
      .def("close", [](SubscriberCore& c) {
        c.token.cancel();  // a waiting pull returns within the poll interval
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        c.sub.reset();
        c.token.reset();
      });
}

}  // namespace wspy
