// The --metrics-address flag of the executables (examples, trainer,
// generator): its help text and starting the endpoint it names.
//
// Contract
// - start_metrics_flag(""): no endpoint (nullptr), nothing printed.
// - Otherwise the started endpoint, and one line on stdout:
//   "<who>: metrics on http://HOST:PORT/metrics" (the port resolved when 0
//   was asked). An error Status (from MetricsEndpoint::start, prefixed by
//   the flag) says what to change; nothing throws.
// - The caller owns the endpoint and must destroy it before the sources it
//   adds to it, or remove them first (weightsync/metrics.h).
#pragma once

#include <memory>
#include <string>

#include "weightsync/metrics.h"
#include "weightsync/status.h"

namespace weightsync::tools {

inline constexpr const char* kMetricsAddressHelp =
    "Serve Prometheus /metrics on HOST:PORT (a bare :PORT binds 127.0.0.1; port 0 picks one and "
    "the line 'metrics on http://...' says which; off by default; docs/configuration.md)";

Result<std::unique_ptr<MetricsEndpoint>> start_metrics_flag(const std::string& address, const std::string& who);

}  // namespace weightsync::tools
