// FaultyProxy: a real TCP proxy on loopback that forwards every connection to
// a target and can flip one bit of the server-to-client stream of the Nth
// connection at a given byte offset: a fault-injecting wrapper around the real
// TCP transport, for checksum tests. Stops and joins its threads on destruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wstest {

// A TCP socket listening on 127.0.0.1 at a free port (written to *port);
// throws std::runtime_error naming `who` if it cannot. The caller closes it.
int listen_loopback(int backlog, std::uint16_t* port, const char* who);

class FaultyProxy {
 public:
  // Corrupts byte `offset` of the server->client stream of connection number
  // `connection` (1-based, in accept order); connection 0 corrupts nothing.
  // `mask`: the bits flipped at that byte (one bit by default).
  FaultyProxy(std::uint16_t target_port, int connection, std::uint64_t offset, std::uint8_t mask = 0x10);
  ~FaultyProxy();

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int flips() const { return flips_.load(); }
  // Every byte that crossed the proxy so far, both directions of every
  // connection, in arrival order (what an on-path observer sees).
  std::vector<std::uint8_t> seen() const;

 private:
  void accept_loop();
  void pump(int from, int to, bool corrupt);

  std::uint16_t target_port_;
  int corrupt_connection_;
  std::uint64_t corrupt_offset_;
  std::uint8_t mask_ = 0x10;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> flips_{0};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::uint8_t> seen_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
};

}  // namespace wstest
