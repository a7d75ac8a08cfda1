// Hidden measurement ([.][lora-latency]; docs/perf/formats-lora.md): the
// latency of a 16 MiB adapter version from publish() to installed in the
// subscriber's memory, over shm and tcp on this host, beside the memcpy of
// 16 MiB measured in the same run. Run:
//   build/tests/ws_integration_tests "[lora-latency]"
// WS_LORA_VERSIONS (default 200) versions per transport; WS_LORA_MIB (16).
// Prints one line per figure and a JSON line ("lora-latency {...}").
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "peers.h"
#include "weightsync/adapter_publisher.h"

using namespace weightsync;
using namespace wstest;

namespace {

using Clock = std::chrono::steady_clock;

struct Summary {
  double median_ms = 0, p99_ms = 0, min_ms = 0, max_ms = 0;
};

Summary summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Summary s;
  s.median_ms = ms[ms.size() / 2];
  s.p99_ms = ms[std::min(ms.size() - 1, (ms.size() * 99) / 100)];
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  return s;
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The memcpy of `bytes`, `runs` times: between the same two buffers (warm:
// partly in the last-level cache), or rotating over `buffers` sources and
// destinations (cold, as the slot ring's memory is: 3 slots of 16 MiB).
Summary memcpy_baseline(std::size_t bytes, int runs, int buffers) {
  std::vector<std::vector<char>> src(buffers, std::vector<char>(bytes, 1)), dst(buffers, std::vector<char>(bytes, 0));
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto& s = src[i % buffers];
    auto& d = dst[(i / buffers + i) % buffers];
    s[static_cast<std::size_t>(i) % bytes] = static_cast<char>(i);
    const auto t0 = Clock::now();
    std::memcpy(d.data(), s.data(), bytes);
    ms.push_back(ms_between(t0, Clock::now()));
  }
  return summarize(ms);
}

struct Timeline {
  Summary publish_to_installed;  // publish started -> pull() returned with the version in place
  Summary commit_to_installed;   // commit() called (the bytes already in the slot: an in-place publish) -> the same
  Summary publish_call;          // begin_publish() + the copy + commit(): what publish() does
  Summary pull_transfer;         // PullResult::seconds: ACQUIRE, the copy, the stamp check (no waiting)
  Summary slot_copy;             // begin_publish() and the copy into the slot, before the commit
};

// One adapter of `bytes`; the trainer publishes a version, the engine thread
// waits for it (pull with a wait) straight into its adapter buffer; the next
// version follows once it is installed, so each is timed alone.
Timeline measure(const std::string& transport, std::size_t bytes, int versions) {
  AdapterPublisherOptions options;
  auto made = AdapterPublisher::create(options);
  REQUIRE(made.ok());
  std::vector<TensorSpec> specs = {{"lora_A", DType::kBFloat16, {static_cast<std::int64_t>(bytes / 4)}},
                                   {"lora_B", DType::kBFloat16, {static_cast<std::int64_t>(bytes / 4)}}};
  auto layout = WeightLayout::build(specs);
  REQUIRE(layout.ok());
  auto adapter = (*made)->add_adapter("math-v2", *layout);
  REQUIRE(adapter.ok());
  Publisher& pub = **adapter;
  SubscriberOptions sopts = quick_options(10000, transport);
  sopts.adapter = "math-v2";
  auto sub = Subscriber::connect((*made)->address(), sopts);
  REQUIRE(sub.ok());
  REQUIRE((*sub)->transport() == transport);

  auto installed = HostBuffer::allocate(layout->total_bytes());
  REQUIRE(installed.ok());
  std::memset(installed->data(), 0, installed->size());
  const auto dest = Destination::contiguous(installed->data(), installed->size());
  std::vector<char> source(layout->total_bytes());
  const std::size_t half = layout->tensors()[1].offset;

  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t done_version = 0;
  double done_transfer_ms = 0;
  Clock::time_point done_at;
  std::atomic<bool> failed{false};
  std::thread engine([&] {
    PullOptions wait;
    wait.wait = std::chrono::milliseconds(5000);
    for (int v = 1; v <= versions + 2 * static_cast<int>(pub.slot_count()); ++v) {
      auto pulled = (*sub)->pull(dest, wait);
      const auto at = Clock::now();
      if (!pulled.ok()) {
        failed = true;
        std::fprintf(stderr, "pull failed: %s\n", pulled.status().to_string().c_str());
      }
      std::lock_guard<std::mutex> lock(mu);
      done_version = pulled.ok() ? pulled->version : 0;
      done_transfer_ms = pulled.ok() ? pulled->seconds * 1e3 : 0;
      done_at = at;
      cv.notify_all();
      if (!pulled.ok()) return;
    }
  });

  // The first 2 x slots versions warm up: each slot's pages are faulted in
  // once on each side (the trainer's writes, the subscriber's mapping).
  const int warmup = 2 * static_cast<int>(pub.slot_count());
  std::vector<double> to_installed, from_commit, publish_call, transfer, slot_copy;
  for (int v = 1; v <= versions + warmup; ++v) {
    source[0] = static_cast<char>(v);
    source[half] = static_cast<char>(v + 1);
    // publish() in its three steps, to see where the time goes: a free slot,
    // the copy into it, the commit (which wakes the server).
    const auto t0 = Clock::now();
    auto writer = pub.begin_publish(static_cast<std::uint64_t>(v));
    REQUIRE(writer.ok());
    std::memcpy(writer->data(), source.data(), source.size());
    const auto t_copied = Clock::now();
    REQUIRE(writer->commit().ok());
    const auto t1 = Clock::now();
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10),
                        [&] { return done_version >= static_cast<std::uint64_t>(v) || failed; }));
    REQUIRE_FALSE(failed.load());
    REQUIRE(done_version == static_cast<std::uint64_t>(v));
    if (v > warmup) {
      to_installed.push_back(ms_between(t0, done_at));
      from_commit.push_back(ms_between(t_copied, done_at));
      publish_call.push_back(ms_between(t0, t1));
      slot_copy.push_back(ms_between(t0, t_copied));
      transfer.push_back(done_transfer_ms);
    }
    CHECK(static_cast<char*>(installed->data())[0] == static_cast<char>(v));
    CHECK(static_cast<char*>(installed->data())[half] == static_cast<char>(v + 1));
  }
  engine.join();
  return Timeline{summarize(to_installed), summarize(from_commit), summarize(publish_call), summarize(transfer), summarize(slot_copy)};
}

std::string json(const Summary& s) {
  std::ostringstream o;
  o << "{\"median_ms\":" << s.median_ms << ",\"p99_ms\":" << s.p99_ms << ",\"min_ms\":" << s.min_ms
    << ",\"max_ms\":" << s.max_ms << "}";
  return o.str();
}

}  // namespace

TEST_CASE("adapters: latency of a 16 MiB adapter version from publish() to installed, shm and tcp",
          "[.][lora-latency]") {
  const std::size_t bytes = env_or("WS_LORA_MIB", 16) << 20;
  const int versions = static_cast<int>(env_or("WS_LORA_VERSIONS", 200));
  const Summary copy = memcpy_baseline(bytes, versions, 1);
  const Summary cold = memcpy_baseline(bytes, versions, 4);
  std::ostringstream out;
  out << "lora-latency {\"bytes\":" << bytes << ",\"versions\":" << versions << ",\"memcpy\":" << json(copy)
      << ",\"memcpy_cold\":" << json(cold);
  std::printf("memcpy %zu MiB: warm median %.3f ms, p99 %.3f ms; cold median %.3f ms, p99 %.3f ms (%d runs)\n",
              bytes >> 20, copy.median_ms, copy.p99_ms, cold.median_ms, cold.p99_ms, versions);
  for (const std::string transport : {"shm", "tcp"}) {
    const Timeline t = measure(transport, bytes, versions);
    std::printf(
        "%s: publish->installed median %.3f ms p99 %.3f ms (min %.3f max %.3f); commit->installed median "
        "%.3f ms p99 %.3f ms; publish() median %.3f ms (copy into the slot %.3f ms); pull transfer median %.3f ms\n",
        transport.c_str(), t.publish_to_installed.median_ms, t.publish_to_installed.p99_ms,
        t.publish_to_installed.min_ms, t.publish_to_installed.max_ms, t.commit_to_installed.median_ms,
        t.commit_to_installed.p99_ms, t.publish_call.median_ms, t.slot_copy.median_ms, t.pull_transfer.median_ms);
    out << ",\"" << transport << "\":{\"publish_to_installed\":" << json(t.publish_to_installed)
        << ",\"commit_to_installed\":" << json(t.commit_to_installed)
        << ",\"publish_call\":" << json(t.publish_call) << ",\"pull_transfer\":" << json(t.pull_transfer)
        << ",\"slot_copy\":" << json(t.slot_copy)
        << "}";
  }
  out << "}";
  std::printf("%s\n", out.str().c_str());
}
