// Transport negotiation: preference order, offers, viability, fallback.
#include "subscriber/negotiation.h"

#include <algorithm>

#include "common/host_identity.h"
#include "common/log.h"
#include "weightsync/transports.h"

namespace weightsync::detail {

Result<std::unique_ptr<DataChannel>> negotiate_transport(const NegotiationInput& in) {
  if (auto host = host_identity(); !host.ok()) return host.status();  // a malformed WEIGHTSYNC_HOST_ID
  const std::vector<const TransportFactory*>& built = transport_registry();
  std::string names = "auto";
  for (const TransportFactory* t : built) names += std::string(", ") + t->name();
  const bool any = in.requested == "auto";
  if (!any && std::none_of(built.begin(), built.end(),
                           [&](const TransportFactory* t) { return t->name() == in.requested; })) {
    return Status(
        ErrorCode::kInvalidConfig,
        "transport '" + in.requested + "' is not built into this library (available: " + names + ")");
  }
  std::string reasons;
  Status tried;  // the last transport that was tried and failed to open
  for (const TransportFactory* factory : built) {
    const std::string name = factory->name();
    if (!any && name != in.requested) continue;
    auto offer = std::find_if(in.offers.begin(), in.offers.end(),
                              [&](const TransportOffer& o) { return o.name == name; });
    Status why = factory->usable(in);
    if (!why.ok()) {
      // refused whatever the publisher offers (e.g. one-sided reads under encryption)
    } else if (offer == in.offers.end()) {
      why = Status(ErrorCode::kInvalidConfig, "not offered by the publisher");
    } else if (const TransportInfo info = factory->probe(); !info.viable) {
      why = Status(ErrorCode::kInvalidConfig, "not viable here: " + info.reason);
    } else {
      auto channel = factory->open(offer->blob, in);
      if (channel.ok()) return channel;
      if (channel.status().code() == ErrorCode::kAuthFailed) return channel.status();
      why = channel.status();
      if (why.code() != ErrorCode::kInvalidConfig) tried = why;
    }
    if (!any) {
      // Keep the error's code (a timeout stays a timeout); say what was asked.
      return Status(why.code(), "transport '" + name +
                                    "' was requested (WEIGHTSYNC_TRANSPORT or options) but " + why.message());
    }
    WS_INFO("subscriber: transport {} not used: {}; trying the next", name, why.message());
    reasons += (reasons.empty() ? "" : "; ") + name + ": " + why.message();
  }
  // Nothing worked. If a transport was really tried, its failure (e.g. the
  // publisher went away) is the error to act on; else it is configuration.
  return Status(tried.ok() ? ErrorCode::kInvalidConfig : tried.code(),
                "no data transport is usable with this publisher (" + reasons + ")");
}

}  // namespace weightsync::detail
