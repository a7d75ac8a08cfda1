// ServedState: what the publisher's connection handlers need from it: the
// layout, the ring, the offers and the transports' per-session hooks.
// Owned by PublisherServer; read-only after start except through the ring.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "delta/delta_store.h"
#include "publisher/version_signer.h"
#include "publisher/view_registry.h"
#include "ring/slot_ring.h"
#include "weightsync/layout.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct ServedState {
  const WeightLayout* layout = nullptr;
  SlotRing* ring = nullptr;
  bool checksums = false;
  // The transports offered in SLOT_TABLE, best first (tcp always last).
  std::vector<TransportOffer> offers;
  // Transports with per-connection state (TRANSPORT_CONNECT): name -> handler
  // returning the accept blob; `session_closed` drops a session's state.
  std::function<Result<std::vector<std::uint8_t>>(const std::string&, std::uint64_t,
                                                  const std::vector<std::uint8_t>&)>
      transport_connect;
  std::function<void(std::uint64_t)> session_closed;
  // Views of partial pulls (REGISTER_VIEW, ACQUIRE_VIEW); owned by the Publisher.
  ViewRegistry* views = nullptr;
  // Delta versions (FETCH_DELTA); null when the publisher computes none.
  DeltaStore* deltas = nullptr;
  // Signature blocks (FETCH_SIGNATURE); null when the publisher serves none.
  VersionSigner* signatures = nullptr;
};

}  // namespace weightsync::detail
