// endpoint_address.cc: "HOST:PORT" for the metrics endpoint, checked.
#include "metrics/endpoint_address.h"

#include <arpa/inet.h>

namespace weightsync::detail {
namespace {

Status bad(const std::string& address, const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "metrics address '" + address + "': " + why +
                                                 " (expected PORT, :PORT, IPV4:PORT or [IPV6]:PORT)");
}

}  // namespace

Result<MetricsBind> parse_metrics_address(const std::string& address) {
  MetricsBind bind;
  std::string host;
  std::string port;
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    port = address;
  } else {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return bad(address, "the port is not a number");
  }
  const unsigned long value = std::stoul(port);
  if (value > 65535) return bad(address, "the port is past 65535");
  bind.port = static_cast<std::uint16_t>(value);
  if (host.empty() || host == "localhost") {
    bind.host = "127.0.0.1";
    return bind;
  }
  unsigned char buf[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) != 1) {
      return bad(address, "not an IPv6 address");
    }
    bind.host = host;
    return bind;
  }
  if (inet_pton(AF_INET, host.c_str(), buf) != 1)
    return bad(address, "the host is not a numeric IPv4 address");
  bind.host = host;
  return bind;
}

}  // namespace weightsync::detail
