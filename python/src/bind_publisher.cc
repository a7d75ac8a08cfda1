#include "bind_publisher.h"

#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "errors.h"
#include "locked_call.h"
#include "publisher_core.h"
#include "weightsync/publisher.h"

namespace py = pybind11;
using weightsync::ErrorCode;
using weightsync::Status;

namespace wspy {

// A slot writer handed to Python; keeps its publisher's core alive.
struct WriterCore {
  std::shared_ptr<PublisherCore> owner;
  std::optional<weightsync::SlotWriter> writer;
  std::uint64_t version = 0;

  // Runs f(SlotWriter&) with the GIL released and the core locked.
  template <typename F>
  auto with_writer(F&& f) {
    using R = decltype(f(*writer));
    std::optional<R> out;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(owner->mutex);
      if (writer) out.emplace(f(*writer));
    }
    if (!out) {
      raise_status(Status(ErrorCode::kInvalidArgument,
                          "this slot writer is spent (committed, abandoned, or its Publisher closed)"));
    }
    return std::move(*out);
  }
  void release() {
    std::lock_guard<std::mutex> lock(owner->mutex);
    writer.reset();  // abandons an uncommitted version
    owner->writers.erase(this);
  }
  // With the GIL held: nothing that holds owner->mutex waits for the GIL.
  ~WriterCore() {
    if (owner) release();
  }
};

void PublisherCore::close_locked() {
  for (WriterCore* w : writers) w->writer.reset();
  writers.clear();
  pub = nullptr;
  owned.reset();  // a plain publisher: stops serving and joins its threads
}

namespace {

template <typename F>
auto locked(PublisherCore& c, F&& f) {
  return locked_call(c.mutex, c.pub, "Publisher", std::forward<F>(f));
}

using Source = std::tuple<std::string, std::uintptr_t, std::size_t>;

std::vector<weightsync::TensorSource> sources_of(const std::vector<Source>& in) {
  std::vector<weightsync::TensorSource> out;
  out.reserve(in.size());
  for (const auto& [name, ptr, bytes] : in) out.push_back({name, reinterpret_cast<const void*>(ptr), bytes});
  return out;
}

}  // namespace

weightsync::PublisherOptions publisher_options_from(
    std::optional<std::string> bind, std::uint16_t port, std::optional<std::string> secret, std::size_t slots,
    std::optional<bool> checksum, bool skip_when_full, std::optional<int> io_timeout_ms,
    std::optional<int> lease_timeout_ms, std::optional<int> idle_timeout_ms, std::size_t max_connections,
    std::optional<std::string> slot_allocator, bool lock_memory, const std::string& slot_memory,
    std::optional<bool> deltas, std::optional<bool> integrity, std::optional<bool> encryption,
    std::optional<std::string> signing_key) {
  weightsync::PublisherOptions o;
  o.signing_key = std::move(signing_key);
  o.deltas = deltas;
  o.integrity = integrity;
  o.encryption = encryption;
  o.bind_address = std::move(bind);
  o.port = port;
  o.secret = std::move(secret);
  o.slots = slots;
  o.checksum = checksum;
  o.full_ring_policy = skip_when_full ? weightsync::FullRingPolicy::kSkip : weightsync::FullRingPolicy::kRevokeOldest;
  o.io_timeout_ms = io_timeout_ms;
  o.lease_timeout_ms = lease_timeout_ms;
  o.idle_timeout_ms = idle_timeout_ms;
  o.max_connections = max_connections;
  o.slot_allocator = std::move(slot_allocator);
  o.lock_memory = lock_memory;
  if (slot_memory == "cuda") {
    o.slot_memory = weightsync::MemoryKind::kCuda;
  } else if (slot_memory != "host") {
    throw py::value_error("slot_memory must be 'host' or 'cuda', not '" + slot_memory + "'");
  }
  return o;
}

namespace {

py::dict stats_dict(const weightsync::PublisherStats& s) {
  py::dict d;
  d["versions_published"] = s.versions_published;
  d["versions_skipped"] = s.versions_skipped;
  d["leases_revoked"] = s.leases_revoked;
  d["leases_active"] = s.leases_active;
  d["leases_granted"] = s.leases_granted;
  d["leases_expired"] = s.leases_expired;
  d["connections_active"] = s.connections_active;
  d["connections_accepted"] = s.connections_accepted;
  d["connections_refused"] = s.connections_refused;
  d["auth_failures"] = s.auth_failures;
  d["protocol_errors"] = s.protocol_errors;
  d["bytes_served"] = s.bytes_served;
  d["handshakes_active"] = s.handshakes_active;
  d["handshakes_timed_out"] = s.handshakes_timed_out;
  d["sessions_idle_closed"] = s.sessions_idle_closed;
  d["serving"] = s.serving;
  d["server_error"] = s.server_error;
  return d;
}

}  // namespace

void bind_publisher(py::module_& m) {
  py::class_<weightsync::PublishResult>(m, "PublishResult", "What one publish did.")
      .def_readonly("version", &weightsync::PublishResult::version)
      .def_readonly("slot", &weightsync::PublishResult::slot)
      .def_readonly("revoked_leases", &weightsync::PublishResult::revoked_leases,
                    "Leases taken back to make room for this version.")
      .def_readonly("seconds", &weightsync::PublishResult::copy_seconds,
                    "publish(): the whole call; in place: begin to commit.")
      .def("__repr__", [](const weightsync::PublishResult& r) {
        return "PublishResult(version=" + std::to_string(r.version) + ", slot=" + std::to_string(r.slot) +
               ", revoked_leases=" + std::to_string(r.revoked_leases) + ", seconds=" +
               std::to_string(r.copy_seconds) + ")";
      });

  py::class_<WriterCore, std::shared_ptr<WriterCore>>(m, "_SlotWriter", "A slot reserved for one version (C++ core).")
      .def_property_readonly("version", [](WriterCore& w) { return w.version; })
      .def_property_readonly(
          "address",
          [](WriterCore& w) { return w.with_writer([](weightsync::SlotWriter& x) { return reinterpret_cast<std::uintptr_t>(x.data()); }); })
      .def_property_readonly("size",
                             [](WriterCore& w) { return w.with_writer([](weightsync::SlotWriter& x) { return x.size(); }); })
      .def(
          "memoryview",
          [](WriterCore& w) {
            auto span = w.with_writer([](weightsync::SlotWriter& x) { return std::make_pair(x.data(), x.size()); });
            return py::memoryview::from_memory(span.first, static_cast<py::ssize_t>(span.second), false);
          },
          "A writable memoryview of the whole slot; valid until commit() or abandon().")
      .def("commit",
           [](WriterCore& w) {
             auto result = w.with_writer([](weightsync::SlotWriter& x) { return x.commit(); });
             {
               py::gil_scoped_release release;
               w.release();
             }
             return unwrap(std::move(result));
           })
      .def("abandon", [](WriterCore& w) {
        py::gil_scoped_release release;
        w.release();
      });

  py::class_<PublisherCore, std::shared_ptr<PublisherCore>>(m, "_Publisher", "A weightsync Publisher (C++ core).")
      .def(py::init([](const weightsync::WeightLayout& layout, std::optional<std::string> bind, std::uint16_t port,
                       std::optional<std::string> secret, std::size_t slots, std::optional<bool> checksum,
                       bool skip_when_full, std::optional<int> io_timeout_ms, std::optional<int> lease_timeout_ms,
                       std::optional<int> idle_timeout_ms, std::size_t max_connections,
                       std::optional<std::string> slot_allocator, bool lock_memory, const std::string& slot_memory,
                       std::optional<bool> deltas, std::optional<bool> integrity, std::optional<bool> encryption,
                       std::optional<std::string> signing_key) {
             auto options = publisher_options_from(std::move(bind), port, std::move(secret), slots, checksum, skip_when_full,
                                         io_timeout_ms, lease_timeout_ms, idle_timeout_ms, max_connections,
                                         std::move(slot_allocator), lock_memory, slot_memory, deltas, integrity,
                                         encryption, std::move(signing_key));
             auto core = std::make_shared<PublisherCore>();
             weightsync::Result<std::unique_ptr<weightsync::Publisher>> created(
                 Status(ErrorCode::kInternal, "not created"));
             {
               py::gil_scoped_release release;
               created = weightsync::Publisher::create(layout, std::move(options));
             }
             core->owned = unwrap(std::move(created));
             core->pub = core->owned.get();
             return core;
           }),
           py::arg("layout"), py::arg("bind") = py::none(), py::arg("port") = 0, py::arg("secret") = py::none(),
           py::arg("slots") = 3, py::arg("checksum") = py::none(), py::arg("skip_when_full") = false,
           py::arg("io_timeout_ms") = py::none(), py::arg("lease_timeout_ms") = py::none(),
           py::arg("idle_timeout_ms") = py::none(), py::arg("max_connections") = 256,
           py::arg("slot_allocator") = py::none(), py::arg("lock_memory") = false, py::arg("slot_memory") = "host",
           py::arg("deltas") = py::none(), py::arg("integrity") = py::none(), py::arg("encryption") = py::none(),
           py::arg("signing_key") = py::none())
      .def_property_readonly("address", [](PublisherCore& c) { return locked(c, [](auto& p) { return p.address(); }); })
      .def_property_readonly("port", [](PublisherCore& c) { return locked(c, [](auto& p) { return p.port(); }); })
      .def_property_readonly("slot_count", [](PublisherCore& c) { return locked(c, [](auto& p) { return p.slot_count(); }); })
      .def_property_readonly("slot_allocator",
                             [](PublisherCore& c) { return locked(c, [](auto& p) { return p.slot_allocator(); }); })
      .def_property_readonly("layout", [](PublisherCore& c) { return locked(c, [](auto& p) { return p.layout(); }); })
      .def_property_readonly("latest_version",
                             [](PublisherCore& c) { return locked(c, [](auto& p) { return p.latest_version(); }); })
      .def_property_readonly("closed", [](PublisherCore& c) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        return c.pub == nullptr;
      })
      .def("stats", [](PublisherCore& c) { return stats_dict(locked(c, [](auto& p) { return p.stats(); })); })
      .def(
          "publish_tensors",
          [](PublisherCore& c, std::uint64_t version, const std::vector<Source>& tensors) {
            auto sources = sources_of(tensors);
            return unwrap(locked(c, [&](weightsync::Publisher& p) { return p.publish(version, sources); }));
          },
          py::arg("version"), py::arg("tensors"))
      .def(
          "publish_bytes",
          [](PublisherCore& c, std::uint64_t version, std::uintptr_t ptr, std::size_t bytes) {
            return unwrap(locked(c, [&](weightsync::Publisher& p) {
              return p.publish(version, reinterpret_cast<const void*>(ptr), bytes);
            }));
          },
          py::arg("version"), py::arg("address"), py::arg("nbytes"))
      .def(
          "publish_buffer",
          [](PublisherCore& c, std::uint64_t version, const py::buffer& buffer) {
            py::buffer_info info = buffer.request();  // C-contiguous, or the request raises BufferError
            const auto bytes = static_cast<std::size_t>(info.size * info.itemsize);
            const void* ptr = info.ptr;
            return unwrap(locked(c, [&](weightsync::Publisher& p) { return p.publish(version, ptr, bytes); }));
          },
          py::arg("version"), py::arg("buffer"))
      .def(
          "publish_from_device",
          [](PublisherCore& c, std::uint64_t version, const std::vector<Source>& tensors, std::uintptr_t stream,
             double flush_timeout_s) {
            auto sources = sources_of(tensors);
            return unwrap(locked(c, [&](weightsync::Publisher& p) -> weightsync::Result<weightsync::PublishResult> {
              auto ticket = p.publish_from_device(version, sources, reinterpret_cast<void*>(stream));
              if (!ticket.ok()) return ticket.status();
              return p.flush_device_publishes(
                  std::chrono::milliseconds(static_cast<std::int64_t>(flush_timeout_s * 1000)));
            }));
          },
          py::arg("version"), py::arg("tensors"), py::arg("cuda_stream"), py::arg("timeout_s") = 60.0,
          "Copies CUDA tensors into a slot on the publisher's stream after `cuda_stream`'s work, then waits "
          "for the commit.")
      .def(
          "begin",
          [](const std::shared_ptr<PublisherCore>& c, std::uint64_t version) {
            auto w = std::make_shared<WriterCore>();
            w->version = version;
            auto begun = locked(*c, [&](weightsync::Publisher& p) -> Status {
              auto writer = p.begin_publish(version);
              if (!writer.ok()) return writer.status();
              w->writer.emplace(std::move(writer).value());
              c->writers.insert(w.get());
              return Status();
            });
            check(begun);
            w->owner = c;
            return w;
          },
          py::arg("version"))
      .def("close", [](PublisherCore& c) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        c.close_locked();  // a plain publisher stops serving and joins its threads, GIL released
      });
}

}  // namespace wspy
