// channel/group_channel.h: trajectory groups from generators to the trainer
// over ZeroMQ PUSH/PULL, with authenticated connections, replay protection,
// a bound on each message, and bounded queues so that a slow trainer slows
// the generators down (docs/rl_protocol.md).
//
// Contract
// - GroupReceiver (the trainer) binds a PULL socket; GroupSender (each
//   generator) connects a PUSH socket to it. ZeroMQ reconnects by itself, so
//   a sender survives a trainer restart and a receiver survives a dead
//   sender (its queued messages are simply gone).
// - Who may connect (connection_guard.h). With a secret: ZeroMQ CURVE, both
//   key pairs derived from the secret (channel_keys.h); the receiver's ZAP
//   handler admits only the secret's client key, so a peer without the secret
//   never gets past the handshake and no byte of its messages is buffered.
//   Without a secret: only a loopback peer whose socket is owned by this
//   process's uid (the kernel's word, libweightsync's peer_identity.h),
//   checked when the connection is accepted, at the handshake, and again for
//   each message whose connection is still open (ZMQ_SRCFD). A refused
//   connection is counted (rejected_connections) and reported by receive()
//   as one Error per batch of refusals (at most one a second while messages
//   are waiting, so refusals never crowd them out); it never reaches the
//   trainer.
// - A message is ONE frame: "WSTG", version 1, the sender's 16-byte random
//   session id, a uint64 little-endian sequence number (1, 2, ... per
//   session), then the payload (group_codec.h). The receiver keeps, per
//   (generator, session), the highest sequence accepted and drops any message
//   at or below it (a replay or a repeat: rejected_replay), for the 4096
//   most recently active sessions (older ones are forgotten).
// - Bounds: a frame larger than max_message_bytes is refused by ZeroMQ before
//   it is buffered (ZMQ_MAXMSGSIZE; the connection is dropped); a message of
//   several frames is refused (rejected_malformed). What still holds for an
//   AUTHENTICATED peer only: libzmq delivers a multipart message only once it
//   is complete and counts its high-water mark in whole messages, so a peer
//   that passed the handshake (holds the secret, or without one runs as this
//   uid) can make the receiver buffer an endless message of MORE frames, each
//   <= max_message_bytes. Nobody else can: the handshake comes first.
//   Otherwise each admitted connection holds at most high_water_mark whole
//   messages plus one being read (each <= max_message_bytes) and the kernel's
//   socket buffers; decoding one is bounded as group_codec.h says.
// - A rejected message is returned as an Error saying why, counted, and
//   dropped; the receiver keeps working.
// - Backpressure: each side queues at most high_water_mark messages (plus
//   the kernel's socket buffers); send() waits up to send_timeout for room
//   and returns false when there was none (the caller checks whether it
//   should stop, then tries again). Nothing is ever dropped by the sender.
// - Sockets close with linger 0: closing never blocks.
// - Thread: each object is one thread's (ZeroMQ sockets are not thread-safe);
//   the receiver runs its connection guard on a thread of its own.
//   Construction errors (bad endpoint, address in use, no CURVE) are Errors.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "algorithms/replay_buffer.h"
#include "zorplex/result.h"

namespace channel {

struct ChannelOptions {
  std::string secret;  // shared by trainer and generators; empty: loopback peers of this uid only
  int high_water_mark = 4;
  std::chrono::milliseconds send_timeout{500};
  std::size_t max_message_bytes = std::size_t{64} << 20;  // one whole message, header included
};

struct ReceiverCounters {
  std::uint64_t received = 0;
  std::uint64_t rejected_authentication = 0;  // messages whose connection failed the uid check
  std::uint64_t rejected_malformed = 0;
  std::uint64_t rejected_replay = 0;
  std::uint64_t rejected_connections = 0;  // refused at or before the handshake
  std::uint64_t bytes = 0;
};

inline constexpr std::size_t kSessionIdBytes = 16;
inline constexpr std::size_t kFrameHeaderBytes = 4 + 1 + kSessionIdBytes + 8;

// The one frame of a message: header (session, sequence) + payload.
std::string frame_message(const std::string& session, std::uint64_t sequence, std::string_view payload);

class GroupSender {
 public:
  static zorplex::Result<std::unique_ptr<GroupSender>> connect(const std::string& endpoint,
                                                               const ChannelOptions& options);
  ~GroupSender();
  GroupSender(const GroupSender&) = delete;
  GroupSender& operator=(const GroupSender&) = delete;

  // true: queued for the trainer; false: no room within send_timeout.
  zorplex::Result<bool> send(const algorithms::TrajectoryGroup& group);
  // Sends one frame as it is (tests: replays, malformed messages).
  zorplex::Result<bool> send_raw(std::string_view frame);
  // This sender's random session id, and the sequence its next send() uses.
  const std::string& session() const;
  std::uint64_t next_sequence() const;

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
  // nullopt: nothing arrived within timeout. Error: a message was rejected,
  // or connections were refused since the last such report.
  std::optional<zorplex::Result<algorithms::TrajectoryGroup>> receive(std::chrono::milliseconds timeout);
  const ReceiverCounters& counters() const;

 private:
  struct Impl;
  explicit GroupReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace channel
