// ServedTransports: the registry's transports on the publisher side.
#include "publisher/served_transports.h"

#include "common/log.h"

namespace weightsync::detail {

Result<std::unique_ptr<ServedTransports>> ServedTransports::prepare(const ServeSettings& settings) {
  auto out = std::make_unique<ServedTransports>();
  for (const TransportFactory* factory : transport_registry()) {
    auto served = factory->serve(settings);
    if (served.ok()) {
      out->prepared_.push_back(std::move(*served));
      continue;
    }
    if (served.status().code() != ErrorCode::kInvalidConfig) return served.status();
    WS_INFO("publisher: {} transport not offered: {}", factory->name(), served.status().message());
    out->refusals_.push_back(std::string(factory->name()) + ": " + served.status().message());
  }
  return out;
}

Result<SlotAllocator> ServedTransports::slot_allocator(const std::string& name, bool lock_memory) {
  for (std::unique_ptr<ServedTransport>& transport : prepared_) {
    if (transport->name() != name) continue;
    if (auto allocator = transport->slot_allocator(lock_memory)) return std::move(*allocator);
    return Status(ErrorCode::kInvalidConfig, "the " + name + " transport allocates no slots");
  }
  std::string why = "it is not available here";
  for (const std::string& refusal : refusals_) {
    if (refusal.compare(0, name.size() + 2, name + ": ") == 0) why = refusal.substr(name.size() + 2);
  }
  return Status(ErrorCode::kInvalidConfig, "it needs the " + name + " transport, which is not offered (" + why +
                                               "; run weightsync-info)");
}

Status ServedTransports::start(SlotRing& ring) {
  std::vector<std::unique_ptr<ServedTransport>> started;
  for (std::unique_ptr<ServedTransport>& transport : prepared_) {
    Status status = transport->start(ring);
    if (status.ok()) {
      offers_.push_back(TransportOffer{transport->name(), transport->offer()});
      started.push_back(std::move(transport));
      continue;
    }
    WS_INFO("publisher: {} transport not offered: {}", transport->name(), status.message());
    refusals_.push_back(std::string(transport->name()) + ": " + status.message());
  }
  prepared_ = std::move(started);  // those that failed to start are released here
  if (!offers_.empty()) return Status();
  std::string reasons;
  for (const std::string& refusal : refusals_) reasons += (reasons.empty() ? "" : "; ") + refusal;
  return Status(ErrorCode::kInvalidConfig, "no data transport can serve these slots (" + reasons + ")");
}

Result<std::vector<std::uint8_t>> ServedTransports::connect(const std::string& name, std::uint64_t session,
                                                            const std::vector<std::uint8_t>& blob) {
  for (std::unique_ptr<ServedTransport>& transport : prepared_) {
    if (transport->name() == name) return transport->connect(session, blob);
  }
  return Status(ErrorCode::kInvalidConfig, "transport '" + name + "' is not served here");
}

void ServedTransports::session_closed(std::uint64_t session) {
  for (std::unique_ptr<ServedTransport>& transport : prepared_) transport->session_closed(session);
}

ServedTransport* ServedTransports::for_role(Role role) {
  for (std::unique_ptr<ServedTransport>& transport : prepared_) {
    if (transport->connection_role() == role) return transport.get();
  }
  return nullptr;
}

Socket ServedTransports::take_local_listener() {
  for (std::unique_ptr<ServedTransport>& transport : prepared_) {
    Socket listener = transport->take_local_listener();
    if (listener.valid()) return listener;
  }
  return Socket();
}

}  // namespace weightsync::detail
