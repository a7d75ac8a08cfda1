// TCP sockets with deadlines. Every blocking step is a poll(2) bounded by a
// Deadline; send/recv use MSG_DONTWAIT and MSG_NOSIGNAL, so nothing blocks
// past its deadline and a dead peer is an error, never a SIGPIPE.
//
// Errors: kTimeout when the deadline passes; kConnectionLost when the peer
// closed or reset the connection, or cannot be reached; messages name `peer`.
// A Socket is owned by one thread at a time, except shutdown_both(), which any
// thread may call to wake a thread blocked on it.
//
// Encryption: after enable_records() every function below sends and receives
// through the socket's RecordLayer (net/record_layer.h), so protocol code is
// the same with and without it.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/deadline.h"
#include "weightsync/status.h"

namespace weightsync::detail {

class RecordLayer;

class Socket {
 public:
  Socket() noexcept;
  explicit Socket(int fd) noexcept;
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  int fd() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  void shutdown_both() noexcept;
  void close() noexcept;

  // From now on, every byte sent and received is encrypted (both sides switch
  // at the same point of the protocol: right after WELCOME).
  void enable_records(std::unique_ptr<RecordLayer> records) noexcept;
  RecordLayer* records() const noexcept { return records_.get(); }
  bool encrypted() const noexcept { return records_ != nullptr; }
  // Received plaintext waits in the record layer: the socket is readable
  // although poll/epoll on fd() may not say so.
  bool has_pending_input() const noexcept;

 private:
  int fd_ = -1;
  std::unique_ptr<RecordLayer> records_;
};

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const;
};

// "host:port" or "[ipv6]:port".
Result<HostPort> parse_host_port(const std::string& address);
// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

Result<Socket> connect_tcp(const HostPort& target, Deadline deadline);
// Binds and listens; port 0 picks a free port.
Result<Socket> listen_tcp(const std::string& bind_host, std::uint16_t port);
Result<std::uint16_t> local_port(const Socket& socket);
// Accepts one connection; kTimeout if none arrives before the deadline.
Result<Socket> accept_tcp(const Socket& listener, Deadline deadline, std::string* peer_out);
void set_nodelay_keepalive(const Socket& socket);
// For a long-lived server-side connection: TCP keepalive probes after 30 s
// of silence (so a vanished host is found even when nothing is sent) and
// TCP_USER_TIMEOUT = `user_timeout_ms` (data unacknowledged that long, or
// unanswered probes, reset the connection). Best effort: failures are ignored.
void set_liveness_options(const Socket& socket, int user_timeout_ms);

// Waits until the socket is readable (data or EOF).
Status wait_readable(const Socket& socket, Deadline deadline, const char* peer);
Status send_all(const Socket& socket, const void* data, std::size_t bytes, Deadline deadline,
                const char* peer);
// Sends every byte described by iov[0..count); the array is consumed. With
// stall_ms > 0 each wait for buffer space is also bounded by stall_ms, so a
// long transfer is limited by progress rather than by total time.
Status send_iov(const Socket& socket, iovec* iov, std::size_t count, Deadline deadline, const char* peer,
                int stall_ms = 0);
Status recv_all(const Socket& socket, void* data, std::size_t bytes, Deadline deadline, const char* peer);
// Receives into iov[0..count) in order; the array is consumed. on_bytes is
// called for each piece as it lands (for streaming checksums and progress).
// stall_ms bounds the wait for each next byte, not the whole transfer.
// wake_bytes > 1 (unencrypted sockets): while waiting, the thread is woken
// only once that many bytes, or the rest of the transfer, are queued
// (SO_RCVLOWAT, set back to 1 before returning), so a large transfer takes
// fewer wakeups per byte (docs/perf/relay_cpu.md). A stall is then a wait of
// stall_ms with no byte queued, found within 2 x stall_ms.
Status recv_iov(const Socket& socket, iovec* iov, std::size_t count, int stall_ms, const char* peer,
                const std::function<void(const void*, std::size_t)>& on_bytes, std::size_t wake_bytes = 1);

}  // namespace weightsync::detail
