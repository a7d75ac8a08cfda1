// Transport negotiation (docs/protocol.md, "Negotiation"): opens the best
// data transport that this build has, the publisher offers, is viable for
// this subscriber (shm only on the publisher's host) and the user allows.
// A transport that fails to open is logged and the next one is tried, unless
// it was explicitly requested or the failure is an authentication error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "wire/messages.h"

namespace weightsync::detail {

// What the channel needs (ChannelParams), which transport the user allows
// ("auto" or a name) and what the publisher offers.
struct NegotiationInput : ChannelParams {
  std::string requested = "auto";
  std::vector<TransportOffer> offers;
};

// kInvalidConfig for an unknown name, or when no allowed transport works.
Result<std::unique_ptr<DataChannel>> negotiate_transport(const NegotiationInput& input);

}  // namespace weightsync::detail
