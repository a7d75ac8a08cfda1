// PublisherServer: serves subscriber connections from one event loop and a
// bounded pool of workers (docs/thread_model.md), so that open connections
// cost file descriptors, not threads.
//
// The event-loop thread owns every connection. It accepts, reads frames
// without blocking (wire/frame_assembler.h), runs the handshake itself (no
// unauthenticated peer ever holds a thread), keeps the deadlines and parks
// requests that wait (QUERY_VERSION for a newer version, WAIT_WATERMARK,
// FETCH_DELTA for the delta thread: control_handler.h). A complete request
// from an authenticated connection is handed to a worker (publisher/
// worker_pool.h), which replies with blocking, deadline-bounded writes and
// hands the connection back. One more thread watches the ring for commits to
// answer parked queries at once.
//
// Budgets (PublisherOptions): connections that have not authenticated have
// their own small budget (publisher/handshake_budget.h) and a short deadline;
// only authenticated connections count against max_connections, and one
// refused for capacity is sent ERROR(kBusy) first. Authenticated
// connections silent past idle_timeout_ms are closed; accepted sockets get
// TCP keepalive and TCP_USER_TIMEOUT. Without a secret, only peers running
// as this process's user are admitted.
//
// Threads: start() and stop() from the owner; counters and health() from any
// thread. stop() (also run by the destructor) wakes and joins every thread.
// No exception leaves a thread: each body catches and logs; a failure of the
// event loop itself is reported by health().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "net/socket.h"
#include "publisher/handshake_budget.h"
#include "publisher/served_state.h"
#include "publisher/stream_table.h"
#include "publisher/worker_pool.h"

namespace weightsync::detail {

struct ServerConfig {
  std::string secret;
  bool integrity = false;  // control sessions must ask for the integrity layer (auth/integrity.h)
  bool encryption = false;  // every TCP connection must ask for encryption (net/record_layer.h)
  int io_timeout_ms = 10000;
  std::size_t max_connections = 256;
  std::size_t max_handshakes = 64;
  std::size_t max_handshakes_per_address = 16;
  int handshake_timeout_ms = 2000;
  int idle_timeout_ms = 0;  // 0: never
  std::size_t max_workers = 64;
  // Named streams (adapters) served beside the default one; 0: none.
  std::size_t max_streams = 0;
};

struct ServerCounters {
  std::atomic<std::uint64_t> connections_active{0};
  std::atomic<std::uint64_t> connections_accepted{0};
  std::atomic<std::uint64_t> auth_failures{0};
  std::atomic<std::uint64_t> protocol_errors{0};
  std::atomic<std::uint64_t> bytes_served{0};
  std::atomic<std::uint64_t> connections_refused{0};
  std::atomic<std::uint64_t> handshakes_active{0};
  std::atomic<std::uint64_t> handshakes_timed_out{0};
  std::atomic<std::uint64_t> sessions_idle_closed{0};
};

struct ServerHealth {
  bool serving = true;
  std::string error;  // why serving stopped
};

class PublisherServer {
 public:
  // `listener` accepts control and tcp data connections; the same-host
  // transport's local socket, if one is offered, comes from
  // state.transports (ServedTransports::take_local_listener()). `state` is
  // the default stream; with state.ring null there is none, and every
  // session must select a named stream first.
  static Result<std::unique_ptr<PublisherServer>> start(Socket listener, ServerConfig config,
                                                        ServedState state);
  // Named streams (publisher/stream_table.h), from any thread: add_stream
  // takes the stream's local listener and watches its ring; remove_stream
  // stops offering it (its ring is retired: its sessions' requests fail
  // with kConnectionLost) and drops it once its last session closes.
  Status add_stream(std::shared_ptr<const ServedStream> stream);
  Status remove_stream(const std::string& name);
  std::vector<std::string> stream_names() const { return streams_.names(); }
  ~PublisherServer();
  void stop();
  const ServerCounters& counters() const { return counters_; }
  ServerHealth health() const;

 private:
  struct Connection;
  struct Completion;
  using Clock = std::chrono::steady_clock;

  PublisherServer(Socket listener, ServerConfig config, ServedState state);
  Status setup();
  void run_loop();
  void loop_once();
  void watch_versions();
  void fail(const std::string& why);
  void wake();

  // Event loop (loop thread only).
  void accept_ready(bool local, std::uint64_t tag = 0);
  // The fd of a named stream's local listener (-1 if removed).
  int stream_listener_fd(std::uint64_t tag);
  void set_stream_listeners_polled(bool polled);
  // SELECT_STREAM on a worker: binds the session to a named stream.
  Status select_stream(Connection* conn, const Frame& frame, Completion& done);
  void admit(Socket socket, std::string peer, std::string address, bool local);
  void on_readable(Connection* conn);
  void on_handshake_frame(Connection* conn, const Frame& frame);
  void on_authenticated(Connection* conn);
  void dispatch(Connection* conn, Frame frame);
  void dispatch_parked_answer(Connection* conn);
  void finish_completions();
  void resolve_parked();
  // Connections whose record layer holds unread plaintext (encryption).
  void serve_pending_input();
  // How long epoll may wait: kSweepMillis, or less when a parked request's
  // deadline comes sooner (a 10 ms QUERY_VERSION is answered in ~10 ms).
  int wait_millis() const;
  void sweep_deadlines();
  void arm(Connection* conn);
  void refuse(Connection* conn, ErrorCode code, const std::string& why);
  void close_connection(Connection* conn);
  Status peer_allowed(const Connection& conn) const;

  // Workers.
  void serve_request(Connection* conn, Frame frame);
  void serve_request_unguarded(Connection* conn, Frame frame);
  void complete(Completion completion);

  Socket listener_;
  Socket local_listener_;
  ServerConfig config_;
  ServedState state_;
  std::shared_ptr<const ServedStream> default_;  // null: named streams only
  StreamTable streams_;
  std::mutex listeners_mu_;
  std::map<std::uint64_t, Socket> stream_listeners_;          // epoll tag -> listener
  std::map<std::string, std::uint64_t> stream_listener_tag_;  // stream name -> its tag
  std::uint64_t next_listener_tag_ = 0;
  ServerCounters counters_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread loop_;
  std::thread version_watcher_;
  WorkerPool workers_;

  // Loop thread only.
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  // Live control sessions and the stream each serves (null: none selected yet).
  std::unordered_map<std::uint64_t, std::shared_ptr<const ServedStream>> sessions_;
  HandshakeBudget budget_;
  std::size_t authenticated_ = 0;
  std::uint64_t next_id_ = 16;
  std::uint64_t parked_count_ = 0;
  std::vector<std::uint64_t> pending_input_;  // loop thread only
  std::uint64_t latest_seen_ = 0;
  Clock::time_point next_sweep_{};
  Clock::time_point accept_paused_until_{};
  bool accept_paused_ = false;
  std::uint64_t log_window_start_ms_ = 0;
  std::uint32_t logs_in_window_ = 0;
  std::uint64_t logs_suppressed_ = 0;

  // Workers -> loop.
  std::mutex completions_mu_;
  std::deque<Completion> completions_;

  mutable std::mutex health_mu_;
  ServerHealth health_;

  bool log_allowed();
};

}  // namespace weightsync::detail
