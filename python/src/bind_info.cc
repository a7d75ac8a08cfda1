#include "bind_info.h"

#include "weightsync/cuda.h"
#include "weightsync/settings.h"
#include "weightsync/transports.h"
#include "weightsync/version.h"

namespace py = pybind11;

namespace wspy {

void bind_info(py::module_& m) {
  m.def("version", [] { return std::string(weightsync::version()); }, "The libweightsync version.");
  m.def(
      "transports",
      [] {
        py::list out;
        for (const auto& t : weightsync::available_transports()) {
          py::dict d;
          d["name"] = t.name;
          d["description"] = t.description;
          d["viable"] = t.viable;
          d["reason"] = t.reason;
          d["reads_cuda_slots"] = t.reads_cuda_slots;
          d["writes_cuda_memory"] = t.writes_cuda_memory;
          out.append(d);
        }
        return out;
      },
      "Every data transport built in, in negotiation order (best first), and whether it is viable here.");
  m.def(
      "settings",
      [] {
        py::list out;
        for (const auto& s : weightsync::describe_settings()) {
          py::dict d;
          d["name"] = s.name;
          d["environment"] = s.environment;
          d["value"] = s.value;
          d["source"] = s.source;
          d["error"] = s.error;
          d["description"] = s.description;
          out.append(d);
        }
        return out;
      },
      "Every setting in force (WEIGHTSYNC_* environment variables or defaults) and where it came from.");
  m.def(
      "cuda_info",
      [] {
        const weightsync::CudaInfo c = weightsync::cuda_info();
        py::dict d;
        d["built"] = c.built;
        d["usable"] = c.usable;
        d["reason"] = c.reason;
        d["devices"] = c.device_count;
        d["device"] = c.device_name;
        return d;
      },
      "Whether this build has CUDA memory support and whether a device is usable.");
}

}  // namespace wspy
