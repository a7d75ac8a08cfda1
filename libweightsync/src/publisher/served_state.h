// ServedState: what the publisher's connection handlers need from it: the
// layout, the ring, the transports (their offers, per-session hooks and own
// connections) and the stores that answer FETCH_* requests.
// Owned by PublisherServer; read-only after start except through the ring.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "delta/delta_store.h"
#include "publisher/served_transports.h"
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
  // The transports offered in SLOT_TABLE; owned by the Publisher.
  ServedTransports* transports = nullptr;
  // Views of partial pulls (REGISTER_VIEW, ACQUIRE_VIEW); owned by the Publisher.
  ViewRegistry* views = nullptr;
  // Delta versions (FETCH_DELTA); null when the publisher computes none.
  DeltaStore* deltas = nullptr;
  // Signature blocks (FETCH_SIGNATURE); null when the publisher serves none.
  VersionSigner* signatures = nullptr;
};

}  // namespace weightsync::detail
