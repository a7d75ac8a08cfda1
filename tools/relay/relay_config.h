// relay_config.h: weightsync-relay's configuration, from flags and the
// daemon's variables (WEIGHTSYNC_RELAY_UPSTREAMS and the like; CLI11: a flag
// on the command line wins over its variable), checked before anything starts.
//
// Contract
// - add_options() registers every flag on a CLI::App; the parsed values land
//   in a DaemonConfig the caller owns (it must outlive the parse).
// - check() and relay_options() never throw: a bad address, port, slot count
//   or secret file is a kInvalidArgument / kInvalidConfig Status whose message
//   names the flag, its variable and what to do.
// - The secret is never taken from the command line (visible in ps): the
//   library reads WEIGHTSYNC_SECRET itself, or --secret-file names a file
//   readable by its owner only (0600, like scripts/run-secret.sh makes).
// - Single-threaded: used by main() before the daemon starts.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weightsync/relay.h"
#include "weightsync/status.h"

namespace wsrelay {

struct DaemonConfig {
  std::vector<std::string> upstreams;  // "host:port", failover in order
  std::string listen;                  // "HOST:PORT", ":PORT" or "PORT"; "" = WEIGHTSYNC_BIND, a free port
  std::string health_address;          // "" = off
  std::string metrics_address;         // "" = off
  std::size_t slots = 3;
  bool no_pipelined = false;
  std::string secret_file;
  std::string secret_on_command_line;  // refused: only here to say so
  double summary_seconds = 60.0;
  int stop_timeout_ms = 15000;
};

struct HostPort {
  std::string host;  // "" when the text had none
  std::uint16_t port = 0;
};

// "HOST:PORT", ":PORT" or "PORT" (any host name; checked where it is used).
weightsync::Result<HostPort> parse_host_port(const std::string& text, const std::string& what);

// A host the daemon can bind: a numeric IPv4 address or "localhost".
bool bindable_host(const std::string& host);

void add_options(CLI::App& app, DaemonConfig* config);

// Everything that can be checked without a network: addresses, ranges.
weightsync::Status check(const DaemonConfig& config);

// The Relay's options: upstreams, listen host and port, slots, pipelining,
// the secret file's content (WEIGHTSYNC_SECRET otherwise, read by the library).
weightsync::Result<weightsync::RelayOptions> relay_options(const DaemonConfig& config);

}  // namespace wsrelay
