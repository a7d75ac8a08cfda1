// channel/group_channel.h: trajectory groups from generators to the trainer
// over ZeroMQ PUSH/PULL, authenticated with the shared secret, with bounded
// queues so that a slow trainer slows the generators down.
//
// Contract
// - GroupReceiver (the trainer) binds a PULL socket; GroupSender (each
//   generator) connects a PUSH socket to it. ZeroMQ reconnects by itself, so
//   a sender survives a trainer restart and a receiver survives a dead
//   sender (its queued messages are simply gone).
// - A message is two frames: an HMAC-SHA256 of the payload under the shared
//   secret (empty when no secret is set), then the payload (group_codec.h).
//   A receiver with a secret rejects a message whose MAC does not match; a
//   receiver without one rejects a message that carries a MAC, and both
//   reject a message that is not two frames or does not decode. A rejected
//   message is returned as an Error saying why, counted, and dropped; the
//   receiver keeps working.
// - Backpressure: each side queues at most high_water_mark messages (plus
//   the kernel's socket buffers); send() waits up to send_timeout for room
//   and returns false when there was none (the caller checks whether it
//   should stop, then tries again). Nothing is ever dropped by the sender.
// - Sockets close with linger 0: closing never blocks.
// - Thread: each object is one thread's (ZeroMQ sockets are not thread-safe).
//   Construction errors (bad endpoint, address in use) are Errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/replay_buffer.h"
#include "zorplex/result.h"

namespace channel {

struct ChannelOptions {
  std::string secret;  // shared by trainer and generators; empty: no authentication (loopback only)
  int high_water_mark = 4;
  std::chrono::milliseconds send_timeout{500};
};

struct ReceiverCounters {
  std::uint64_t received = 0;
  std::uint64_t rejected_authentication = 0;
  std::uint64_t rejected_malformed = 0;
  std::uint64_t bytes = 0;
};

class GroupSender {
 public:
  static zorplex::Result<std::unique_ptr<GroupSender>> connect(const std::string& endpoint,
                                                               const ChannelOptions& options);
  ~GroupSender();
  GroupSender(const GroupSender&) = delete;
  GroupSender& operator=(const GroupSender&) = delete;

  // true: queued for the trainer; false: no room within send_timeout.
  zorplex::Result<bool> send(const algorithms::TrajectoryGroup& group);
  // Sends raw frames (tests: forged or malformed messages).
  zorplex::Result<bool> send_frames(const std::string& mac, const std::string& payload);

 private:
  struct Impl;
  explicit GroupSender(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class GroupReceiver {
 public:
  // endpoint like "tcp://0.0.0.0:5600" or "tcp://127.0.0.1:*" (any free port).
  static zorplex::Result<std::unique_ptr<GroupReceiver>> bind(const std::string& endpoint,
                                                              const ChannelOptions& options);
  ~GroupReceiver();
  GroupReceiver(const GroupReceiver&) = delete;
  GroupReceiver& operator=(const GroupReceiver&) = delete;

  // The endpoint actually bound (with the port chosen for "*").
  const std::string& endpoint() const;
  // nullopt: nothing arrived within timeout. Error: a message was rejected.
  std::optional<zorplex::Result<algorithms::TrajectoryGroup>> receive(std::chrono::milliseconds timeout);
  const ReceiverCounters& counters() const;

 private:
  struct Impl;
  explicit GroupReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// HMAC-SHA256(secret, payload) as 32 raw bytes; "" for an empty secret.
std::string payload_mac(const std::string& secret, const std::string& payload);

}  // namespace channel
