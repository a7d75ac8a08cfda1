// The ibverbs factory of a build without libibverbs: every call says so.
#include "transport/one_sided.h"
#include "transport/verbs/verbs_transport.h"

namespace weightsync::detail {
namespace {

const char* kNotBuilt =
    "this library was built without ibverbs (install libibverbs-dev and configure with "
    "WEIGHTSYNC_WITH_VERBS=ON)";

class UnavailableVerbs final : public TransportFactory {
 public:
  const char* name() const override { return "verbs"; }
  TransportInfo probe() const override {
    return TransportInfo{"verbs", "ibverbs RDMA READ over RC queue pairs", false, kNotBuilt};
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

const TransportFactory& verbs_transport_factory() {
  static const UnavailableVerbs factory;
  return factory;
}

}  // namespace weightsync::detail
