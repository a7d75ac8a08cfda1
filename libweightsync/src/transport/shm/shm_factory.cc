// The shared-memory transport's factory: viability probe, the local socket
// on the publisher, the mapped regions on the subscriber.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "common/host_identity.h"
#include "net/unix_socket.h"
#include "transport/local_server.h"
#include "transport/local_session.h"
#include "transport/shm/shm_data_channel.h"
#include "transport/shm/shm_transport.h"

namespace weightsync::detail {
namespace {

TransportInfo probe_shm() {
  TransportInfo info{"shm", "same-host shared memory: one copy from the publisher's slot, no network", false,
                     ""};
  auto host = host_identity();
  if (!host.ok() || host->empty()) {
    info.reason = host.ok() ? "cannot read /proc/sys/kernel/random/boot_id or /proc/self/ns/net, so "
                              "same-host peers cannot be recognised"
                            : host.status().message();
    return info;
  }
  int fd = ::memfd_create("weightsync-probe", MFD_CLOEXEC);
  if (fd < 0) {
    info.reason = "memfd_create is not available (Linux >= 3.17 needed)";
    return info;
  }
  ::close(fd);
  static std::atomic<unsigned> probes{0};
  std::string name =
      "weightsync-probe-" + std::to_string(::getpid()) + "-" + std::to_string(probes.fetch_add(1));
  auto listener = listen_unix_abstract(name);
  if (!listener.ok()) {
    info.reason = "abstract Unix sockets are not available: " + listener.status().message();
    return info;
  }
  info.viable = true;
  return info;
}

class ShmFactory final : public TransportFactory {
 public:
  const char* name() const override { return "shm"; }
  TransportInfo probe() const override { return probe_shm(); }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings& settings) const override {
    if (settings.cuda_slots) {
      return Status(ErrorCode::kInvalidConfig, "the slots are CUDA memory (cuda_ipc serves them)");
    }
    auto host = local_host_for_serving();
    if (!host.ok()) return host.status();
    return make_local_server("shm", std::move(*host));
  }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>& offer,
                                            const ChannelParams& params) const override {
    auto config = local_channel_config("shm", offer, params);
    if (!config.ok()) return config.status();
    return open_shm_data_channel(*config);
  }
};

}  // namespace

const TransportFactory& shm_transport_factory() {
  static const ShmFactory factory;
  return factory;
}

}  // namespace weightsync::detail
