// weightsync-crowd-bench, scenario `crowd`: the pullers' throughput and the
// publisher's threads and memory, alone and with many idle sessions open.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "crowd_common.h"
#include "weightsync/weightsync.h"

namespace crowd {

namespace {

using weightsync::Destination;
using weightsync::PullOptions;
using weightsync::Subscriber;
using weightsync::SubscriberOptions;

SubscriberOptions subscriber_options(const Config& cfg, const std::string& transport,
                                     int connect_timeout_ms) {
  SubscriberOptions o;
  o.secret = cfg.secret;
  o.transport = transport;
  o.connect_timeout_ms = connect_timeout_ms;
  o.io_timeout_ms = 20000;
  o.client_name = "crowd-bench";
  return o;
}

struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t n) : size(n) {
    data = static_cast<std::uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    if (data != nullptr) std::memset(data, 0, n);  // fault the pages in before timing
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

// Each puller's share of a run.
struct PullerOut {
  std::uint64_t bytes = 0, pulls = 0, retries = 0, failures = 0, bad = 0;
  std::vector<double> pull_s;
  double end = 0;
  std::string error;
  std::string transport;
};

// One run: `cfg.pullers` threads connect, wait for the start, then pull the
// newest version back to back for cfg.duration_s.
PhaseRun run_pullers(const Config& cfg, const PublisherProcess& pub, const std::string& transport) {
  const int n = cfg.pullers;
  std::vector<PullerOut> out(static_cast<std::size_t>(n));
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  bool go = false;
  double start = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      PullerOut& o = out[static_cast<std::size_t>(i)];
      std::unique_ptr<Subscriber> sub;
      for (int attempt = 0; attempt < 3 && !sub; ++attempt) {  // bounded: 3 tries of 10 s
        auto s = Subscriber::connect(pub.address, subscriber_options(cfg, transport, 10000));
        if (s.ok()) {
          sub = std::move(*s);
        } else {
          ++o.failures;
          if (o.error.empty()) o.error = "connect: " + s.status().to_string();
        }
      }
      std::unique_ptr<AlignedBuffer> buf;
      if (sub) o.transport = sub->transport();
      if (sub) buf = std::make_unique<AlignedBuffer>(sub->layout().total_bytes());
      {
        std::unique_lock<std::mutex> lock(mu);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return go; });
      }
      if (!sub || buf->data == nullptr) {
        o.end = start;
        return;
      }
      const Destination dst = Destination::contiguous(buf->data, buf->size);
      const double deadline = start + cfg.duration_s;
      PullOptions po;
      po.newer_than = 0;  // the newest version every time, even if already held: back-to-back pulls
      po.wait = std::chrono::milliseconds(2000);
      for (int guard = 0; guard < 1000000 && now_seconds() < deadline; ++guard) {
        const double t0 = now_seconds();
        auto r = sub->pull(dst, po);
        const double t1 = now_seconds();
        if (!r.ok()) {
          ++o.failures;
          if (o.error.empty()) o.error = "pull: " + r.status().to_string();
          if (!sub->status().ok()) break;  // sticky: this subscriber is done
          continue;
        }
        ++o.pulls;
        o.bytes += r->bytes;
        o.retries += r->retries;
        o.pull_s.push_back(t1 - t0);
        if (check_pattern(buf->data, buf->size, r->version, 4096 / 8) != 0) ++o.bad;  // one word per page
      }
      o.end = now_seconds();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(120), [&] { return ready == n; });
    start = now_seconds();
    go = true;
    cv.notify_all();
  }
  PhaseRun run;
  // Sample the publisher while the pullers run (bounded by the duration plus slack).
  const double sample_until = start + cfg.duration_s + 60;
  while (now_seconds() < sample_until) {
    const ProcSample s = sample_process(pub.pid());
    run.peak.threads = std::max(run.peak.threads, s.threads);
    run.peak.rss_kib = std::max(run.peak.rss_kib, s.rss_kib);
    if (now_seconds() > start + cfg.duration_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  for (auto& t : threads) t.join();
  double end = start;
  std::vector<double> all;
  for (const auto& o : out) {
    run.bytes += o.bytes;
    run.pulls += o.pulls;
    run.retries += o.retries;
    run.failures += o.failures;
    run.bad_content += o.bad;
    end = std::max(end, o.end);
    all.insert(all.end(), o.pull_s.begin(), o.pull_s.end());
    if (run.first_error.empty()) run.first_error = o.error;
    if (!o.transport.empty() && run.negotiated.find(o.transport) == std::string::npos) {
      run.negotiated += (run.negotiated.empty() ? "" : ",") + o.transport;
    }
  }
  run.seconds = end - start;
  run.gbps = run.seconds > 0 ? static_cast<double>(run.bytes) / run.seconds / 1e9 : 0;
  run.median_pull_s = median(all);
  return run;
}

void print_run(const char* what, int index, const PhaseRun& r) {
  std::fprintf(
      stderr,
      "crowd: %s run %d: %.3f GB/s over %.2f s, %llu pulls, median pull %.3f s, retries %llu, failures "
      "%llu, bad content %llu, transport %s, publisher peak threads %ld rss %ld MiB%s%s\n",
      what, index, r.gbps, r.seconds, static_cast<unsigned long long>(r.pulls), r.median_pull_s,
      static_cast<unsigned long long>(r.retries), static_cast<unsigned long long>(r.failures),
      static_cast<unsigned long long>(r.bad_content), r.negotiated.c_str(), r.peak.threads,
      r.peak.rss_kib / 1024, r.first_error.empty() ? "" : "; first error: ", r.first_error.c_str());
}

}  // namespace

CrowdResult run_crowd(const Config& cfg, const std::string& self, const std::string& transport) {
  CrowdResult res;
  res.transport = transport;
  const std::string log = cfg.log_dir + "/crowd-bench-publisher-crowd-" + transport + ".log";
  PublisherProcess pub = start_publisher(cfg, self, "crowd", log);
  std::fprintf(stderr, "crowd[%s]: publisher pid %d at %s (log %s)\n", transport.c_str(), pub.pid(),
               pub.address.c_str(), log.c_str());
  for (int i = 0; i < cfg.runs; ++i) {
    res.alone.push_back(run_pullers(cfg, pub, transport));
    print_run("pullers alone", i + 1, res.alone.back());
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  res.before_idle = sample_process(pub.pid());

  // The idle sessions: authenticated tcp subscribers that never pull, opened by 4 threads.
  std::vector<std::unique_ptr<Subscriber>> idle(static_cast<std::size_t>(cfg.idle_sessions));
  std::atomic<int> next{0}, failed{0};
  std::mutex err_mu;
  const double open_start = now_seconds();
  const double open_deadline = open_start + 300;
  {
    std::vector<std::thread> openers;
    for (int t = 0; t < 4; ++t) {
      openers.emplace_back([&] {
        for (int i = next.fetch_add(1); i < cfg.idle_sessions && now_seconds() < open_deadline;
             i = next.fetch_add(1)) {
          auto s = Subscriber::connect(pub.address, subscriber_options(cfg, "tcp", 10000));
          if (s.ok()) {
            idle[static_cast<std::size_t>(i)] = std::move(*s);
          } else {
            failed.fetch_add(1);
            std::lock_guard<std::mutex> lock(err_mu);
            if (res.idle_first_error.empty()) res.idle_first_error = s.status().to_string();
          }
        }
      });
    }
    for (auto& t : openers) t.join();
  }
  res.idle_open_seconds = now_seconds() - open_start;
  for (const auto& s : idle) res.idle_opened += s ? 1 : 0;
  res.idle_failed = failed.load();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  res.idle = sample_process(pub.pid());
  std::fprintf(
      stderr,
      "crowd[%s]: %d idle sessions open (%d failed%s%s) in %.1f s; publisher threads %ld -> %ld, rss %ld -> "
      "%ld MiB\n",
      transport.c_str(), res.idle_opened, res.idle_failed, res.idle_first_error.empty() ? "" : ": ",
      res.idle_first_error.c_str(), res.idle_open_seconds, res.before_idle.threads, res.idle.threads,
      res.before_idle.rss_kib / 1024, res.idle.rss_kib / 1024);

  for (int i = 0; i < cfg.runs; ++i) {
    res.with_idle.push_back(run_pullers(cfg, pub, transport));
    print_run("pullers + idle sessions", i + 1, res.with_idle.back());
  }
  for (auto& s : idle) {
    if (s && s->latest_version().ok()) ++res.idle_alive_at_end;
  }
  idle.clear();
  res.publisher_stats = pub.stop();
  return res;
}

}  // namespace crowd
