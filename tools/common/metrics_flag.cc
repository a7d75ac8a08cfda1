// The --metrics-address flag (metrics_flag.h).
#include "metrics_flag.h"

#include <cstdio>

namespace weightsync::tools {

Result<std::unique_ptr<MetricsEndpoint>> start_metrics_flag(const std::string& address, const std::string& who) {
  if (address.empty()) return std::unique_ptr<MetricsEndpoint>();
  MetricsOptions options;
  options.address = address;
  auto started = MetricsEndpoint::start(options);
  if (!started.ok()) {
    return Status(started.status().code(), "--metrics-address " + address + ": " + started.status().message());
  }
  std::printf("%s: metrics on http://%s/metrics\n", who.c_str(), (*started)->address().c_str());
  std::fflush(stdout);
  return std::move(started).value();
}

}  // namespace weightsync::tools
