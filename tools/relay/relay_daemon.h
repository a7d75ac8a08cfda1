// relay_daemon.h: weightsync-relay's main loop: connect (retrying while no
// upstream answers), forward and serve through a weightsync::Relay, report
// progress, health and systemd state, and stop cleanly on SIGTERM/SIGINT.
//
// Contract
// - run() returns the process's exit code: 0 after a clean stop on a signal;
//   2 when an endpoint it was asked for (health, metrics) cannot start.
//   While no upstream is reachable it keeps retrying (backoff 0.5 s doubling
//   to 5 s) and says so on each try, with what to check.
// - Health: /livez is 200 while the loop runs and the relay's forwarding
//   thread lives (RelayStats::running); /readyz is 200 once the relay holds a
//   complete version and its publisher serves, else 503; both say why in one
//   line (the upstream in use, or the one being retried).
// - systemd: READY=1 with the first version held; WATCHDOG=1 while live.
// - Stop: on a signal it logs, sends STOPPING=1, turns /readyz 503, destroys
//   the Relay (its subscribers' connections close, so a pulling leaf gets
//   kConnectionLost at once), then stops the health and metrics servers
//   (in parallel); a guard exits the process
//   with 1 if that takes longer than DaemonConfig::stop_timeout_ms. A
//   connect attempt in progress finishes first (bounded by the connect
//   timeout of each address).
// - One thread (main()'s) runs it; the Relay, health and metrics servers run
//   their own.
#pragma once

#include "relay_config.h"
#include "stop_signals.h"
#include "weightsync/relay.h"

namespace wsrelay {

int run_daemon(const DaemonConfig& config, const weightsync::RelayOptions& options, StopSignals& signals);

}  // namespace wsrelay
