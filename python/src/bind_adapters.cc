#include "bind_adapters.h"

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "locked_call.h"
#include "publisher_core.h"
#include "weightsync/adapter_publisher.h"

namespace py = pybind11;
using weightsync::ErrorCode;
using weightsync::Status;

namespace wspy {
namespace {

// The base model's handle is kept under this name (adapter names are never empty).
const char* const kBase = "";

struct AdapterPublisherCore {
  std::mutex mutex;
  std::unique_ptr<weightsync::AdapterPublisher> ap;
  std::map<std::string, std::weak_ptr<PublisherCore>> handles;

  // With `mutex` held: the live handle for `name`, or a new one over `pub`.
  std::shared_ptr<PublisherCore> handle_locked(const std::string& name, weightsync::Publisher* pub) {
    if (auto existing = handles[name].lock()) {
      std::lock_guard<std::mutex> lock(existing->mutex);
      if (existing->pub == pub) return existing;
    }
    auto core = std::make_shared<PublisherCore>();
    core->pub = pub;
    handles[name] = core;
    return core;
  }
  // With `mutex` held: the handle of `name` stops (writers abandoned), if any.
  void detach_locked(const std::string& name) {
    auto it = handles.find(name);
    if (it == handles.end()) return;
    if (auto h = it->second.lock()) {
      std::lock_guard<std::mutex> lock(h->mutex);
      h->close_locked();
    }
    handles.erase(it);
  }
};

template <typename F>
auto locked(AdapterPublisherCore& c, F&& f) {
  return locked_call(c.mutex, c.ap, "AdapterPublisher", std::forward<F>(f));
}

}  // namespace

void bind_adapters(py::module_& m) {
  py::class_<AdapterPublisherCore, std::shared_ptr<AdapterPublisherCore>>(
      m, "_AdapterPublisher", "A weightsync AdapterPublisher (C++ core).")
      .def(py::init([](std::optional<weightsync::WeightLayout> base, std::optional<std::string> bind,
                       std::uint16_t port, std::optional<std::string> secret, std::size_t slots,
                       std::optional<bool> checksum, bool skip_when_full, std::optional<int> io_timeout_ms,
                       std::optional<int> lease_timeout_ms, std::optional<int> idle_timeout_ms,
                       std::size_t max_connections, std::size_t max_adapters, std::uint64_t max_adapter_bytes) {
             weightsync::AdapterPublisherOptions options;
             options.publisher = publisher_options_from(
                 std::move(bind), port, std::move(secret), slots, checksum, skip_when_full, io_timeout_ms,
                 lease_timeout_ms, idle_timeout_ms, max_connections, std::nullopt, false, "host", std::nullopt,
                 std::nullopt, std::nullopt, std::nullopt);
             options.max_adapters = max_adapters;
             options.max_adapter_bytes = max_adapter_bytes;
             weightsync::Result<std::unique_ptr<weightsync::AdapterPublisher>> created(
                 Status(ErrorCode::kInternal, "not created"));
             {
               py::gil_scoped_release release;
               created = weightsync::AdapterPublisher::create(std::move(options), std::move(base));
             }
             auto core = std::make_shared<AdapterPublisherCore>();
             core->ap = unwrap(std::move(created));
             return core;
           }),
           py::arg("base") = py::none(), py::arg("bind") = py::none(), py::arg("port") = 0,
           py::arg("secret") = py::none(), py::arg("slots") = 3, py::arg("checksum") = py::none(),
           py::arg("skip_when_full") = false, py::arg("io_timeout_ms") = py::none(),
           py::arg("lease_timeout_ms") = py::none(), py::arg("idle_timeout_ms") = py::none(),
           py::arg("max_connections") = 256, py::arg("max_adapters") = 64,
           py::arg("max_adapter_bytes") = std::uint64_t{1} << 30)
      .def_property_readonly("address",
                             [](AdapterPublisherCore& c) { return locked(c, [](auto& a) { return a.address(); }); })
      .def_property_readonly("port", [](AdapterPublisherCore& c) { return locked(c, [](auto& a) { return a.port(); }); })
      .def_property_readonly("closed", [](AdapterPublisherCore& c) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        return c.ap == nullptr;
      })
      .def("adapter_names",
           [](AdapterPublisherCore& c) { return locked(c, [](auto& a) { return a.adapter_names(); }); })
      .def("base",
           [](AdapterPublisherCore& c) {
             return locked(c, [&](weightsync::AdapterPublisher& a) -> std::shared_ptr<PublisherCore> {
               weightsync::Publisher* base = a.base();
               return base ? c.handle_locked(kBase, base) : nullptr;
             });
           })
      .def(
          "add_adapter",
          [](AdapterPublisherCore& c, const std::string& name, const weightsync::WeightLayout& layout) {
            auto added = locked(c, [&](weightsync::AdapterPublisher& a)
                                       -> weightsync::Result<std::shared_ptr<PublisherCore>> {
              auto pub = a.add_adapter(name, layout);
              if (!pub.ok()) return pub.status();
              return c.handle_locked(name, *pub);
            });
            return unwrap(std::move(added));
          },
          py::arg("name"), py::arg("layout"))
      .def(
          "adapter",
          [](AdapterPublisherCore& c, const std::string& name) {
            return locked(c, [&](weightsync::AdapterPublisher& a) -> std::shared_ptr<PublisherCore> {
              weightsync::Publisher* pub = name.empty() ? nullptr : a.adapter(name);
              return pub ? c.handle_locked(name, pub) : nullptr;
            });
          },
          py::arg("name"))
      .def(
          "remove_adapter",
          [](AdapterPublisherCore& c, const std::string& name) {
            check(locked(c, [&](weightsync::AdapterPublisher& a) {
              if (!name.empty() && a.adapter(name)) c.detach_locked(name);  // before the ring goes
              return a.remove_adapter(name);
            }));
          },
          py::arg("name"))
      .def("close", [](AdapterPublisherCore& c) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        std::vector<std::string> names;
        for (const auto& [name, handle] : c.handles) names.push_back(name);
        for (const auto& name : names) c.detach_locked(name);
        c.ap.reset();  // stops serving, joins its threads, frees every adapter
      });
}

}  // namespace wspy
