// channel/connection_guard.h: who may connect to a GroupReceiver. The ZAP
// handler (ZeroMQ's authentication hook, RFC 27) of the receiver's own
// context, answering in a thread of its own so that handshakes never wait for
// the trainer's loop.
//
// Contract
// - With a client key (the secret's, channel_keys.h): the receiver speaks
//   CURVE; a request is admitted only when its mechanism is CURVE and its
//   client public key equals that key (compared in constant time).
// - Either way it watches the receiver socket's monitor (zmq_socket_monitor,
//   made before the socket binds): a handshake that fails a protocol check
//   before ZAP (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: the other mechanism, a
//   secret on one side only; a malformed greeting) is counted as a refusal,
//   and with CURVE so is one the peer abandons (..._NO_DETAIL: a peer
//   without the secret that saw our greeting and hung up).
// - Without a client key (no secret): the receiver speaks NULL; the monitor's
//   ZMQ_EVENT_ACCEPTED / DISCONNECTED / CLOSED (whose value is the
//   connection's descriptor) are used as well. Every accepted connection is
//   asked at once who owns its peer (loopback_peer_is_me(): the kernel's
//   inet_diag answer, libweightsync's net/peer_identity.h); a peer that is
//   not on loopback or not of this process's uid is cut (shutdown(2) of that
//   descriptor, only if it still is a socket on the receiver's port: a number
//   already closed and reused elsewhere in the process is left alone) and
//   remembered while its descriptor still carries that connection. A ZAP
//   request (which names only the peer's IP, not which connection it is) is
//   admitted only when the peer is on loopback and no such refused connection
//   is still open: the requester's ACCEPTED event is always read before its
//   request is answered, so a foreign requester is always one of those. The
//   price: while another user keeps connecting, new connections of our own
//   uid are refused too (ZeroMQ retries them). The receiver also checks each
//   message's connection again (ZMQ_SRCFD).
// - start() binds inproc://zeromq.zap.01 in `context`, which must happen
//   before the receiver's socket binds (ZeroMQ admits everyone on a socket
//   whose context has no ZAP handler), and the guard must outlive that
//   socket: destroy the socket first. Its sockets are closed only by the
//   destructor, so if its thread stops on an error the handler stays bound
//   and unanswered: handshakes time out (fail closed).
// - Threads: start() and the destructor on the owner's thread; refused() and
//   last_refusal() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "zorplex/result.h"

namespace channel {

// true: `fd` is a TCP connection whose peer is on this host's loopback and
// owned by this process's uid. Error: the kernel could not say (refuse it).
zorplex::Result<bool> loopback_peer_is_me(int fd);

class ConnectionGuard {
 public:
  // client_public_key: 32 bytes (CURVE) or empty (NULL, uid check);
  // monitor_endpoint: where the receiver socket's monitor publishes.
  static zorplex::Result<std::unique_ptr<ConnectionGuard>> start(zmq::context_t& context,
                                                                 const std::string& client_public_key,
                                                                 const std::string& monitor_endpoint);
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Connections refused so far (ZAP denials and cut connections), and why the last one was.
  std::uint64_t refused() const { return refused_.load(); }
  std::string last_refusal() const;

 private:
  ConnectionGuard(zmq::context_t& context, std::string client_public_key);
  void run();
  void handle_zap();
  void drain_monitor();
  void refuse(const std::string& why);

  struct Cut {
    int fd;
    std::string local, peer;  // the connection's two addresses, as getsockname/getpeername gave them
  };

  zmq::socket_t zap_;
  zmq::socket_t monitor_;
  std::string client_key_;
  std::vector<Cut> cut_;  // the thread's
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> refused_{0};
  mutable std::mutex mutex_;
  std::string last_refusal_;
  std::thread thread_;
};

}  // namespace channel
