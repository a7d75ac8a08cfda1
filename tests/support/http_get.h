// http_get.h: a minimal HTTP/1.0 client for the metrics tests and bench:
// one GET over a fresh loopback connection, and idle connections that send
// nothing (the "scraper that holds a socket" attack).
//
// Contract: blocking calls bounded by `timeout` (connect, send and each
// receive); any thread. No exceptions but std::bad_alloc.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace wstest {

struct HttpReply {
  bool ok = false;    // a complete reply arrived (connection closed by the server)
  int status = 0;     // the status code of its first line
  std::string body;   // after the blank line
  std::string error;  // why not, when !ok
};

HttpReply http_get(const std::string& host, std::uint16_t port, const std::string& path,
                   std::chrono::milliseconds timeout);

// A connected socket that sends nothing; -1 if the connection failed.
// The caller closes it (::close).
int open_idle_connection(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout);

// "HOST:PORT" -> port; 0 when it does not parse.
std::uint16_t port_of(const std::string& address);

}  // namespace wstest
