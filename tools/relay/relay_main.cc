// weightsync-relay: a relay daemon for one node. It pulls each new version
// from the trainer (or another relay), keeps the newest resident in its own
// ring and serves it to the engines of this node (shm) and to other relays
// or engines (tcp). Configuration: flags, or WEIGHTSYNC_* variables (a flag
// wins); see --help and docs/relays.md ("The relay daemon").
//
// Exit codes: 0 after a clean stop (SIGTERM, SIGINT); 1 when the stop took
// longer than --stop-timeout-ms; 2 on a configuration error (bad flag,
// address or setting, port in use) or when an endpoint cannot start.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

#include "bind_check.h"
#include "daemon_log.h"
#include "relay_config.h"
#include "relay_daemon.h"
#include "stop_signals.h"
#include "systemd_notify.h"
#include "weightsync/metrics.h"
#include "weightsync/settings.h"
#include "weightsync/version.h"

namespace {

const char* const kFooter = R"(
Environment (a flag given on the command line wins over its variable):
  WEIGHTSYNC_RELAY_UPSTREAMS, WEIGHTSYNC_RELAY_LISTEN, WEIGHTSYNC_RELAY_HEALTH_ADDRESS,
  WEIGHTSYNC_RELAY_METRICS_ADDRESS, WEIGHTSYNC_RELAY_SLOTS; and the library's own:
  WEIGHTSYNC_SECRET (the shared secret: never pass it as a flag), WEIGHTSYNC_BIND,
  WEIGHTSYNC_TIMEOUT_MS, WEIGHTSYNC_CONNECT_TIMEOUT_MS, WEIGHTSYNC_LOG_LEVEL, ...
  (weightsync-info lists them all with their values).

Same-host engines: the relay's publisher offers shm (sealed memfd slots, descriptors
passed over an abstract Unix socket) to subscribers on this host, tcp to the others;
subscribers connect to the one --listen address and negotiate.

Health: --health-address serves GET /livez (200 while forwarding lives) and
GET /readyz (200 once a complete version is held and served, else 503); each body
is a one-line reason. Under systemd (Type=notify) it sends READY=1 with the first
version and WATCHDOG=1 pings when WatchdogSec= is set.

Stop: SIGTERM or SIGINT closes every subscriber connection and exits 0.

Examples:
  # a node relay: trainer first, a rack relay as fallback; engines here use shm
  WEIGHTSYNC_SECRET=... weightsync-relay --upstream trainer:7000,rack-relay:7001 \
      --listen 0.0.0.0:7001 --health-address :8081
  curl -s 127.0.0.1:8081/readyz      # 503 "waiting for the first version; ..." then 200
  # secret from a 0600 file, metrics for Prometheus, 4 slots
  weightsync-relay -u 10.0.0.1:7000 --secret-file /etc/weightsync/secret \
      --metrics-address :9464 --slots 4
)";

}  // namespace

int main(int argc, char** argv) try {
  // Before any thread starts: SIGTERM and SIGINT are read from a signalfd.
  auto signals = wsrelay::StopSignals::install();
  if (!signals.ok()) {
    wsrelay::complain(signals.status().to_string());
    return 2;
  }
  CLI::App app{
      "weightsync-relay: forwards each new weight version from a trainer (or another relay) "
      "and serves it to this node's engines (shm) and to other hosts (tcp)."};
  app.footer(kFooter);
  app.set_version_flag("--version", std::string("weightsync-relay ") + weightsync::version());
  wsrelay::DaemonConfig config;
  wsrelay::add_options(app, &config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto options = wsrelay::relay_options(config);
  if (!options.ok()) {
    wsrelay::complain(options.status().message() + " (see --help)");
    return 2;
  }
  for (const auto& s : weightsync::describe_settings(options->publisher, options->subscriber)) {
    if (!s.error.empty()) {
      wsrelay::complain(s.environment + ": " + s.error);
      return 2;
    }
  }
  if (!config.metrics_address.empty() && !weightsync::metrics_available()) {
    wsrelay::complain(
        "--metrics-address: this build has no /metrics endpoint (prometheus-cpp-dev was absent)");
    return 2;
  }
  const char* bind_env = std::getenv("WEIGHTSYNC_BIND");
  const std::string listen_host = options->publisher.bind_address.value_or(
      bind_env != nullptr && *bind_env != '\0' ? bind_env : "127.0.0.1");
  if (wsrelay::bindable_host(listen_host)) {
    const std::string host = listen_host == "localhost" ? "127.0.0.1" : listen_host;
    if (auto s = wsrelay::check_bindable(host, options->publisher.port, "--listen"); !s.ok()) {
      wsrelay::complain(s.message());
      return 2;
    }
  }
  wsrelay::say(std::string("weightsync-relay ") + weightsync::version() + " starting (" +
               (options->pipelined ? "pipelined" : "whole versions") + ", " +
               std::to_string(options->publisher.slots) + " slots, systemd notify " +
               (wsrelay::SystemdNotifier::available() ? "built in" : "not built") + ")");
  return wsrelay::run_daemon(config, *options, *signals);
} catch (const std::exception& e) {
  wsrelay::complain(std::string("unexpected: ") + e.what());
  return 2;
}
