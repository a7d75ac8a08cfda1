// The transports built into this library, in negotiation preference order
// (best first), and their viability on this machine. A new transport is a
// folder under transport/ with one factory, and one line below.
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/verbs/verbs_transport.h"
#include "weightsync/transports.h"

namespace weightsync {
namespace detail {

const std::vector<const TransportFactory*>& transport_registry() {
  static const std::vector<const TransportFactory*> registry = {
      &verbs_transport_factory(),     // RDMA READ: the NIC serves, no publisher CPU
      &ucx_transport_factory(),       // UCX one-sided reads (ucp_get)
      &cuda_ipc_transport_factory(),  // same host, CUDA slots
      &shm_transport_factory(),       // same host, host slots
      &tcp_transport_factory(),       // everywhere (host slots): the fallback
  };
  return registry;
}

}  // namespace detail

std::vector<TransportInfo> available_transports() {
  try {
    std::vector<TransportInfo> out;
    for (const detail::TransportFactory* factory : detail::transport_registry()) out.push_back(factory->probe());
    return out;
  } catch (...) {
    return {};
  }
}

}  // namespace weightsync
