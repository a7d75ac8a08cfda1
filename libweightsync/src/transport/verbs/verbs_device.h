// RAII owners of ibverbs handles, opening a device's active port, and
// connecting an RC queue pair to a remote endpoint (INIT -> RTR -> RTS).
// Errors name the failing verb and what to check.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "transport/verbs/verbs_wire.h"
#include "weightsync/status.h"

namespace weightsync::detail {

struct IbvContextDeleter {
  void operator()(ibv_context* c) const { ibv_close_device(c); }
};
struct IbvPdDeleter {
  void operator()(ibv_pd* p) const { ibv_dealloc_pd(p); }
};
struct IbvMrDeleter {
  void operator()(ibv_mr* m) const { ibv_dereg_mr(m); }
};
struct IbvCqDeleter {
  void operator()(ibv_cq* c) const { ibv_destroy_cq(c); }
};
struct IbvQpDeleter {
  void operator()(ibv_qp* q) const { ibv_destroy_qp(q); }
};
using IbvContext = std::unique_ptr<ibv_context, IbvContextDeleter>;
using IbvPd = std::unique_ptr<ibv_pd, IbvPdDeleter>;
using IbvMr = std::unique_ptr<ibv_mr, IbvMrDeleter>;
using IbvCq = std::unique_ptr<ibv_cq, IbvCqDeleter>;
using IbvQp = std::unique_ptr<ibv_qp, IbvQpDeleter>;

// An opened device with an active port, its protection domain and GID.
struct VerbsDevice {
  IbvContext context;  // destroyed last
  IbvPd pd;
  std::string name;
  std::uint8_t port = 1;
  ibv_port_attr port_attr{};
  ibv_gid gid{};
  int gid_index = 0;
};

// Opens WEIGHTSYNC_VERBS_DEVICE if set, else the first device with an active
// port. kInvalidConfig with the reason when there is none.
Result<VerbsDevice> open_verbs_device();

// An RC queue pair on `cq` allowing `max_reads` outstanding RDMA READs.
Result<IbvQp> create_rc_qp(const VerbsDevice& device, ibv_cq* cq, int max_reads);
// This side's endpoint blob for `qp`.
VerbsEndpoint local_endpoint(const VerbsDevice& device, const ibv_qp* qp, std::uint32_t psn);
// Moves `qp` to RTS connected to `remote`. `allow_remote_read` for the target side.
Status connect_rc_qp(const VerbsDevice& device, ibv_qp* qp, std::uint32_t local_psn,
                     const VerbsEndpoint& remote, bool allow_remote_read, int max_reads);

}  // namespace weightsync::detail
