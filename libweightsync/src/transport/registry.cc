// The transports built into this library, in preference order, and their
// viability on this machine.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "common/host_identity.h"
#include "net/unix_socket.h"
#include "transport/cuda_ipc/cuda_ipc_data_channel.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/verbs/verbs_transport.h"
#include "weightsync/transports.h"

namespace weightsync {
namespace {

TransportInfo probe_shm() {
  TransportInfo info{"shm", "same-host shared memory: one copy from the publisher's slot, no network", false,
                     ""};
  auto host = detail::host_identity();
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
  auto listener = detail::listen_unix_abstract(name);
  if (!listener.ok()) {
    info.reason = "abstract Unix sockets are not available: " + listener.status().message();
    return info;
  }
  info.viable = true;
  return info;
}

}  // namespace

std::vector<TransportInfo> available_transports() {
  try {
    return {detail::probe_verbs(), detail::probe_ucx(), detail::probe_cuda_ipc(), probe_shm(),
            TransportInfo{"tcp", "TCP streams on a second authenticated connection", true, ""}};
  } catch (...) {
    return {};
  }
}

}  // namespace weightsync
