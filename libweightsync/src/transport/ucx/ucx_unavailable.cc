// The UCX entry points of a build without UCX: every call says so.
#include "transport/ucx/ucx_transport.h"

namespace weightsync::detail {
namespace {
const char* kNotBuilt =
    "this library was built without UCX (install libucx-dev and configure with WEIGHTSYNC_WITH_UCX=ON)";
}

Result<std::unique_ptr<UcxPublisherTransport>> create_ucx_publisher(bool) {
  return Status(ErrorCode::kInvalidConfig, kNotBuilt);
}

Result<std::unique_ptr<DataChannel>> open_ucx_data_channel(const std::vector<std::uint8_t>&, std::uint32_t,
                                                           std::uint64_t, int) {
  return Status(ErrorCode::kInvalidConfig, kNotBuilt);
}

TransportInfo probe_ucx() {
  return TransportInfo{"ucx", "UCX one-sided reads (ucp_get)", false, kNotBuilt};
}

}  // namespace weightsync::detail
