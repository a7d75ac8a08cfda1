// The CUDA IPC transport's factory: CUDA slots only, same host only.
#include "transport/cuda_ipc/cuda_ipc_data_channel.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/local_server.h"
#include "transport/local_session.h"

namespace weightsync::detail {
namespace {

class CudaIpcFactory final : public TransportFactory {
 public:
  const char* name() const override { return "cuda_ipc"; }
  TransportInfo probe() const override { return probe_cuda_ipc(); }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings& settings) const override {
    if (!settings.cuda_slots) {
      return Status(ErrorCode::kInvalidConfig, "it serves CUDA slots only (these are host memory)");
    }
    auto host = local_host_for_serving();
    if (!host.ok()) return host.status();
    return make_local_server("cuda_ipc", std::move(*host));
  }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>& offer,
                                            const ChannelParams& params) const override {
    auto config = local_channel_config("cuda_ipc", offer, params);
    if (!config.ok()) return config.status();
    return open_cuda_ipc_data_channel(*config);
  }
};

}  // namespace

const TransportFactory& cuda_ipc_transport_factory() {
  static const CudaIpcFactory factory;
  return factory;
}

}  // namespace weightsync::detail
