// The ibverbs transport's factory: RDMA READs of host slots, never with
// encryption (one-sided reads cannot be encrypted).
#include "transport/one_sided.h"
#include "transport/verbs/verbs_sides.h"
#include "transport/verbs/verbs_transport.h"

namespace weightsync::detail {
namespace {

class VerbsFactory final : public TransportFactory {
 public:
  const char* name() const override { return "verbs"; }
  TransportInfo probe() const override { return probe_verbs(); }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings& settings) const override {
    if (Status refused = one_sided_serve_refusal(settings); !refused.ok()) return refused;
    return make_verbs_server();
  }
  Status usable(const ChannelParams& params) const override { return one_sided_use_refusal(params); }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>& offer,
                                            const ChannelParams& params) const override {
    return open_verbs_data_channel(offer, params.slot_count, params.slot_bytes, params.exchange);
  }
};

}  // namespace

const TransportFactory& verbs_transport_factory() {
  static const VerbsFactory factory;
  return factory;
}

}  // namespace weightsync::detail
