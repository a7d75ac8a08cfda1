// weightsync-crowd-bench, scenario `flood`: an attacker holds many TCP
// connections that never authenticate (a third silent, a third with 7 bytes of
// a frame header, a third with a whole HELLO and then nothing), reopening each
// as soon as the publisher closes it, while a good subscriber tries to connect
// and pull one version bit-exact.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "crowd_common.h"
#include "weightsync/weightsync.h"
#include "wire/frame.h"
#include "wire/messages.h"

namespace crowd {

namespace {

enum class Kind { kSilent = 0, kHalfHeader = 1, kHello = 2 };

struct AttackSlot {
  int fd = -1;
  Kind kind = Kind::kSilent;
  bool connecting = false;
};

class Attacker {
 public:
  Attacker(const std::string& address, int count) : slots_(static_cast<std::size_t>(count)) {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) throw std::runtime_error("bad publisher address " + address);
    target_.sin_family = AF_INET;
    target_.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
    if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &target_.sin_addr) != 1) {
      throw std::runtime_error("bad publisher host " + address);
    }
    for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].kind = static_cast<Kind>(i % 3);
    using namespace weightsync::detail;
    HelloMsg hello;
    hello.role = Role::kControl;
    hello.client_name = "crowd-bench-attacker";
    const std::vector<std::uint8_t> payload = hello.encode();
    hello_.resize(kFrameHeaderBytes);
    encode_header(MsgType::kHello, static_cast<std::uint32_t>(payload.size()), hello_.data());
    hello_.insert(hello_.end(), payload.begin(), payload.end());
  }
  ~Attacker() {
    stop();
    for (auto& s : slots_) close_slot(s);
  }

  void start(double max_seconds) {
    deadline_ = now_seconds() + max_seconds;
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  std::atomic<std::uint64_t> opened{0};          // connections established
  std::atomic<std::uint64_t> closed_by_peer{0};  // EOF/HUP/RDHUP/error seen on an open one
  std::atomic<std::uint64_t> connect_errors{0};  // socket()/connect() failed
  std::atomic<int> open_now{0};

 private:
  void close_slot(AttackSlot& s) {
    if (s.fd >= 0) {
      if (!s.connecting) open_now.fetch_sub(1);
      ::close(s.fd);
    }
    s.fd = -1;
    s.connecting = false;
  }

  void on_connected(AttackSlot& s) {
    s.connecting = false;
    opened.fetch_add(1);
    open_now.fetch_add(1);
    if (s.kind == Kind::kHalfHeader) {
      (void)!::send(s.fd, hello_.data(), 7, MSG_NOSIGNAL | MSG_DONTWAIT);
    } else if (s.kind == Kind::kHello) {
      (void)!::send(s.fd, hello_.data(), hello_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }

  void open_slot(AttackSlot& s) {
    s.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s.fd < 0) {
      connect_errors.fetch_add(1);
      return;
    }
    if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&target_), sizeof(target_)) == 0) {
      on_connected(s);
    } else if (errno == EINPROGRESS) {
      s.connecting = true;
    } else {
      connect_errors.fetch_add(1);
      ::close(s.fd);
      s.fd = -1;
    }
  }

  void run() {
    std::vector<pollfd> pfds(slots_.size());
    char sink[4096];
    // Bounded by the deadline; each turn waits at most 50 ms in poll().
    while (!stop_.load() && now_seconds() < deadline_) {
      for (auto& s : slots_) {
        if (s.fd < 0) open_slot(s);
      }
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        pfds[i].fd = slots_[i].fd;
        pfds[i].events = slots_[i].connecting ? POLLOUT : (POLLIN | POLLRDHUP);
        pfds[i].revents = 0;
      }
      const int rc = ::poll(pfds.data(), pfds.size(), 50);
      if (rc <= 0) {
        if (rc < 0 && errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        AttackSlot& s = slots_[i];
        const short ev = pfds[i].revents;
        if (s.fd < 0 || ev == 0) continue;
        if (s.connecting) {
          int err = 0;
          socklen_t len = sizeof(err);
          if ((ev & (POLLERR | POLLHUP)) != 0 || ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
              err != 0) {
            connect_errors.fetch_add(1);
            ::close(s.fd);
            s.fd = -1;
            s.connecting = false;
          } else if ((ev & POLLOUT) != 0) {
            on_connected(s);
          }
          continue;
        }
        bool gone = (ev & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        if (!gone && (ev & POLLIN) != 0) {  // a CHALLENGE or an ERROR: read and ignore; EOF means closed
          const ssize_t n = ::recv(s.fd, sink, sizeof(sink), MSG_DONTWAIT);
          gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (gone) {
          closed_by_peer.fetch_add(1);
          close_slot(s);  // reopened at the top of the next turn
        }
      }
    }
  }

  std::vector<AttackSlot> slots_;
  sockaddr_in target_{};
  std::vector<std::uint8_t> hello_;
  std::atomic<bool> stop_{false};
  double deadline_ = 0;
  std::thread thread_;
};

// One good subscriber: connect, pull the newest version, check every word.
Try good_try(const Config& cfg, const std::string& address, std::vector<std::uint64_t>& buffer) {
  using namespace weightsync;
  Try t;
  const double t0 = now_seconds();
  SubscriberOptions o;
  o.secret = cfg.secret;
  o.transport = "tcp";
  o.connect_timeout_ms = cfg.connect_timeout_ms;
  o.io_timeout_ms = cfg.connect_timeout_ms;
  o.client_name = "crowd-bench-good";
  auto sub = Subscriber::connect(address, o);
  if (!sub.ok()) {
    t.error = "connect: " + sub.status().to_string();
  } else {
    const std::size_t bytes = (*sub)->layout().total_bytes();
    if (buffer.size() * 8 < bytes) buffer.assign((bytes + 7) / 8, 0);
    PullOptions po;
    po.newer_than = 0;
    po.wait = std::chrono::milliseconds(cfg.connect_timeout_ms);
    auto r = (*sub)->pull(Destination::contiguous(buffer.data(), bytes), po);
    if (!r.ok()) {
      t.error = "pull: " + r.status().to_string();
    } else if (const std::size_t bad = check_pattern(buffer.data(), bytes, r->version, 1); bad != 0) {
      t.error =
          "content: " + std::to_string(bad) + " words differ from version " + std::to_string(r->version);
    } else {
      t.ok = true;
    }
  }
  t.seconds = now_seconds() - t0;
  return t;
}

void print_try(const char* what, int i, const Try& t) {
  std::fprintf(stderr, "flood: %s try %d: %s in %.3f s%s%s\n", what, i, t.ok ? "ok" : "FAILED", t.seconds,
               t.error.empty() ? "" : ": ", t.error.c_str());
}

}  // namespace

FloodResult run_flood(const Config& cfg, const std::string& self) {
  FloodResult res;
  const double started = now_seconds();
  const std::string log = cfg.log_dir + "/crowd-bench-publisher-flood.log";
  PublisherProcess pub = start_publisher(cfg, self, "flood", log);
  std::fprintf(stderr, "flood: publisher pid %d at %s (log %s)\n", pub.pid(), pub.address.c_str(),
               log.c_str());
  std::vector<std::uint64_t> buffer;
  res.before = sample_process(pub.pid());
  for (int i = 0; i < cfg.baseline_tries; ++i) {
    res.baseline.push_back(good_try(cfg, pub.address, buffer));
    print_try("baseline (no attacker)", i + 1, res.baseline.back());
  }

  Attacker attacker(pub.address, cfg.attackers);
  const double attack_start = now_seconds();
  attacker.start(cfg.flood_budget_s + 30.0);
  // Warm-up: until every attacker connection has been established once (at most 10 s), then 1 s.
  for (int i = 0; i < 200 && attacker.opened.load() < static_cast<std::uint64_t>(cfg.attackers); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  res.under_attack = sample_process(pub.pid());
  res.attacker_open_at_warmup = attacker.open_now.load();
  std::fprintf(
      stderr,
      "flood: attacker up: %d open now, %llu established, %llu closed by the publisher, %llu connect "
      "errors; publisher threads %ld rss %ld MiB\n",
      res.attacker_open_at_warmup, static_cast<unsigned long long>(attacker.opened.load()),
      static_cast<unsigned long long>(attacker.closed_by_peer.load()),
      static_cast<unsigned long long>(attacker.connect_errors.load()), res.under_attack.threads,
      res.under_attack.rss_kib / 1024);

  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    for (int i = 0; i < 4 * (cfg.flood_budget_s + 60) && sampling.load(); ++i) {
      const ProcSample s = sample_process(pub.pid());
      res.peak.threads = std::max(res.peak.threads, s.threads);
      res.peak.rss_kib = std::max(res.peak.rss_kib, s.rss_kib);
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });
  const double budget_end = now_seconds() + cfg.flood_budget_s;
  for (int i = 0; i < cfg.tries; ++i) {
    if (now_seconds() >= budget_end) {
      res.tries_not_run = cfg.tries - i;
      break;
    }
    res.tries.push_back(good_try(cfg, pub.address, buffer));
    print_try("under attack", i + 1, res.tries.back());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  sampling.store(false);
  sampler.join();
  attacker.stop();
  res.attack_seconds = now_seconds() - attack_start;
  res.attacker_opened = attacker.opened.load();
  res.attacker_closed_by_publisher = attacker.closed_by_peer.load();
  res.attacker_connect_errors = attacker.connect_errors.load();
  res.publisher_stats = pub.stop();
  res.elapsed_seconds = now_seconds() - started;
  return res;
}

}  // namespace crowd
