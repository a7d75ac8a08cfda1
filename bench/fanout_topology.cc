// One (size, topology) row of the fanout bench: the publisher in host 0, a
// subscriber or relay in each of hosts 1..N wired per the topology, one
// warm-up version, then --runs measured versions through the same processes.
#include "fanout_topology.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "fanout_link.h"

namespace wsbench {
namespace {

using std::chrono::milliseconds;

// Busy and total jiffies of the whole machine (/proc/stat's first line).
bool machine_jiffies(double* busy, double* total) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)) return false;
  *busy = user + nice + system + irq + softirq + steal;
  *total = *busy + idle + iowait;
  return true;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int fanout_parent(const std::string& topology, int host) {
  if (host <= 0) return -1;
  if (topology == "flat") return 0;
  if (topology == "chain") return host - 1;
  if (topology.rfind("tree", 0) == 0 && topology.size() > 4) {
    const std::string k_text = topology.substr(4);
    if (k_text.find_first_not_of("0123456789") != std::string::npos || k_text.size() > 3) return -1;
    const int k = std::stoi(k_text);
    return k >= 1 ? (host - 1) / k : -1;
  }
  return -1;
}

bool fanout_topology_valid(const std::string& topology) {
  return fanout_parent(topology, 1) == 0;
}

double bytes_per_second_of_rate(const std::string& rate) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(rate, &used);
  } catch (...) {
    return -1;
  }
  std::string unit = rate.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const struct {
    const char* name;
    double bytes;
  } units[] = {{"bit", 1 / 8.0}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8}, {"tbit", 1e12 / 8},
               {"bps", 1},       {"kbps", 1e3},     {"mbps", 1e6},     {"gbps", 1e9},     {"", 1 / 8.0}};
  for (const auto& u : units) {
    if (unit == u.name) return value * u.bytes;
  }
  return -1;
}

FanoutRow run_topology(const TopologyRun& run) {
  const FanoutConfig& c = *run.config;
  TestBed& bed = *run.bed;
  FanoutRow row;
  row.size = run.size;
  row.topology = run.topology;
  const int hosts = c.subscribers + 1;
  std::vector<bool> is_relay(hosts, false);
  for (int i = 1; i < hosts; ++i) {
    const int parent = fanout_parent(run.topology, i);
    if (parent > 0) is_relay[parent] = true;
  }
  std::string why;
  if (std::find(is_relay.begin(), is_relay.end(), true) != is_relay.end() && !fanout_relays_built(&why)) {
    row.error = why;
    return row;
  }
  const std::string size_text = std::to_string(run.size);
  const std::vector<std::string> env = {"WEIGHTSYNC_SECRET=" + run.secret, "WEIGHTSYNC_LOG_LEVEL=error"};
  // Per version: a minute, plus four times the slowest plausible delivery
  // (every subscriber's bytes through one capped link).
  const double link = c.rate == "none" ? 100e6 : bytes_per_second_of_rate(c.rate);
  const milliseconds version_timeout(
      60000 + static_cast<long long>(4e3 * c.subscribers * static_cast<double>(run.size) / link));
  const milliseconds start_timeout(60000);
  std::vector<std::unique_ptr<RoleLink>> roles(hosts);
  try {
    std::vector<std::string> address(hosts);
    const auto& host_list = bed.hosts();
    roles[0] = std::make_unique<RoleLink>(
        "publisher (host 0)",
        bed.exec(0, {c.self_exe, "fanout-publisher", "--bind", host_list[0].address, "--size", size_text}),
        env);
    address[0] = roles[0]->expect("READY ", start_timeout);
    // Parents before children: a parent's index is always lower.
    for (int i = 1; i < hosts; ++i) {
      const std::string& upstream = address[fanout_parent(run.topology, i)];
      if (is_relay[i]) {
        roles[i] = std::make_unique<RoleLink>(
            "relay (host " + std::to_string(i) + ")",
            bed.exec(i, {c.self_exe, "fanout-relay", "--upstream", upstream, "--bind", host_list[i].address,
                         "--transport", c.transport, "--chunk", std::to_string(c.relay_chunk)}),
            env);
        address[i] = roles[i]->expect("READY ", start_timeout);
      } else {
        roles[i] =
            std::make_unique<RoleLink>("subscriber (host " + std::to_string(i) + ")",
                                       bed.exec(i, {c.self_exe, "fanout-subscriber", "--upstream", upstream,
                                                    "--size", size_text, "--transport", c.transport}),
                                       env);
        const std::string transport = roles[i]->expect("READY ", start_timeout);
        if (transport != c.transport)
          throw FanoutError("host " + std::to_string(i) + " pulls over " + transport);
      }
    }
    std::vector<double> cpu_before(hosts, 0);
    double busy_before = 0, total_before = 0;
    std::int64_t window_start = 0;
    for (int v = 1; v <= c.runs + 1; ++v) {  // version 1: the warm-up
      if (v == 2) {
        for (int i = 0; i < hosts; ++i) cpu_before[i] = roles[i]->cpu_seconds();
        (void)machine_jiffies(&busy_before, &total_before);
        window_start = now_ns();
      }
      const std::string vs = std::to_string(v);
      for (int i = 1; i < hosts; ++i)
        roles[i]->send("PULL " + vs + " " + std::to_string(version_timeout.count()));
      for (int i = 1; i < hosts; ++i) roles[i]->expect("WAITING " + vs, start_timeout);
      roles[0]->send("PUBLISH " + vs);
      std::istringstream committed(roles[0]->expect("COMMITTED " + vs + " ", start_timeout));
      FanoutVersion version;
      version.version = static_cast<std::uint64_t>(v);
      committed >> version.commit_ns;
      const auto deadline = std::chrono::steady_clock::now() + version_timeout + std::chrono::seconds(10);
      for (int i = 1; i < hosts; ++i) {
        const auto left =
            std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
        std::istringstream held(roles[i]->expect("HELD " + vs + " ", std::max(left, milliseconds(1))));
        std::int64_t ns = 0;
        held >> ns;
        version.held_ns.push_back(ns);
      }
      std::printf("  %s %s v%d: time-to-all %.3f s (min %.3f, median %.3f)%s\n", run.topology.c_str(),
                  run.size_label.c_str(), v, version.time_to_all_s(), version.min_s(), version.median_s(),
                  v == 1 ? " [warm-up]" : "");
      std::fflush(stdout);
      if (v >= 2) row.versions.push_back(version);
    }
    row.wall_s = static_cast<double>(now_ns() - window_start) * 1e-9;
    double busy_after = 0, total_after = 0;
    if (machine_jiffies(&busy_after, &total_after) && total_after > total_before) {
      row.machine_busy = (busy_after - busy_before) / (total_after - total_before);
    }
    for (int i = 0; i < hosts; ++i) {
      ProcessCpu cpu;
      cpu.host = i;
      cpu.role = i == 0 ? "publisher" : is_relay[i] ? "relay" : "subscriber";
      cpu.cpu_s = roles[i]->cpu_seconds() - cpu_before[i];
      row.cpu.push_back(cpu);
    }
  } catch (const std::exception& e) {
    row.error = e.what();
    std::fprintf(stderr, "fanout: %s %s: %s\n", run.topology.c_str(), run.size_label.c_str(), e.what());
  }
  // Children first (they hold connections to their parents), then the publisher.
  for (int i = hosts - 1; i >= 0; --i) roles[i].reset();
  fanout_summarize(&row);
  return row;
}

}  // namespace wsbench
