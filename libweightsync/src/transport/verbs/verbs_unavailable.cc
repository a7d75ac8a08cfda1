// The ibverbs factory of a build without libibverbs: every call says so.
#include "transport/unavailable_factory.h"
#include "transport/verbs/verbs_transport.h"

namespace weightsync::detail {

const TransportFactory& verbs_transport_factory() {
  static const UnavailableOneSidedFactory factory(
      "verbs", "ibverbs RDMA READ over RC queue pairs",
      "this library was built without ibverbs (install libibverbs-dev and configure with "
      "WEIGHTSYNC_WITH_VERBS=ON)");
  return factory;
}

}  // namespace weightsync::detail
