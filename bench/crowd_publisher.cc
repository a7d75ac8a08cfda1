// weightsync-crowd-bench, `--role publisher`: publishes a new version every
// interval until stdin closes (or max_lifetime_s passes), then prints its stats.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "crowd_common.h"
#include "weightsync/weightsync.h"

namespace crowd {

int run_publisher_role(const Config& cfg) {
  if (!cfg.publisher_log.empty() && std::freopen(cfg.publisher_log.c_str(), "a", stderr) == nullptr) {
    std::perror("publisher: cannot open the log file");
  }
  const std::size_t nofile = raise_nofile(cfg.nofile);
  using namespace weightsync;
  auto layout =
      WeightLayout::build({TensorSpec{"weights", DType::kUInt8, {static_cast<std::int64_t>(cfg.bytes)}}});
  if (!layout.ok()) {
    std::fprintf(stderr, "publisher: layout: %s\n", layout.status().to_string().c_str());
    return 2;
  }
  PublisherOptions options;
  options.bind_address = "127.0.0.1";
  options.secret = cfg.secret;
  if (cfg.profile == "crowd") {
    options.max_connections = cfg.max_connections;
  } else {  // flood: defaults but the secret and the I/O timeout
    options.io_timeout_ms = cfg.io_timeout_ms;
  }
  auto pub = Publisher::create(std::move(*layout), options);
  if (!pub.ok()) {
    std::fprintf(stderr, "publisher: create: %s\n", pub.status().to_string().c_str());
    return 2;
  }
  Publisher& p = **pub;

  std::uint64_t version = 0;
  std::uint64_t publish_errors = 0;
  auto publish_next = [&] {
    auto writer = p.begin_publish(version + 1);
    if (!writer.ok()) {
      ++publish_errors;
      std::fprintf(stderr, "publisher: begin_publish(%llu): %s\n",
                   static_cast<unsigned long long>(version + 1), writer.status().to_string().c_str());
      return;
    }
    fill_pattern(writer->data(), writer->size(), version + 1);
    auto committed = writer->commit();
    if (committed.ok()) {
      ++version;
    } else {
      ++publish_errors;
      std::fprintf(stderr, "publisher: commit: %s\n", committed.status().to_string().c_str());
    }
  };
  publish_next();
  std::printf("ADDRESS %s\n", p.address().c_str());
  std::printf("NOFILE %zu\n", nofile);
  std::fflush(stdout);

  std::atomic<bool> stop{false};
  std::thread stdin_watch([&stop] {
    char buf[256];
    while (::read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
    }
    stop.store(true);
  });
  const auto started = std::chrono::steady_clock::now();
  const auto end_of_life = started + std::chrono::seconds(cfg.max_lifetime_s);
  auto next = started + std::chrono::milliseconds(cfg.interval_ms);
  while (!stop.load() && std::chrono::steady_clock::now() < end_of_life) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next) {
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(next - now, std::chrono::milliseconds(20)));
      continue;
    }
    publish_next();
    next += std::chrono::milliseconds(cfg.interval_ms);
    if (next < std::chrono::steady_clock::now())
      next = std::chrono::steady_clock::now();  // no catch-up burst
  }
  const PublisherStats s = p.stats();
  std::printf(
      "STATS versions=%llu publish_errors=%llu leases_granted=%llu leases_revoked=%llu "
      "connections_accepted=%llu "
      "connections_active=%llu auth_failures=%llu protocol_errors=%llu bytes_served=%llu\n",
      static_cast<unsigned long long>(s.versions_published), static_cast<unsigned long long>(publish_errors),
      static_cast<unsigned long long>(s.leases_granted), static_cast<unsigned long long>(s.leases_revoked),
      static_cast<unsigned long long>(s.connections_accepted),
      static_cast<unsigned long long>(s.connections_active), static_cast<unsigned long long>(s.auth_failures),
      static_cast<unsigned long long>(s.protocol_errors), static_cast<unsigned long long>(s.bytes_served));
  std::fflush(stdout);
  if (!stop.load()) {
    std::fprintf(stderr, "publisher: max lifetime (%d s) reached; exiting\n", cfg.max_lifetime_s);
    std::fflush(stderr);
    std::_Exit(0);  // the stdin watcher is still blocked in read()
  }
  stdin_watch.join();
  return 0;
}

}  // namespace crowd
