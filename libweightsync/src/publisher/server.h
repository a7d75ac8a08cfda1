// PublisherServer: accepts subscriber connections and serves each on its own
// thread (docs/thread_model.md).
//
// One acceptor thread polls the listening socket and a wake-up pipe. Each
// accepted connection runs the handshake and then the control or data loop on
// a thread of its own; a failure on one connection closes that connection only.
// stop() (also run by the destructor) wakes every thread and joins it. No
// exception leaves a thread: each body catches, logs and closes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "ring/slot_ring.h"
#include "weightsync/layout.h"
#include "wire/messages.h"

namespace weightsync::detail {

struct ServerConfig {
  std::string secret;
  int io_timeout_ms = 10000;
  std::size_t max_connections = 256;
};

// What connection handlers need from the publisher.
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
};

struct ServerCounters {
  std::atomic<std::uint64_t> connections_active{0};
  std::atomic<std::uint64_t> connections_accepted{0};
  std::atomic<std::uint64_t> auth_failures{0};
  std::atomic<std::uint64_t> protocol_errors{0};
  std::atomic<std::uint64_t> bytes_served{0};
};

class PublisherServer {
 public:
  // `local_listener` (an abstract Unix socket; may be invalid) serves the
  // shared-memory transport to subscribers on this host.
  static Result<std::unique_ptr<PublisherServer>> start(Socket listener, Socket local_listener,
                                                        ServerConfig config, ServedState state);
  ~PublisherServer();
  void stop();
  const ServerCounters& counters() const { return counters_; }

 private:
  struct Connection {
    Socket socket;
    std::string peer;
    bool local = false;  // accepted on the Unix socket
    std::thread thread;
    std::atomic<bool> done{false};
  };

  PublisherServer(Socket listener, Socket local_listener, ServerConfig config, ServedState state);
  void accept_loop();
  void accept_one(bool local);
  void serve(Connection* conn);
  void reap_finished_locked();
  bool session_alive(std::uint64_t session);

  Socket listener_;
  Socket local_listener_;
  int wake_pipe_[2] = {-1, -1};
  ServerConfig config_;
  ServedState state_;
  ServerCounters counters_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_;
  std::set<std::uint64_t> sessions_;
};

}  // namespace weightsync::detail
