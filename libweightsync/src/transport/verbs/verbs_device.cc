// Device opening and RC queue pair connection.
#include "transport/verbs/verbs_device.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace weightsync::detail {
namespace {

Status verbs_error(const char* verb, int err) {
  return Status(ErrorCode::kInvalidConfig, std::string(verb) + " failed: " + std::strerror(err));
}

struct DeviceList {
  ibv_device** list = nullptr;
  int count = 0;
  ~DeviceList() {
    if (list != nullptr) ibv_free_device_list(list);
  }
};

}  // namespace

Result<VerbsDevice> open_verbs_device() {
  DeviceList devices;
  devices.list = ibv_get_device_list(&devices.count);
  if (devices.list == nullptr) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("ibv_get_device_list failed: ") + std::strerror(errno) +
                      " (is rdma-core installed and the RDMA kernel support loaded?)");
  }
  if (devices.count == 0) {
    return Status(
        ErrorCode::kInvalidConfig,
        "no RDMA device found (ibv_get_device_list returned none: no InfiniBand/RoCE NIC, driver or "
        "kernel support on this machine)");
  }
  const char* wanted = std::getenv("WEIGHTSYNC_VERBS_DEVICE");
  std::string reasons;
  for (int i = 0; i < devices.count; ++i) {
    const char* name = ibv_get_device_name(devices.list[i]);
    if (wanted != nullptr && *wanted != '\0' && std::strcmp(wanted, name) != 0) continue;
    VerbsDevice device;
    device.name = name;
    device.context.reset(ibv_open_device(devices.list[i]));
    if (!device.context) {
      reasons += std::string(name) + ": ibv_open_device failed; ";
      continue;
    }
    if (ibv_query_port(device.context.get(), device.port, &device.port_attr) != 0 ||
        device.port_attr.state != IBV_PORT_ACTIVE) {
      reasons += std::string(name) + ": port 1 is not active; ";
      continue;
    }
    if (ibv_query_gid(device.context.get(), device.port, device.gid_index, &device.gid) != 0) {
      reasons += std::string(name) + ": ibv_query_gid failed; ";
      continue;
    }
    device.pd.reset(ibv_alloc_pd(device.context.get()));
    if (!device.pd) {
      reasons += std::string(name) + ": ibv_alloc_pd failed; ";
      continue;
    }
    return device;
  }
  if (wanted != nullptr && *wanted != '\0' && reasons.empty()) {
    return Status(ErrorCode::kInvalidConfig,
                  std::string("WEIGHTSYNC_VERBS_DEVICE='") + wanted + "' is not present");
  }
  return Status(ErrorCode::kInvalidConfig, "no usable RDMA device: " + reasons);
}

Result<IbvQp> create_rc_qp(const VerbsDevice& device, ibv_cq* cq, int max_reads) {
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = static_cast<std::uint32_t>(max_reads) + 1;
  attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  IbvQp qp(ibv_create_qp(device.pd.get(), &attr));
  if (!qp) return verbs_error("ibv_create_qp", errno);
  return qp;
}

VerbsEndpoint local_endpoint(const VerbsDevice& device, const ibv_qp* qp, std::uint32_t psn) {
  VerbsEndpoint e;
  e.qp_num = qp->qp_num;
  e.psn = psn & 0xffffff;
  e.lid = device.port_attr.lid;
  std::memcpy(e.gid.data(), device.gid.raw, e.gid.size());
  e.mtu = static_cast<std::uint32_t>(device.port_attr.active_mtu);
  return e;
}

Status connect_rc_qp(const VerbsDevice& device, ibv_qp* qp, std::uint32_t local_psn,
                     const VerbsEndpoint& remote, bool allow_remote_read, int max_reads) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = device.port;
  attr.qp_access_flags = allow_remote_read ? IBV_ACCESS_REMOTE_READ : 0;
  if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return verbs_error("ibv_modify_qp(INIT)", errno);
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min<std::uint32_t>(remote.mtu, device.port_attr.active_mtu));
  attr.dest_qp_num = remote.qp_num;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = static_cast<std::uint8_t>(max_reads);
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = device.port;
  attr.ah_attr.dlid = remote.lid;
  bool global = false;
  for (std::uint8_t b : remote.gid) global = global || b != 0;
  if (global) {  // RoCE, or InfiniBand across subnets: route by GID
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
    attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(device.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    return verbs_error("ibv_modify_qp(RTR)", errno);
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;  // ~67 ms local ACK timeout
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = local_psn & 0xffffff;
  attr.max_rd_atomic = static_cast<std::uint8_t>(max_reads);
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    return verbs_error("ibv_modify_qp(RTS)", errno);
  }
  return Status();
}

}  // namespace weightsync::detail
