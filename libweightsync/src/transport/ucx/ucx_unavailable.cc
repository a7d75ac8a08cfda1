// The UCX factory of a build without UCX: every call says so.
#include "transport/one_sided.h"
#include "transport/ucx/ucx_transport.h"

namespace weightsync::detail {
namespace {

const char* kNotBuilt =
    "this library was built without UCX (install libucx-dev and configure with WEIGHTSYNC_WITH_UCX=ON)";

class UnavailableUcx final : public TransportFactory {
 public:
  const char* name() const override { return "ucx"; }
  TransportInfo probe() const override {
    return TransportInfo{"ucx", "UCX one-sided reads (ucp_get)", false, kNotBuilt};
  }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings&) const override {
    return Status(ErrorCode::kInvalidConfig, kNotBuilt);
  }
  // Refused under encryption whether built or not, as the real one is.
  Status usable(const ChannelParams& params) const override { return one_sided_use_refusal(params); }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>&,
                                            const ChannelParams&) const override {
    return Status(ErrorCode::kInvalidConfig, kNotBuilt);
  }
};

}  // namespace

const TransportFactory& ucx_transport_factory() {
  static const UnavailableUcx factory;
  return factory;
}

}  // namespace weightsync::detail
