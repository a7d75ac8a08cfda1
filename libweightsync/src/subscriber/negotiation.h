// Transport negotiation (docs/protocol.md, "Negotiation"): opens the best
// data transport that this build has, the publisher offers, is viable for
// this subscriber (shm only on the publisher's host) and the user allows.
// A transport that fails to open is logged and the next one is tried, unless
// it was explicitly requested or the failure is an authentication error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "net/socket.h"
#include "transport/data_channel.h"
#include "transport/verbs/verbs_transport.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct NegotiationInput {
  std::string requested;  // "auto" or a transport name
  std::vector<TransportOffer> offers;
  HostPort publisher;
  std::string secret;
  std::uint64_t session_id = 0;
  std::string client_name;
  int connect_timeout_ms = 5000;
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
  // TRANSPORT_CONNECT over the control connection (verbs queue pairs).
  TransportExchange exchange;
  // Encryption: tcp connections are encrypted; same-host transports (shm,
  // cuda_ipc) need no link; one-sided reads (ucx, verbs) cannot be, so they
  // are not used.
  bool encryption = false;
};

// kInvalidConfig for an unknown name, or when no allowed transport works.
Result<std::unique_ptr<DataChannel>> negotiate_transport(const NegotiationInput& input);

}  // namespace weightsync::detail
