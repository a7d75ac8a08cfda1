// relay_config.cc: flags, variables and their checks (relay_config.h).
#include "relay_config.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace wsrelay {

using weightsync::ErrorCode;
using weightsync::Result;
using weightsync::Status;

Result<HostPort> parse_host_port(const std::string& text, const std::string& what) {
  const std::size_t colon = text.rfind(':');
  HostPort out;
  std::string port = text;
  if (colon != std::string::npos) {
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  const bool digits =
      !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
  const unsigned long value = digits ? std::stoul(port) : 70000;
  if (value > 65535) {
    return Status(ErrorCode::kInvalidArgument,
                  what + " '" + text + "': expected HOST:PORT, :PORT or PORT with a port 0..65535");
  }
  out.port = static_cast<std::uint16_t>(value);
  return out;
}

bool bindable_host(const std::string& host) {
  in_addr addr{};
  return host == "localhost" || ::inet_pton(AF_INET, host.c_str(), &addr) == 1;
}

void add_options(CLI::App& app, DaemonConfig* c) {
  app.add_option("-u,--upstream", c->upstreams,
                 "Upstream HOST:PORT (a trainer's publisher or another relay); repeat or separate with "
                 "commas: tried in order, failover to the next")
      ->envname("WEIGHTSYNC_RELAY_UPSTREAMS")
      ->delimiter(',');
  app.add_option("-l,--listen", c->listen,
                 "HOST:PORT its subscribers connect to over tcp (same-host subscribers get shm on the same "
                 "address); default: WEIGHTSYNC_BIND (127.0.0.1) and a free port")
      ->envname("WEIGHTSYNC_RELAY_LISTEN");
  app.add_option(
         "--health-address", c->health_address,
         "Serve HTTP GET /livez and /readyz on HOST:PORT (a bare :PORT binds 127.0.0.1); off by default")
      ->envname("WEIGHTSYNC_RELAY_HEALTH_ADDRESS");
  app.add_option("--metrics-address", c->metrics_address,
                 "Serve Prometheus /metrics on HOST:PORT (a bare :PORT binds 127.0.0.1); off by default; "
                 "needs a build with prometheus-cpp")
      ->envname("WEIGHTSYNC_RELAY_METRICS_ADDRESS");
  app.add_option("--slots", c->slots, "Slots of the relay's ring (each holds one version)")
      ->envname("WEIGHTSYNC_RELAY_SLOTS")
      ->check(CLI::Range(2, 64));
  app.add_flag(
      "--no-pipelined", c->no_pipelined,
      "Forward whole versions only (default: stream a version's first bytes on while the rest arrives)");
  app.add_option("--secret-file", c->secret_file,
                 "Read the shared secret from this file (mode 0600, owner only); default: WEIGHTSYNC_SECRET");
  app.add_option("--secret", c->secret_on_command_line)->group("");  // refused in check()
  app.add_option("--summary-seconds", c->summary_seconds, "Print a summary line this often (0: never)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--stop-timeout-ms", c->stop_timeout_ms,
                 "On SIGTERM/SIGINT, exit 1 if closing takes longer than this")
      ->check(CLI::Range(100, 600000));
}

Status check(const DaemonConfig& c) {
  if (!c.secret_on_command_line.empty()) {
    return Status(
        ErrorCode::kInvalidArgument,
        "--secret: a secret on the command line is visible to every user (ps); set WEIGHTSYNC_SECRET "
        "in the environment (systemd: EnvironmentFile=) or use --secret-file");
  }
  if (c.upstreams.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  "no upstream: give --upstream HOST:PORT (or WEIGHTSYNC_RELAY_UPSTREAMS=a:7000,b:7000)");
  }
  for (const auto& u : c.upstreams) {
    auto hp = parse_host_port(u, "--upstream");
    if (!hp.ok()) return hp.status();
    if (hp->host.empty() || hp->port == 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "--upstream '" + u + "': expected HOST:PORT with a port 1..65535");
    }
  }
  const struct {
    const std::string* value;
    const char* flag;
  } local[] = {{&c.listen, "--listen"},
               {&c.health_address, "--health-address"},
               {&c.metrics_address, "--metrics-address"}};
  for (const auto& l : local) {
    if (l.value->empty()) continue;
    auto hp = parse_host_port(*l.value, l.flag);
    if (!hp.ok()) return hp.status();
    if (!hp->host.empty() && !bindable_host(hp->host)) {
      return Status(
          ErrorCode::kInvalidArgument,
          std::string(l.flag) + " '" + *l.value + "': the host must be a numeric IPv4 address or localhost");
    }
  }
  return Status();
}

namespace {

Result<std::string> read_secret_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status(ErrorCode::kInvalidConfig, "--secret-file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode) || st.st_size > 4096) {
    return Status(ErrorCode::kInvalidConfig,
                  "--secret-file " + path + ": not a regular file of at most 4 KiB");
  }
  if ((st.st_mode & 077) != 0) {
    return Status(
        ErrorCode::kInvalidConfig,
        "--secret-file " + path + ": readable by others; chmod 600 it (scripts/run-secret.sh makes one)");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (!in || secret.empty()) {
    return Status(ErrorCode::kInvalidConfig, "--secret-file " + path + ": empty or unreadable");
  }
  return secret;
}

}  // namespace

Result<weightsync::RelayOptions> relay_options(const DaemonConfig& c) {
  if (Status s = check(c); !s.ok()) return s;
  weightsync::RelayOptions o;
  o.upstreams = c.upstreams;
  o.pipelined = !c.no_pipelined;
  o.publisher.slots = c.slots;
  o.subscriber.client_name = "weightsync-relay";
  if (!c.listen.empty()) {
    auto hp = parse_host_port(c.listen, "--listen");
    if (!hp.ok()) return hp.status();
    if (!hp->host.empty()) o.publisher.bind_address = hp->host == "localhost" ? "127.0.0.1" : hp->host;
    o.publisher.port = hp->port;
  }
  if (!c.secret_file.empty()) {
    auto secret = read_secret_file(c.secret_file);
    if (!secret.ok()) return secret.status();
    o.subscriber.secret = *secret;
    o.publisher.secret = *secret;
  }
  return o;
}

}  // namespace wsrelay
