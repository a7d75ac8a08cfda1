// FrameProxy: a real TCP proxy on loopback that forwards every connection to a
// target and, on plain (not encrypted, no integrity layer) connections, can
// replace the publisher's reply to one kind of request: a hostile upstream
// built around a real publisher, for relay and delta attacks.
//
// Each connection has one thread per direction. The client-to-server stream is
// read frame by frame; when a request of type `trigger` passes, the next frame
// the server sends on that connection goes to `rewrite` instead of the client.
// `rewrite` gets the frame's header type and payload and a reader for more
// server bytes (e.g. a DELTA's link bytes), and returns the bytes to send to
// the client in its place (header included; wstest::frame_bytes builds them).
// Every other byte passes unchanged.
//
// Threads: the rewrite callback runs on a proxy thread. The destructor shuts
// every socket down and joins its threads. Loopback only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "wire/frame.h"

namespace wstest {

// A frame's bytes: 16-byte header + payload.
std::vector<std::uint8_t> frame_bytes(weightsync::detail::MsgType type, const std::vector<std::uint8_t>& payload);

class FrameProxy {
 public:
  using ReadMore = std::function<std::vector<std::uint8_t>(std::size_t bytes)>;
  using Rewrite = std::function<std::vector<std::uint8_t>(weightsync::detail::MsgType type,
                                                          const std::vector<std::uint8_t>& payload, const ReadMore& more)>;

  FrameProxy(std::uint16_t target_port, weightsync::detail::MsgType trigger, Rewrite rewrite);
  ~FrameProxy();
  FrameProxy(const FrameProxy&) = delete;
  FrameProxy& operator=(const FrameProxy&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int rewrites() const { return rewrites_.load(); }

 private:
  struct Link;
  void accept_loop();
  void client_to_server(Link* link);
  void server_to_client(Link* link);

  std::uint16_t target_port_;
  weightsync::detail::MsgType trigger_;
  Rewrite rewrite_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> rewrites_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::thread> pumps_;
};

}  // namespace wstest
