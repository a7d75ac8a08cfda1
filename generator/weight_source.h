// generator/weight_source.h: where a generator's weights come from: the
// trainer (or a relay) at one of several addresses, or this generator's own
// relay, which pulls from those addresses and serves other generators too.
//
// Contract
// - connect() makes one attempt and returns a connected Subscriber or the
//   Status of the attempt (the caller retries within its own deadline).
//   Without a relay it tries each upstream in order and returns the first
//   that connects. With a relay (relay_bind set) it first creates the Relay
//   (its own Publisher, bound to relay_bind, pulling from the upstreams in
//   order and failing over between them on its own), then connects the
//   generator's Subscriber to that relay: on this host, so negotiation
//   picks shm, and the generator pays one local copy (relay slot ->
//   parameters) on top of the relay's own pull.
// - A relay that stopped on a fatal error (RelayStats::running false) is
//   replaced on the next connect().
// - The relay's address is written to relay_address_file (when set) once the
//   relay serves, so a launcher can start the generators that pull from it.
// - Threads: one thread at a time (the generator's loop). The Relay runs its
//   own forwarding thread (weightsync/relay.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weightsync/options.h"
#include "weightsync/relay.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"

namespace generator {

struct WeightSourceOptions {
  std::vector<std::string> upstreams;  // host:port of the trainer or of relays, in order of preference
  std::string relay_bind;              // "HOST[:PORT]": relay at this address; empty: no relay
  std::string relay_address_file;      // where to write the relay's address (optional)
  weightsync::SubscriberOptions subscriber;
};

class WeightSource {
 public:
  explicit WeightSource(WeightSourceOptions options);
  ~WeightSource();

  weightsync::Result<std::unique_ptr<weightsync::Subscriber>> connect();
  // For logs: "the trainer at A" or "its relay at R (upstreams A, B)".
  std::string describe() const;
  bool relaying() const noexcept { return !options_.relay_bind.empty(); }
  // The relay connect() created (nullptr: none yet, or no relay). connect()
  // may replace a stopped relay: untrack it (metrics) before calling it.
  const weightsync::Relay* relay() const noexcept { return relay_.get(); }

 private:
  weightsync::Status start_relay();

  WeightSourceOptions options_;
  std::unique_ptr<weightsync::Relay> relay_;
};

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_addresses(const std::string& text);

}  // namespace generator
