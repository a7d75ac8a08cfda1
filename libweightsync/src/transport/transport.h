// The contract every data transport implements, on both sides, and the
// registry that lists them (docs/transports.md).
//
// A transport is one folder under transport/ that provides one
// TransportFactory. The factory
//   - probes whether the transport can work on this machine (probe()),
//   - serves a publisher's ring (serve(), then ServedTransport::start()),
//     making the opaque offer blob the publisher puts in SLOT_TABLE, and
//   - opens a DataChannel from that blob on the subscriber (open()).
// transport_registry() lists the factories in negotiation preference order;
// the publisher and the subscriber's negotiation loop over it and name no
// transport. Adding a transport is a new folder and one line in registry.cc.
//
// Threads: factories are stateless singletons, callable from any thread.
// A ServedTransport is created and started on the publisher's thread; after
// start() its connect()/session_closed()/serve_connection() are called by
// the publisher server's workers and event loop, concurrently (each
// implementation guards its own state). Errors are Statuses: kInvalidConfig
// from serve()/start()/open() means "not usable here, for this reason"
// (the caller logs it and goes on to the next transport); other codes are
// real failures.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/socket.h"
#include "ring/slot_ring.h"
#include "transport/data_channel.h"
#include "weightsync/transports.h"
#include "wire/frame.h"
#include "wire/messages.h"

namespace weightsync::detail {

// What the publisher serves, as far as a transport's choice depends on it.
struct ServeSettings {
  bool loopback_only = true;  // the publisher listens on loopback only
  bool encryption = false;    // every byte must be encrypted (one-sided reads cannot be)
  bool cuda_slots = false;    // the slots are CUDA memory
};

// One request on a connection of a transport's own (tcp's data connections,
// the same-host transports' local socket), on a server worker. `frame` is
// null for the request a connection makes by authenticating (the same-host
// transports hand over their regions then).
struct ConnectionRequest {
  const Socket* socket = nullptr;
  std::uint64_t session = 0;
  const Frame* frame = nullptr;
  int io_timeout_ms = 10000;
  std::atomic<std::uint64_t>* bytes_served = nullptr;
};

// OK and !close: answered, the connection stays. Any other Status closes it.
struct ConnectionReply {
  Status status;
  bool close = false;
};

// The publisher side of one transport, for the life of a publisher.
class ServedTransport {
 public:
  virtual ~ServedTransport() = default;
  virtual const char* name() const = 0;
  // Allocates the ring's slots, when WEIGHTSYNC_SLOT_ALLOCATOR names this
  // transport; nullopt if it allocates none (all but ucx).
  virtual std::optional<SlotAllocator> slot_allocator(bool /*lock_memory*/) { return std::nullopt; }
  // Registers or maps the ring's slots once and makes the offer.
  // kInvalidConfig: not offered, and why.
  virtual Status start(SlotRing& ring) = 0;
  virtual const std::vector<std::uint8_t>& offer() const = 0;
  // TRANSPORT_CONNECT: a subscriber's connection blob -> the publisher's.
  virtual Result<std::vector<std::uint8_t>> connect(std::uint64_t /*session*/,
                                                    const std::vector<std::uint8_t>& /*blob*/) {
    return Status(ErrorCode::kInvalidConfig, std::string("transport '") + name() + "' takes no connection");
  }
  // A control session ended: drop what connect() made for it.
  virtual void session_closed(std::uint64_t /*session*/) {}
  // The handshake role of the connections this transport serves itself, if
  // any (Role::kData: tcp; Role::kShm: the local socket of shm/cuda_ipc).
  virtual std::optional<Role> connection_role() const { return std::nullopt; }
  // Role::kShm transports: the listening local socket (taken once by the
  // publisher's server, which accepts and authenticates on it).
  virtual Socket take_local_listener() { return Socket(); }
  virtual ConnectionReply serve_connection(const ConnectionRequest& /*request*/) {
    return ConnectionReply{Status(ErrorCode::kProtocolError, "this transport serves no connections"), true};
  }
};

// TRANSPORT_CONNECT over the control connection: (transport, blob) -> the
// publisher's blob (verbs queue pairs).
using TransportExchange =
    std::function<Result<std::vector<std::uint8_t>>(const std::string&, const std::vector<std::uint8_t>&)>;

// What a subscriber's channel needs besides the offer blob.
struct ChannelParams {
  HostPort publisher;
  std::string secret;
  std::uint64_t session_id = 0;
  std::string client_name;
  int connect_timeout_ms = 5000;
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
  TransportExchange exchange;
  // Encryption: tcp connections are encrypted; same-host transports need no
  // link; one-sided reads (ucx, verbs) cannot be, so they are not used.
  bool encryption = false;
};

class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  virtual const char* name() const = 0;
  // Whether this build has the transport and it can work on this machine.
  virtual TransportInfo probe() const = 0;
  // Publisher side, before the ring exists (ucx may allocate its slots).
  // kInvalidConfig: not offered under these settings, and why.
  virtual Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings& settings) const = 0;
  // Subscriber side: whether this subscriber may use the transport at all
  // (checked before the offer); kInvalidConfig with the reason if not.
  virtual Status usable(const ChannelParams& /*params*/) const { return Status(); }
  virtual Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>& offer,
                                                    const ChannelParams& params) const = 0;
};

// Every transport built into this library, best first.
const std::vector<const TransportFactory*>& transport_registry();

}  // namespace weightsync::detail
