// channel/channel_keys.h: the trajectory channel's CURVE key pairs, derived
// from the shared secret, so that a trainer and its generators need nothing
// but WEIGHTSYNC_SECRET to authenticate each other.
//
// Contract
// - derive_channel_keys(secret): two Curve25519 key pairs (server: the
//   trainer's GroupReceiver; client: every GroupSender), each secret key the
//   32-byte output of HKDF-SHA256 (RFC 5869; salt "weightsync trajectory
//   channel/1", info "curve server" or "curve client"), each public key
//   zmq_curve_public() of it. Deterministic: the same secret gives the same
//   keys in every process. Keys are raw 32-byte strings (ZeroMQ's binary form).
// - Whoever knows the secret can act as either side; whoever does not cannot
//   complete the CURVE handshake against either.
// - Errors: an empty secret, or ZeroMQ without CURVE (zmq_has("curve")), is
//   an Error saying so.
// - Pure functions; any thread.
#pragma once

#include <string>

#include "zorplex/result.h"

namespace channel {

struct ChannelKeys {
  std::string server_public, server_secret;
  std::string client_public, client_secret;
};

zorplex::Result<ChannelKeys> derive_channel_keys(const std::string& secret);

// The 40-character Z85 text of a 32-byte key (tests: ws_channel_attacker's arguments).
std::string z85_key(const std::string& key);

}  // namespace channel
