// The fanout bench's link baselines on the test bed: iperf3 between host 0 and
// host 1 (the link's measured limit L) and our raw TCP stream of S bytes (the
// one-pull floor).
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <thread>

#include "fanout_link.h"
#include "fanout_topology.h"

namespace wsbench {

double measure_iperf3_between(TestBed& bed, double seconds, std::string* note) {
  const auto& hosts = bed.hosts();
  if (hosts.size() < 2) return *note = "needs two hosts", -1;
  char seconds_text[32];
  std::snprintf(seconds_text, sizeof(seconds_text), "%g", seconds);
  *note = "iperf3 -c " + hosts[1].address + " -t " + seconds_text + " -J, one stream, host 0 -> host 1";
  std::string last;
  // A fresh server (answering one test, -1) per attempt, until one run gives a result.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string port = std::to_string(20000 + (::getpid() % 20000) + attempt);
    try {
      RoleLink server("iperf3 server (host 1)",
                      bed.exec(1, {"iperf3", "-s", "-1", "-B", hosts[1].address, "-p", port}), {});
      std::this_thread::sleep_for(std::chrono::milliseconds(300 * (attempt + 1)));  // until it listens
      std::string output;
      const int rc =
          run_captured(bed.exec(0, {"iperf3", "-c", hosts[1].address, "-p", port, "-t", seconds_text, "-J"}),
                       seconds + 30, &output);
      const auto json = nlohmann::json::parse(output, nullptr, false);
      if (rc == 0 && !json.is_discarded() && json.contains("end") && json["end"].contains("sum_received")) {
        return json["end"]["sum_received"]["bits_per_second"].get<double>() / 8;
      }
      last = "exit " + std::to_string(rc) + ": " + output.substr(0, 400);
    } catch (const std::exception& e) {
      last = e.what();
    }
  }
  *note += ": iperf3 gave no result (apt-get install iperf3): " + last;
  return -1;
}

FanoutRow measure_stream_between(const TopologyRun& run) {
  const FanoutConfig& c = *run.config;
  TestBed& bed = *run.bed;
  FanoutRow row;
  row.size = run.size;
  row.topology = "baseline:stream";
  row.note =
      "raw TCP, one connection host 0 -> host 1, 4 MiB send()s into a pre-faulted buffer; "
      "receiver's last byte - sender's first send()";
  const double link = c.rate == "none" ? 100e6 : bytes_per_second_of_rate(c.rate);
  const std::chrono::milliseconds timeout(60000 +
                                          static_cast<long long>(4e3 * static_cast<double>(run.size) / link));
  const std::string bytes = std::to_string(run.size);
  try {
    const auto& hosts = bed.hosts();
    RoleLink receiver("stream receiver (host 1)",
                      bed.exec(1, {c.self_exe, "fanout-stream-recv", "--bind", hosts[1].address + ":0"}), {});
    const std::string peer = receiver.expect("READY ", std::chrono::seconds(60));
    RoleLink sender("stream sender (host 0)", bed.exec(0, {c.self_exe, "fanout-stream-send", "--peer", peer}),
                    {});
    sender.expect("READY", std::chrono::seconds(60));
    for (int r = 0; r <= c.runs; ++r) {  // r = 0: the warm-up
      receiver.send("RECV " + bytes);
      sender.send("SEND " + bytes);
      const std::int64_t start = std::stoll(sender.expect("SENT ", timeout));
      const std::int64_t end = std::stoll(receiver.expect("RECEIVED ", timeout));
      const double seconds = static_cast<double>(end - start) * 1e-9;
      std::printf("  stream %s #%d: %.3f s%s\n", run.size_label.c_str(), r, seconds,
                  r == 0 ? " [warm-up]" : "");
      std::fflush(stdout);
      if (r > 0) row.times_s.push_back(seconds);
    }
  } catch (const std::exception& e) {
    row.error = e.what();
    std::fprintf(stderr, "fanout: stream %s: %s\n", run.size_label.c_str(), e.what());
  }
  fanout_summarize(&row);
  return row;
}

}  // namespace wsbench
