// relay_daemon.cc: the daemon's loop (relay_daemon.h).
#include "relay_daemon.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "daemon_log.h"
#include "health_board.h"
#include "health_server.h"
#include "systemd_notify.h"
#include "weightsync/metrics.h"

namespace wsrelay {

namespace {

using Clock = std::chrono::steady_clock;
using weightsync::ErrorCode;

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string advice(const weightsync::Status& s) {
  if (s.code() == ErrorCode::kAuthFailed)
    return "check that WEIGHTSYNC_SECRET (or --secret-file) matches the trainer's";
  if (s.code() == ErrorCode::kInvalidConfig)
    return "check the upstream's layout and the WEIGHTSYNC_* settings";
  return "check that the trainer (or upstream relay) runs and that the addresses are right";
}

class Daemon {
 public:
  Daemon(const DaemonConfig& config, const weightsync::RelayOptions& options)
      : config_(config), options_(options), board_(std::chrono::seconds(5)) {}

  int run(StopSignals& signals) {
    if (!start_endpoints()) return 2;
    say("connecting to " + upstream_list() + " (tried in order; failover to the next)");
    auto next_try = Clock::now();
    auto backoff = std::chrono::milliseconds(500);
    last_summary_ = Clock::now();
    for (;;) {
      if (!relay_ && Clock::now() >= next_try) {
        if (!connect(backoff)) {
          next_try = Clock::now() + backoff;
          backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
        }
      }
      if (relay_) watch();
      post_health();
      notifier_.tick(live_);
      if (const int sig = signals.wait(std::chrono::milliseconds(100)); sig != 0) return stop(sig);
    }
  }

 private:
  std::string upstream_list() const {
    std::string out;
    for (const auto& u : options_.upstreams) out += (out.empty() ? "" : ", ") + u;
    return out;
  }

  bool start_endpoints() {
    if (!config_.metrics_address.empty()) {
      weightsync::MetricsOptions m;
      m.address = config_.metrics_address;
      auto started = weightsync::MetricsEndpoint::start(m);
      if (!started.ok()) {
        complain("--metrics-address: " + started.status().to_string());
        return false;
      }
      metrics_ = std::move(*started);
      say("metrics on http://" + metrics_->address() + "/metrics");
    }
    if (!config_.health_address.empty()) {
      auto started = HealthServer::start(config_.health_address, [this] { return board_.report(); });
      if (!started.ok()) {
        complain(started.status().to_string());
        return false;
      }
      health_ = std::move(*started);
      say("health on http://" + health_->address() + " (/livez, /readyz)");
    }
    return true;
  }

  // One try over every upstream; on failure one line says why, what to
  // check, and when the next try comes.
  bool connect(std::chrono::milliseconds retry_in) {
    auto relay = weightsync::Relay::create(options_);
    if (!relay.ok()) {
      connect_error_ = relay.status().to_string();
      say("no upstream reachable: " + connect_error_ + " (" + advice(relay.status()) + "); retrying in " +
          std::to_string(retry_in.count()) + " ms");
      return false;
    }
    relay_ = std::move(*relay);
    const auto stats = relay_->stats();
    upstream_ = stats.upstream;
    say("connected to upstream " + upstream_ + "; serving on " + relay_->address() +
        " (tcp; shm for subscribers on this host)");
    if (metrics_) metrics_id_ = metrics_->add_relay(*relay_, "relay");
    notifier_.status("connected to " + upstream_ + ", waiting for the first version");
    return true;
  }

  void watch() {
    const weightsync::RelayStats s = relay_->stats();
    if (s.latest_version > logged_version_) {
      say("forwarded version " + std::to_string(s.latest_version) + " from " +
          (s.upstream.empty() ? upstream_ : s.upstream) + " (" + mib(s.bytes_received - logged_bytes_) +
          " received, lag " + std::to_string(s.forward_lag_seconds) + " s)");
      logged_version_ = s.latest_version;
      logged_bytes_ = s.bytes_received;
      if (!notified_ready_) {
        notifier_.ready("serving version " + std::to_string(s.latest_version) + " on " + relay_->address());
        notified_ready_ = true;
      }
    }
    if (s.upstream_connected && !s.upstream.empty() && s.upstream != upstream_) {
      say("failed over to upstream " + s.upstream + " (failover " + std::to_string(s.failovers) + ")");
      upstream_ = s.upstream;
    }
    if (s.upstream_connected != upstream_connected_) {
      upstream_connected_ = s.upstream_connected;
      if (!upstream_connected_) {
        say("upstream lost: " + s.upstream_error + "; still serving version " +
            std::to_string(s.latest_version) + " and retrying " + upstream_list());
      }
    }
    if (!s.running && !reported_fatal_) {
      complain("forwarding stopped for good: " + s.error +
               " (leaves are told kConnectionLost; restart the daemon)");
      reported_fatal_ = true;
    }
    if (config_.summary_seconds > 0 &&
        Clock::now() - last_summary_ >= std::chrono::duration<double>(config_.summary_seconds)) {
      last_summary_ = Clock::now();
      say("summary: version " + std::to_string(s.latest_version) + ", " +
          std::to_string(s.versions_forwarded) + " forwarded (" + mib(s.bytes_received) + "), " +
          std::to_string(s.failovers) + " failovers, " + std::to_string(s.publisher.connections_active) +
          " subscribers connected, " + std::to_string(s.publisher.leases_active) + " leases, upstream " +
          (s.upstream_connected ? s.upstream : "lost"));
    }
    stats_ = s;
  }

  void post_health() {
    HealthReport r;
    if (!relay_) {
      live_ = true;
      r.live = {true, "alive; connecting"};
      r.ready = {false, "no upstream reachable yet (" + upstream_list() + ")" +
                            (connect_error_.empty() ? "" : ": " + connect_error_)};
    } else {
      const auto& s = stats_;
      live_ = s.running;
      r.live = s.running ? Probe{true, "alive; forwarding"} : Probe{false, "forwarding stopped: " + s.error};
      const std::string upstream = s.upstream_connected
                                       ? "upstream " + s.upstream
                                       : "upstream lost (" + s.upstream_error + "), retrying";
      if (!s.running) {
        r.ready = {false, "forwarding stopped: " + s.error};
      } else if (!s.publisher.serving) {
        r.ready = {false, "not serving: the relay's publisher stopped"};
      } else if (s.latest_version == 0) {
        r.ready = {false, "waiting for the first version; " + upstream};
      } else {
        r.ready = {true, "serving version " + std::to_string(s.latest_version) + " on " + relay_->address() +
                             "; " + upstream};
      }
    }
    board_.post(std::move(r));
  }

  int stop(int sig) {
    const std::string why = std::string("stopping on ") + signal_name(sig);
    say(why + (relay_ ? "; closing " + std::to_string(stats_.publisher.connections_active) +
                            " subscriber connections"
                      : std::string()));
    notifier_.stopping(why);
    const int limit_ms = config_.stop_timeout_ms;
    std::thread([limit_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(limit_ms));
      complain("stop took longer than " + std::to_string(limit_ms) + " ms; exiting anyway");
      ::_exit(1);
    }).detach();
    const auto start = Clock::now();
    // Not ready from now on; the relay goes first (its subscribers learn at
    // once), then both HTTP servers stop side by side.
    board_.post({{true, "stopping"}, {false, why}});
    if (metrics_ && metrics_id_ != 0) metrics_->remove(metrics_id_);
    relay_.reset();
    std::thread metrics_stop([this] { metrics_.reset(); });
    health_.reset();
    metrics_stop.join();
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.2f",
                  std::chrono::duration<double>(Clock::now() - start).count());
    say("stopped after " + std::to_string(stats_.versions_forwarded) + " versions (latest " +
        std::to_string(stats_.latest_version) + ") in " + seconds + " s");
    return 0;
  }

  const DaemonConfig& config_;
  const weightsync::RelayOptions& options_;
  HealthBoard board_;
  SystemdNotifier notifier_;
  std::unique_ptr<HealthServer> health_;
  std::unique_ptr<weightsync::MetricsEndpoint> metrics_;
  weightsync::MetricsSourceId metrics_id_ = 0;
  std::unique_ptr<weightsync::Relay> relay_;
  weightsync::RelayStats stats_;
  std::string upstream_;
  std::string connect_error_;
  std::uint64_t logged_version_ = 0;
  std::uint64_t logged_bytes_ = 0;
  bool upstream_connected_ = true;
  bool notified_ready_ = false;
  bool reported_fatal_ = false;
  bool live_ = true;
  Clock::time_point last_summary_;
};

}  // namespace

int run_daemon(const DaemonConfig& config, const weightsync::RelayOptions& options, StopSignals& signals) {
  Daemon daemon(config, options);
  return daemon.run(signals);
}

}  // namespace wsrelay
