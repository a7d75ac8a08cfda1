// The UCX factory of a build without UCX: every call says so.
#include "transport/ucx/ucx_transport.h"
#include "transport/unavailable_factory.h"

namespace weightsync::detail {

const TransportFactory& ucx_transport_factory() {
  static const UnavailableOneSidedFactory factory(
      "ucx", "UCX one-sided reads (ucp_get)",
      "this library was built without UCX (install libucx-dev and configure with WEIGHTSYNC_WITH_UCX=ON)");
  return factory;
}

}  // namespace weightsync::detail
