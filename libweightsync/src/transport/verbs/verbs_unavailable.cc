// The ibverbs entry points of a build without libibverbs: every call says so.
#include "transport/verbs/verbs_transport.h"

namespace weightsync::detail {
namespace {
const char* kNotBuilt =
    "this library was built without ibverbs (install libibverbs-dev and configure with "
    "WEIGHTSYNC_WITH_VERBS=ON)";
}

Result<std::unique_ptr<VerbsPublisherTransport>> start_verbs_publisher(const SlotRing&) {
  return Status(ErrorCode::kInvalidConfig, kNotBuilt);
}

Result<std::unique_ptr<DataChannel>> open_verbs_data_channel(const std::vector<std::uint8_t>&, std::uint32_t,
                                                             std::uint64_t, const TransportExchange&) {
  return Status(ErrorCode::kInvalidConfig, kNotBuilt);
}

TransportInfo probe_verbs() {
  return TransportInfo{"verbs", "ibverbs RDMA READ over RC queue pairs", false, kNotBuilt};
}

}  // namespace weightsync::detail
