// Transport negotiation: preference order, offers, viability, fallback.
#include "subscriber/negotiation.h"

#include <algorithm>

#include "common/host_identity.h"
#include "common/log.h"
#include "transport/cuda_ipc/cuda_ipc_data_channel.h"
#include "transport/shm/shm_data_channel.h"
#include "transport/tcp/tcp_data_channel.h"
#include "transport/ucx/ucx_transport.h"
#include "weightsync/transports.h"

namespace weightsync::detail {
namespace {

Result<std::unique_ptr<DataChannel>> open(const std::string& name, const TransportOffer& offer,
                                          const NegotiationInput& in) {
  if (name == "verbs") return open_verbs_data_channel(offer.blob, in.slot_count, in.slot_bytes, in.exchange);
  if (name == "ucx")
    return open_ucx_data_channel(offer.blob, in.slot_count, in.slot_bytes, in.connect_timeout_ms);
  if (name == "shm" || name == "cuda_ipc") {
    auto shm = ShmOffer::decode(offer.blob);
    if (!shm.ok())
      return Status(ErrorCode::kProtocolError, "the publisher's " + name + " offer is malformed");
    auto host = host_identity();  // boot id + network namespace, or WEIGHTSYNC_HOST_ID
    if (!host.ok()) return host.status();
    if (host->empty() || shm->boot_id != *host) {
      return Status(ErrorCode::kInvalidConfig,
                    "the publisher runs on another host (another kernel or network namespace)");
    }
    const LocalChannelConfig local{shm->socket_name,      in.secret,     in.session_id, in.client_name,
                                   in.connect_timeout_ms, in.slot_count, in.slot_bytes};
    return name == "cuda_ipc" ? open_cuda_ipc_data_channel(local) : open_shm_data_channel(local);
  }
  return open_tcp_data_channel(TcpChannelConfig{in.publisher, in.secret, in.session_id, in.client_name,
                                                in.connect_timeout_ms, in.encryption});
}

}  // namespace

Result<std::unique_ptr<DataChannel>> negotiate_transport(const NegotiationInput& in) {
  if (auto host = host_identity(); !host.ok()) return host.status();  // a malformed WEIGHTSYNC_HOST_ID
  const std::vector<TransportInfo> built = available_transports();
  std::string names = "auto";
  for (const auto& t : built) names += ", " + t.name;
  const bool any = in.requested == "auto";
  if (!any && std::none_of(built.begin(), built.end(),
                           [&](const TransportInfo& t) { return t.name == in.requested; })) {
    return Status(
        ErrorCode::kInvalidConfig,
        "transport '" + in.requested + "' is not built into this library (available: " + names + ")");
  }
  std::string reasons;
  Status tried;  // the last transport that was tried and failed to open
  for (const TransportInfo& t : built) {
    if (!any && t.name != in.requested) continue;
    auto offer = std::find_if(in.offers.begin(), in.offers.end(),
                              [&](const TransportOffer& o) { return o.name == t.name; });
    Status why;
    if (in.encryption && (t.name == "ucx" || t.name == "verbs")) {
      why = Status(ErrorCode::kInvalidConfig,
                   "not used with encryption: its one-sided reads cannot be encrypted (use tcp, or shm on the "
                   "same host)");
    } else if (offer == in.offers.end()) {
      why = Status(ErrorCode::kInvalidConfig, "not offered by the publisher");
    } else if (!t.viable) {
      why = Status(ErrorCode::kInvalidConfig, "not viable here: " + t.reason);
    } else {
      auto channel = open(t.name, *offer, in);
      if (channel.ok()) return channel;
      if (channel.status().code() == ErrorCode::kAuthFailed) return channel.status();
      why = channel.status();
      if (why.code() != ErrorCode::kInvalidConfig) tried = why;
    }
    if (!any) {
      // Keep the error's code (a timeout stays a timeout); say what was asked.
      return Status(why.code(), "transport '" + t.name +
                                    "' was requested (WEIGHTSYNC_TRANSPORT or options) but " + why.message());
    }
    WS_INFO("subscriber: transport {} not used: {}; trying the next", t.name, why.message());
    reasons += (reasons.empty() ? "" : "; ") + t.name + ": " + why.message();
  }
  // Nothing worked. If a transport was really tried, its failure (e.g. the
  // publisher went away) is the error to act on; else it is configuration.
  return Status(tried.ok() ? ErrorCode::kInvalidConfig : tried.code(),
                "no data transport is usable with this publisher (" + reasons + ")");
}

}  // namespace weightsync::detail
