// The UCX transport's factory: one-sided reads of host slots, never with
// encryption.
#include "transport/one_sided.h"
#include "transport/ucx/ucx_sides.h"
#include "transport/ucx/ucx_transport.h"

namespace weightsync::detail {
namespace {

class UcxFactory final : public TransportFactory {
 public:
  const char* name() const override { return "ucx"; }
  TransportInfo probe() const override { return probe_ucx(); }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings& settings) const override {
    if (Status refused = one_sided_serve_refusal(settings); !refused.ok()) return refused;
    return create_ucx_publisher(settings.loopback_only);
  }
  Status usable(const ChannelParams& params) const override { return one_sided_use_refusal(params); }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>& offer,
                                            const ChannelParams& params) const override {
    return open_ucx_data_channel(offer, params.slot_count, params.slot_bytes, params.connect_timeout_ms);
  }
};

}  // namespace

const TransportFactory& ucx_transport_factory() {
  static const UcxFactory factory;
  return factory;
}

}  // namespace weightsync::detail
