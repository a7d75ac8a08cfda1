// ServedTransports: a publisher's data transports, one per registry entry
// that agrees to serve (transport/transport.h). Publisher::create prepares
// them before the ring exists (one may allocate its slots), starts them on
// the ring, and hands them to the server, which asks them for the offers of
// SLOT_TABLE, TRANSPORT_CONNECT answers, session ends and the connections a
// transport serves itself. No transport is named here.
//
// Threads: prepare/slot_allocator/start on the publisher's thread, before the
// server starts; afterwards the accessors are read-only and connect(),
// session_closed() and the transports' serve_connection() are called from
// the server's threads (each transport guards its own state). Owned by the
// Publisher: destroyed after the server and before the ring.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "wire/messages.h"

namespace weightsync::detail {

class ServedTransports {
 public:
  // Every registry entry is asked to serve under `settings`; a refusal
  // (kInvalidConfig) is logged with its reason and the transport is not
  // offered. Other errors fail.
  static Result<std::unique_ptr<ServedTransports>> prepare(const ServeSettings& settings);

  // The slot allocator of the prepared transport `name` (WEIGHTSYNC_SLOT_ALLOCATOR
  // naming a transport), or kInvalidConfig saying why there is none.
  Result<SlotAllocator> slot_allocator(const std::string& name, bool lock_memory);

  // Starts every prepared transport on the ring, best first; one that fails
  // is logged and not offered. kInvalidConfig, with every reason, when none
  // is left.
  Status start(SlotRing& ring);

  // The offers for SLOT_TABLE, best first.
  const std::vector<TransportOffer>& offers() const { return offers_; }
  // TRANSPORT_CONNECT for the transport `name`.
  Result<std::vector<std::uint8_t>> connect(const std::string& name, std::uint64_t session,
                                            const std::vector<std::uint8_t>& blob);
  // A control session ended: every transport drops its state for it.
  void session_closed(std::uint64_t session);
  // The transport that serves connections of this handshake role, or null.
  ServedTransport* for_role(Role role);
  // The local socket of the same-host transport, if one is offered (taken once).
  Socket take_local_listener();

 private:
  std::vector<std::unique_ptr<ServedTransport>> prepared_;  // after start(): the started ones
  std::vector<std::string> refusals_;  // "name: why", for errors
  std::vector<TransportOffer> offers_;
};

}  // namespace weightsync::detail
