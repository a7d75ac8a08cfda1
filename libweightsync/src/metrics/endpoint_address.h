// endpoint_address.h: parses the metrics endpoint's "HOST:PORT" into the
// form civetweb's listening_ports takes.
//
// Contract: pure function, any thread. Accepts "PORT", ":PORT", "HOST:PORT"
// and "[V6]:PORT"; HOST is a numeric IPv4 address or "localhost" (no name
// lookups); an absent host is 127.0.0.1. Anything else, a port past 65535 or
// with non-digits: kInvalidArgument saying what was expected.
#pragma once

#include <cstdint>
#include <string>

#include "weightsync/status.h"

namespace weightsync::detail {

struct MetricsBind {
  std::string host;  // "127.0.0.1", or "[::1]" for IPv6
  std::uint16_t port = 0;
  std::string listening_ports() const { return host + ":" + std::to_string(port); }
};

Result<MetricsBind> parse_metrics_address(const std::string& address);

}  // namespace weightsync::detail
