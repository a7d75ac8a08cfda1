// Relays (docs/relays.md): a tree of real in-process relays over real tcp,
// the trainer's checksum carried end to end, failover after a relay is
// SIGKILLed, version numbers and monotonicity, and a bounded relay ring.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "auth/handshake.h"
#include "child_process.h"
#include "common/checksum.h"
#include "net/socket.h"
#include "patterns.h"
#include "peers.h"
#include "publisher/publisher_core.h"
#include "raw_peer.h"
#include "tcp_proxy.h"
#include "weightsync/weightsync.h"
#include "wire/frame_io.h"
#include "wire/messages.h"

using namespace weightsync;
using namespace wstest;

namespace {

// A relay counts a forwarded version just after committing it, so a leaf can
// hold the version an instant before the count moves: wait for it (bounded).
RelayStats stats_after_forwarding(const Relay& relay, std::uint64_t versions) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  RelayStats stats = relay.stats();
  while (stats.versions_forwarded < versions && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stats = relay.stats();
  }
  return stats;
}

const char* const kSecret = "relay-test-secret";

SubscriberOptions leaf_options(int io_timeout_ms = 3000) {
  SubscriberOptions o;
  o.secret = kSecret;
  o.transport = "tcp";
  o.connect_timeout_ms = 3000;
  o.io_timeout_ms = io_timeout_ms;
  o.client_name = "leaf";
  return o;
}

PublisherOptions trainer_options(std::size_t slots = 3) {
  PublisherOptions o;
  o.secret = kSecret;
  o.checksum = true;
  o.slots = slots;
  o.io_timeout_ms = 3000;
  return o;
}

RelayOptions relay_options(std::vector<std::string> upstreams, std::size_t slots = 3) {
  RelayOptions o;
  o.upstreams = std::move(upstreams);
  o.subscriber = leaf_options();
  o.subscriber.client_name = "relay";
  o.publisher.secret = kSecret;
  o.publisher.slots = slots;
  o.publisher.io_timeout_ms = 3000;
  return o;
}

std::unique_ptr<Relay> make_relay(RelayOptions options) {
  auto relay = Relay::create(std::move(options));
  INFO(relay.status().to_string());
  REQUIRE(relay.ok());
  return std::move(*relay);
}

std::unique_ptr<Subscriber> connect_leaf(const std::string& address, int io_timeout_ms = 3000) {
  auto sub = Subscriber::connect(address, leaf_options(io_timeout_ms));
  INFO(sub.status().to_string());
  REQUIRE(sub.ok());
  return std::move(*sub);
}

// publish_pattern through a relay's publisher core (detail::PublisherCore).
void forward_pattern(detail::PublisherCore& core, std::uint64_t version) {
  auto writer = core.begin_forwarding(version);
  REQUIRE(writer.ok());
  for (const auto& t : core.layout.tensors()) {
    fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, version, t.offset);
  }
  REQUIRE(writer->commit_as(version, std::nullopt).ok());
}

// A relay's publisher core: what relay.cc forwards into.
std::unique_ptr<detail::PublisherCore> make_core(const WeightLayout& layout,
                                                 const PublisherOptions& options) {
  auto core = detail::PublisherCore::create(layout, options);
  INFO(core.status().to_string());
  REQUIRE(core.ok());
  return std::move(*core);
}

// The trainer's xxHash3 of `version`'s pattern image (tensors in layout order).
std::uint64_t pattern_checksum(const WeightLayout& layout, std::uint64_t version) {
  std::vector<char> image(layout.total_bytes());
  detail::StreamHasher hasher;
  for (const auto& t : layout.tensors()) {
    fill_pattern(image.data() + t.offset, t.bytes, version, t.offset);
    hasher.update(image.data() + t.offset, t.bytes);
  }
  return hasher.digest();
}

std::int64_t mismatch(const WeightLayout& layout, const void* image, std::uint64_t version) {
  for (const auto& t : layout.tensors()) {
    auto bad = find_mismatch(static_cast<const char*>(image) + t.offset, t.bytes, version, t.offset);
    if (bad >= 0) return static_cast<std::int64_t>(t.offset) + bad;
  }
  return -1;
}

struct Leaf {
  std::unique_ptr<Subscriber> sub;
  HostBuffer buffer;
};

Leaf make_leaf(const std::string& address, const WeightLayout& layout) {
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  return Leaf{connect_leaf(address), std::move(*buffer)};
}

Result<PullResult> pull_into(Leaf& leaf, std::chrono::milliseconds wait = std::chrono::seconds(10)) {
  PullOptions options;
  options.wait = wait;
  return leaf.sub->pull(Destination::contiguous(leaf.buffer.data(), leaf.buffer.size()), options);
}

std::string relay_path() {
  return WS_TEST_RELAY_PATH;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("relay: a depth-2 tree delivers every version bit-exact with the trainer's checksum", "[relay]") {
  const auto layout = bytes_layout((3u << 20) + 17, 5);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  std::vector<std::unique_ptr<Relay>> relays;
  for (int i = 0; i < 2; ++i) relays.push_back(make_relay(relay_options({(*trainer)->address()})));
  std::vector<Leaf> leaves;
  for (auto& relay : relays) {
    for (int i = 0; i < 2; ++i) leaves.push_back(make_leaf(relay->address(), layout));
  }
  for (auto& leaf : leaves) CHECK(leaf.sub->publisher_checksums());

  constexpr std::uint64_t kVersions = 4;
  for (std::uint64_t version = 1; version <= kVersions; ++version) {
    publish_pattern(**trainer, version);
    const std::uint64_t expected = pattern_checksum(layout, version);
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      INFO("leaf " << i << " version " << version);
      auto pulled = pull_into(leaves[i]);
      INFO(pulled.status().to_string());
      REQUIRE(pulled.ok());
      CHECK(pulled->version == version);
      CHECK(pulled->checksum_verified);
      CHECK(pulled->checksum == expected);
      CHECK(mismatch(layout, leaves[i].buffer.data(), version) == -1);
    }
  }
  for (auto& relay : relays) {
    const RelayStats stats = stats_after_forwarding(*relay, kVersions);
    CHECK(stats.running);
    CHECK(stats.upstream_connected);
    CHECK(stats.upstream == (*trainer)->address());
    CHECK(stats.versions_forwarded == kVersions);
    CHECK(stats.bytes_received == kVersions * layout.payload_bytes());
    CHECK(stats.latest_version == kVersions);
    CHECK(stats.failovers == 0);
  }
  // The trainer's link carried each version twice (one per relay), not four times.
  CHECK((*trainer)->stats().bytes_served == 2 * kVersions * layout.payload_bytes());
}

TEST_CASE("relay: forwards the trainer's checksum, so a byte the relay corrupts fails the leaf's check",
          "[relay]") {
  const auto layout = bytes_layout(1u << 20, 3);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  auto options = relay_options({(*trainer)->address()});
  options.before_commit = [](std::uint64_t, void* slot, std::size_t bytes) {
    static_cast<unsigned char*>(slot)[bytes / 2] ^= 0x40;  // a relay bug, after the relay verified its copy
  };
  auto relay = make_relay(options);
  Leaf leaf = make_leaf(relay->address(), layout);
  leaf.sub.reset();
  auto leaf_options_no_retry = leaf_options();
  leaf_options_no_retry.max_retries = 2;
  auto sub = Subscriber::connect(relay->address(), leaf_options_no_retry);
  REQUIRE(sub.ok());
  leaf.sub = std::move(*sub);

  publish_pattern(**trainer, 1);
  REQUIRE(relay->wait_for_version(0, std::chrono::seconds(10)).ok());
  auto pulled = pull_into(leaf);
  // Had the relay hashed its own (corrupt) copy, this pull would succeed.
  REQUIRE_FALSE(pulled.ok());
  CHECK(pulled.status().code() == ErrorCode::kChecksumMismatch);
  CHECK(leaf.sub->status().ok());  // not sticky: a later good version is delivered
}

TEST_CASE("relay: a SIGKILLed relay fails its leaves within the timeout and relays below fail over",
          "[relay]") {
  const auto layout = bytes_layout(2u << 20, 4);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  // A: a relay process (killed below). B: an in-process relay of the trainer.
  auto a = wsutil::ChildProcess::spawn(
      {relay_path(), "--upstream", (*trainer)->address(), "--secret", kSecret, "--timeout-ms", "2000"});
  auto a_address = a.wait_for("ADDRESS ", std::chrono::seconds(20));
  REQUIRE(a_address.has_value());
  auto b = make_relay(relay_options({(*trainer)->address()}));
  // C prefers A and falls back to B; D knows only A.
  auto c = make_relay(relay_options({*a_address, b->address()}));
  auto d = make_relay(relay_options({*a_address}));
  Leaf on_a = make_leaf(*a_address, layout);
  Leaf on_c = make_leaf(c->address(), layout);

  publish_pattern(**trainer, 1);
  REQUIRE(pull_into(on_a).ok());
  REQUIRE(pull_into(on_c).ok());
  CHECK(mismatch(layout, on_c.buffer.data(), 1) == -1);
  CHECK(c->stats().upstream == *a_address);
  REQUIRE(d->wait_for_version(0, std::chrono::seconds(10)).ok());

  a.signal(SIGKILL);
  REQUIRE(a.wait(std::chrono::seconds(5)).has_value());
  publish_pattern(**trainer, 2);

  // The leaf of the dead relay: a clear error, within its timeout.
  const auto t0 = std::chrono::steady_clock::now();
  auto lost = pull_into(on_a, std::chrono::seconds(10));
  REQUIRE_FALSE(lost.ok());
  CHECK(since(t0) < 3.5);
  CHECK((lost.status().code() == ErrorCode::kConnectionLost || lost.status().code() == ErrorCode::kTimeout));
  CHECK(lost.status().action() == Action::kReconnect);

  // C fails over to B and holds version 2; its leaf gets it bit-exact.
  auto got = c->wait_for_version(1, std::chrono::seconds(10));
  INFO(got.status().to_string());
  REQUIRE(got.ok());
  CHECK(*got == 2);
  auto pulled = pull_into(on_c);
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 2);
  CHECK(pulled->checksum == pattern_checksum(layout, 2));
  CHECK(mismatch(layout, on_c.buffer.data(), 2) == -1);
  const RelayStats c_stats = c->stats();
  CHECK(c_stats.failovers == 1);
  CHECK(c_stats.upstream == b->address());
  CHECK(c_stats.upstream_connected);

  // D has no other source: it keeps serving version 1 and says so.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const RelayStats d_stats = d->stats();
  CHECK_FALSE(d_stats.upstream_connected);
  CHECK(d_stats.upstream.empty());
  CHECK_FALSE(d_stats.upstream_error.empty());
  CHECK(d_stats.running);
  CHECK(d->latest_version() == 1);
  Leaf on_d = make_leaf(d->address(), layout);
  auto held = pull_into(on_d, std::chrono::milliseconds(0));
  REQUIRE(held.ok());
  CHECK(held->version == 1);
  CHECK(mismatch(layout, on_d.buffer.data(), 1) == -1);
}

TEST_CASE("relay: version numbers kept, strictly increasing, only whole verified versions committed",
          "[relay]") {
  const auto layout = bytes_layout((1u << 20) + 5, 3);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  // Upstream through a proxy that flips a byte of the relay's data connection
  // (connection 2: control is 1): the relay's first pull fails its checksum.
  FaultyProxy proxy((*trainer)->port(), 2, 4096);
  auto options = relay_options({proxy.address()});
  options.subscriber.max_retries = 0;  // the corrupt attempt surfaces to the relay
  std::atomic<int> bad_commits{0};
  std::vector<std::uint64_t> committed;
  std::mutex committed_mu;
  options.before_commit = [&](std::uint64_t version, void* slot, std::size_t) {
    if (mismatch(layout, slot, version) != -1) ++bad_commits;
    std::lock_guard<std::mutex> lock(committed_mu);
    committed.push_back(version);
  };
  auto relay = make_relay(options);
  Leaf leaf = make_leaf(relay->address(), layout);

  // Versions 10, 20, ...: the relay must keep the trainer's numbers.
  std::vector<std::uint64_t> seen;
  for (std::uint64_t version = 10; version <= 80; version += 10) {
    publish_pattern(**trainer, version);
    if (version % 20 == 0) {
      auto pulled = pull_into(leaf);
      INFO(pulled.status().to_string());
      REQUIRE(pulled.ok());
      CHECK(pulled->checksum_verified);
      CHECK(mismatch(layout, leaf.buffer.data(), pulled->version) == -1);
      CHECK(pulled->version % 10 == 0);
      seen.push_back(pulled->version);
    }
  }
  REQUIRE(relay->wait_for_version(79, std::chrono::seconds(10)).ok());
  CHECK(proxy.flips() == 1);
  CHECK(bad_commits == 0);
  CHECK_THAT(relay->stats().upstream_error, Catch::Contains("checksum"));
  std::lock_guard<std::mutex> lock(committed_mu);
  for (std::size_t i = 0; i < committed.size(); ++i) {
    CHECK(committed[i] % 10 == 0);
    if (i > 0) CHECK(committed[i] > committed[i - 1]);
  }
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i] > seen[i - 1]);
  CHECK(committed.back() == 80);
}

TEST_CASE("relay: a slow leaf does not stall the relay (its lease is revoked, as for a trainer)", "[relay]") {
  const auto layout = bytes_layout(16u << 20, 2);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  auto relay = make_relay(relay_options({(*trainer)->address()}, /*slots=*/2));
  auto slow_sub = connect_leaf(relay->address(), 5000);
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());

  publish_pattern(**trainer, 1);
  REQUIRE(relay->wait_for_version(0, std::chrono::seconds(10)).ok());
  std::atomic<bool> hold{true};
  std::atomic<bool> started{false};
  Result<PullResult> slow = Status(ErrorCode::kInternal, "not run");
  std::thread reader([&] {
    PullOptions options;
    // Hold the lease before any byte moves: once the transfer has begun, the
    // kernel's socket buffers (tcp_rmem up to 32 MiB) can take the whole
    // version, and a leaf that got it all before the overwrite rightly keeps it.
    options.on_start = [&](std::uint64_t, bool) {
      started = true;
      while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    };
    slow = slow_sub->pull(Destination::contiguous(buffer->data(), buffer->size()), options);
  });
  struct Join {  // a failed REQUIRE below must not leave the reader joinable
    std::atomic<bool>& hold;
    std::thread& reader;
    ~Join() {
      hold = false;
      if (reader.joinable()) reader.join();
    }
  } join{hold, reader};
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  // The leaf holds version 1's slot; the relay keeps forwarding anyway.
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t version = 2; version <= 4; ++version) {
    publish_pattern(**trainer, version);
    auto got = relay->wait_for_version(version - 1, std::chrono::seconds(5));
    INFO(got.status().to_string());
    REQUIRE(got.ok());
  }
  CHECK(since(t0) < 4.0);
  CHECK(relay->stats().publisher.leases_revoked >= 1);
  hold = false;
  reader.join();
  // The slow leaf never gets torn bytes: it retried and took the newest version.
  INFO(slow.status().to_string());
  REQUIRE(slow.ok());
  CHECK(slow->version == 4);
  CHECK(slow->retries >= 1);
  CHECK(mismatch(layout, buffer->data(), 4) == -1);
}

TEST_CASE("relay: connect_any skips a dead source and takes the next", "[relay]") {
  const auto layout = bytes_layout(64u << 10, 2);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  auto relay = make_relay(relay_options({(*trainer)->address()}));
  // A port nobody listens on: a listener opened and closed at once.
  std::string dead;
  {
    auto gone = Publisher::create(layout, trainer_options());
    REQUIRE(gone.ok());
    dead = (*gone)->address();
  }
  auto sub = Subscriber::connect_any({dead, relay->address()}, leaf_options());
  INFO(sub.status().to_string());
  REQUIRE(sub.ok());
  publish_pattern(**trainer, 1);
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  PullOptions wait;
  wait.wait = std::chrono::seconds(10);
  auto pulled = (*sub)->pull(Destination::contiguous(buffer->data(), buffer->size()), wait);
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 1);
  CHECK(mismatch(layout, buffer->data(), 1) == -1);

  auto none = Subscriber::connect_any({dead}, leaf_options());
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == ErrorCode::kConnectionLost);
  CHECK_THAT(none.status().message(), Catch::Contains(dead));
  CHECK(Subscriber::connect_any({}, leaf_options()).status().code() == ErrorCode::kInvalidArgument);
}

// ---- The pipelined chain (docs/relays.md, "The pipelined chain") ----

namespace {

using Clock = std::chrono::steady_clock;

SubscriberOptions streaming_leaf_options(int io_timeout_ms = 3000) {
  SubscriberOptions o = leaf_options(io_timeout_ms);
  o.accept_streaming = true;
  return o;
}

// A loopback TCP proxy whose server-to-client direction is rate-limited: the
// trainer's slow egress link. Small socket buffers keep the rate smooth.
class SlowLink {
 public:
  SlowLink(std::uint16_t target_port, double bytes_per_second)
      : target_port_(target_port), rate_(bytes_per_second) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~SlowLink() {
    stopping_ = true;
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int small = 32 << 10;
      ::setsockopt(client, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
      ::setsockopt(server, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(target_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { pump(client, server, false); });
      pumps_.emplace_back([this, client, server] { pump(server, client, true); });
    }
  }
  void pump(int from, int to, bool slow) {
    std::vector<char> buf(16 << 10);
    const auto start = Clock::now();
    double sent = 0;
    while (!stopping_) {
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = ::send(to, buf.data() + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
        if (w <= 0) return;
        off += w;
      }
      if (slow) {
        sent += static_cast<double>(n);
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sent / rate_)));
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  using Clock = std::chrono::steady_clock;
  std::uint16_t target_port_;
  double rate_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
};

// Slows a relay's upstream link: `step_ms` of sleep per `step` bytes received.
std::function<void(std::uint64_t, std::uint64_t, std::uint64_t)> throttle(std::uint64_t step, int step_ms) {
  auto last = std::make_shared<std::pair<std::uint64_t, std::uint64_t>>(0, 0);  // version, steps slept
  return [=](std::uint64_t version, std::uint64_t received, std::uint64_t) {
    if (last->first != version || received < last->second * step) *last = {version, 0};
    const std::uint64_t steps = received / step;
    if (steps > last->second) {
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms * (steps - last->second)));
      last->second = steps;
    }
  };
}

}  // namespace

TEST_CASE("relay: a pipelined chain of 4 streams each version through before the first relay holds it whole",
          "[relay][pipelined]") {
  const auto layout = bytes_layout(8u << 20, 8);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, Clock::time_point>> first_holds;  // relay 1 held version whole
  // The trainer's egress is slow (8 MB/s: about 1 s per version); the relays' links are fast.
  SlowLink link((*trainer)->port(), 8e6);
  auto o1 = relay_options({link.address()});
  o1.chunk_bytes = 64u << 10;
  o1.before_commit = [&](std::uint64_t version, void*, std::size_t) {
    std::lock_guard<std::mutex> lock(mu);
    first_holds.emplace_back(version, Clock::now());
  };
  std::vector<std::unique_ptr<Relay>> chain;
  chain.push_back(make_relay(o1));
  for (int i = 1; i < 4; ++i) {
    auto o = relay_options({chain.back()->address()});
    o.chunk_bytes = 64u << 10;
    chain.push_back(make_relay(o));
  }
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  auto leaf = Subscriber::connect(chain.back()->address(), streaming_leaf_options());
  REQUIRE(leaf.ok());
  for (std::uint64_t v = 1; v <= 3; ++v) {
    const auto t0 = Clock::now();
    publish_pattern(**trainer, v);
    std::optional<Clock::time_point> first_byte;
    PullOptions pull;
    pull.wait = std::chrono::seconds(20);
    pull.on_progress = [&](std::uint64_t, std::uint64_t) {
      if (!first_byte) first_byte = Clock::now();
    };
    auto pulled = (*leaf)->pull(Destination::contiguous(buffer->data(), buffer->size()), pull);
    const auto done = Clock::now();
    INFO(pulled.status().to_string());
    REQUIRE(pulled.ok());
    CHECK(pulled->version == v);
    CHECK(pulled->checksum_verified);
    CHECK(pulled->checksum == pattern_checksum(layout, v));
    CHECK(mismatch(layout, buffer->data(), v) == -1);
    Clock::time_point held{};
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [version, at] : first_holds) {
        if (version == v) held = at;
      }
    }
    REQUIRE(held != Clock::time_point{});
    REQUIRE(first_byte.has_value());
    // The leaf, four hops down, had bytes before the first hop had the version whole.
    CHECK(*first_byte < held);
    const auto ms = [&](Clock::time_point t) {
      return std::chrono::duration<double, std::milli>(t - t0).count();
    };
    std::printf(
        "pipelined chain of 4, version %llu (8 MiB, trainer link 8 MB/s): leaf first byte %.0f ms, relay 1 "
        "held it whole %.0f ms, leaf done %.0f ms\n",
        static_cast<unsigned long long>(v), ms(*first_byte), ms(held), ms(done));
    // Pipelined: the chain adds little after the first hop (a whole-version chain would add ~3x).
    CHECK(ms(done) < ms(held) + 0.75 * ms(held));
  }
  CHECK((*leaf)->stats().streamed_pulls == 3);
  for (auto& relay : chain) CHECK(stats_after_forwarding(*relay, 3).versions_forwarded == 3);
}

TEST_CASE("relay: an abandoned in-progress version is retried by its streaming readers, never delivered",
          "[relay][pipelined]") {
  const auto layout = bytes_layout(1u << 20, 4);
  PublisherOptions options = trainer_options();
  options.checksum = false;  // only the commit check stands between a reader and the abandoned bytes
  auto publisher = make_core(layout, options);
  auto* pub = publisher.get();
  std::optional<detail::ForwardingWriter> writer;
  {
    auto w = pub->begin_forwarding(1);
    REQUIRE(w.ok());
    writer.emplace(std::move(*w));
  }
  REQUIRE(writer->begin_streaming(1).ok());
  // Every byte of a version that will be abandoned (its relay's upstream failed
  // after the last byte, before the commit): readable, never deliverable.
  std::memset(writer->data(), 0xAB, layout.total_bytes());
  writer->advance_watermark(layout.total_bytes());

  auto sub = Subscriber::connect(pub->address(), streaming_leaf_options());
  REQUIRE(sub.ok());
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  std::atomic<std::uint64_t> got{0};
  std::vector<std::pair<std::uint64_t, bool>> starts;  // (version, streaming) per attempt
  Result<PullResult> pulled = Status(ErrorCode::kInternal, "not run");
  std::thread reader([&] {
    PullOptions pull;
    pull.wait = std::chrono::seconds(10);
    pull.on_start = [&](std::uint64_t version, bool streaming) { starts.emplace_back(version, streaming); };
    pull.on_progress = [&](std::uint64_t received, std::uint64_t) { got = received; };
    pulled = (*sub)->pull(Destination::contiguous(buffer->data(), buffer->size()), pull);
  });
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (got.load() < layout.payload_bytes() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(got.load() ==
        layout.payload_bytes());  // the reader holds every abandoned byte, waiting for the commit
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  writer.reset();  // abandoned (the relay's upstream failed)
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  forward_pattern(*pub, 1);  // the same version, whole this time
  reader.join();
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 1);
  CHECK(pulled->retries >= 1);
  CHECK(mismatch(layout, buffer->data(), 1) == -1);  // no byte of the abandoned attempt
  CHECK((*sub)->stats().streamed_pulls == 0);        // delivered whole, committed
  REQUIRE(!starts.empty());
  CHECK(starts.front() == std::make_pair(std::uint64_t{1}, true));
  CHECK(pub->stats().leases_revoked >= 1);
}

TEST_CASE(
    "relay: a pipelined relay whose upstream dies mid-version abandons it and the chain retries it whole",
    "[relay][pipelined]") {
  const auto layout = bytes_layout(4u << 20, 4);
  auto trainer = Publisher::create(layout, trainer_options());
  REQUIRE(trainer.ok());
  auto o1 = relay_options({(*trainer)->address()});
  o1.chunk_bytes = 64u << 10;
  auto slow = throttle(256u << 10, 20);
  auto killed = std::make_shared<std::atomic<int>>(0);
  o1.on_upstream_progress = [slow, killed](std::uint64_t version, std::uint64_t received,
                                           std::uint64_t total) {
    slow(version, received, total);
    if (version == 1 && received > total / 2 && killed->fetch_add(1) == 0) {
      throw std::runtime_error("upstream killed mid-version (test)");
    }
  };
  auto r1 = make_relay(o1);
  auto o2 = relay_options({r1->address()});
  o2.chunk_bytes = 64u << 10;
  auto r2 = make_relay(o2);
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  auto leaf = Subscriber::connect(r2->address(), streaming_leaf_options());
  REQUIRE(leaf.ok());
  publish_pattern(**trainer, 1);
  PullOptions pull;
  pull.wait = std::chrono::seconds(20);
  auto pulled = (*leaf)->pull(Destination::contiguous(buffer->data(), buffer->size()), pull);
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 1);
  CHECK(pulled->checksum_verified);
  CHECK(pulled->checksum == pattern_checksum(layout, 1));
  CHECK(mismatch(layout, buffer->data(), 1) == -1);
  CHECK(killed->load() >= 1);
  CHECK(r1->stats().failovers >= 1);
  CHECK(r2->stats().publisher.leases_revoked + r1->stats().publisher.leases_revoked >= 1);
}

TEST_CASE("relay: a streaming reader cannot READ above the watermark", "[relay][pipelined][hostile]") {
  using namespace weightsync::detail;
  const auto layout = bytes_layout(1u << 20, 1);
  auto publisher = make_core(layout, trainer_options());
  auto w = publisher->begin_forwarding(1);
  REQUIRE(w.ok());
  std::optional<ForwardingWriter> writer(std::move(*w));
  REQUIRE(writer->begin_streaming(1).ok());
  std::memset(writer->data(), 0x5A, 8192);
  writer->advance_watermark(8192);

  const auto deadline = Deadline::after(std::chrono::seconds(5));
  Socket control = raw_connect(publisher->address());
  auto session = client_handshake(control, kSecret, Role::kControl, 0, "streamer", deadline);
  REQUIRE(session.ok());
  REQUIRE(write_frame(control, MsgType::kAcquire, AcquireMsg{0, true}.encode(), deadline, "p").ok());
  auto lease_frame = read_expected(control, MsgType::kLease, kMaxReplyPayload, deadline, "p");
  REQUIRE(lease_frame.ok());
  auto lease = LeaseMsg::decode(lease_frame->payload);
  REQUIRE(lease.ok());
  CHECK(lease->streaming());
  CHECK(lease->stamp == ((1u << 1) | 1));

  // WAIT_WATERMARK answers with the watermark once it passes the bytes asked for.
  REQUIRE(write_frame(control, MsgType::kWaitWatermark, WaitWatermarkMsg{lease->lease_id, 100, 2000}.encode(),
                      deadline, "p")
              .ok());
  auto mark = read_expected(control, MsgType::kWatermark, kMaxReplyPayload, deadline, "p");
  REQUIRE(mark.ok());
  auto state = WatermarkMsg::decode(mark->payload);
  REQUIRE(state.ok());
  CHECK(state->watermark == 8192);
  CHECK_FALSE(state->committed);

  Socket data = raw_connect(publisher->address());
  REQUIRE(client_handshake(data, kSecret, Role::kData, *session, "streamer-data", deadline).ok());
  // Below the watermark: served.
  ReadMsg ok_read;
  ok_read.lease_id = lease->lease_id;
  ok_read.ranges = {ByteRange{0, 8192}};
  REQUIRE(write_frame(data, MsgType::kRead, ok_read.encode(), deadline, "p").ok());
  auto header = read_expected(data, MsgType::kData, kMaxReplyPayload, deadline, "p");
  REQUIRE(header.ok());
  std::vector<unsigned char> bytes(8192);
  REQUIRE(recv_all(data, bytes.data(), bytes.size(), deadline, "p").ok());
  CHECK(bytes[8191] == 0x5A);
  auto end = read_expected(data, MsgType::kDataEnd, kMaxReplyPayload, deadline, "p");
  REQUIRE(end.ok());
  CHECK(DataEndMsg::decode(end->payload)->stamp_after == lease->stamp);
  const auto served = publisher->stats().bytes_served;
  // One byte above it: refused, never DATA, and the connection closes.
  ReadMsg greedy;
  greedy.lease_id = lease->lease_id;
  greedy.ranges = {ByteRange{4096, 4097}};
  REQUIRE(write_frame(data, MsgType::kRead, greedy.encode(), deadline, "p").ok());
  auto refused = read_expected(data, MsgType::kData, kMaxReplyPayload, deadline, "p");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("watermark"));
  CHECK(publisher->stats().bytes_served == served);

  // A parked WAIT_WATERMARK is answered kVersionRevoked when the version is abandoned.
  REQUIRE(write_frame(control, MsgType::kWaitWatermark,
                      WaitWatermarkMsg{lease->lease_id, 1u << 20, 2000}.encode(), deadline, "p")
              .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  writer.reset();
  auto revoked = read_expected(control, MsgType::kWatermark, kMaxReplyPayload, deadline, "p");
  REQUIRE_FALSE(revoked.ok());
  CHECK(revoked.status().code() == ErrorCode::kVersionRevoked);
}

TEST_CASE("relay: a plain subscriber never sees an in-progress version", "[relay][pipelined]") {
  using namespace weightsync::detail;
  const auto layout = bytes_layout(1u << 20, 2);
  auto publisher = make_core(layout, trainer_options());
  forward_pattern(*publisher, 1);
  auto w = publisher->begin_forwarding(2);
  REQUIRE(w.ok());
  std::optional<ForwardingWriter> writer(std::move(*w));
  REQUIRE(writer->begin_streaming(2).ok());
  for (const auto& t : layout.tensors()) {
    fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, 2, t.offset);
  }
  writer->advance_watermark(layout.total_bytes());

  auto plain = Subscriber::connect(publisher->address(), leaf_options());
  REQUIRE(plain.ok());
  auto streaming = Subscriber::connect(publisher->address(), streaming_leaf_options());
  REQUIRE(streaming.ok());
  CHECK((*plain)->latest_version().value() == 1);
  CHECK((*streaming)->latest_version().value() == 2);
  auto buffer = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(buffer.ok());
  auto pulled = (*plain)->pull(Destination::contiguous(buffer->data(), buffer->size()));
  REQUIRE(pulled.ok());
  CHECK(pulled->version == 1);
  CHECK(mismatch(layout, buffer->data(), 1) == -1);
  // A plain pull waiting for something newer than 1 does not take the in-progress 2.
  PullOptions newer;
  newer.wait = std::chrono::milliseconds(300);
  auto nothing = (*plain)->pull(Destination::contiguous(buffer->data(), buffer->size()), newer);
  REQUIRE_FALSE(nothing.ok());
  CHECK(nothing.status().code() == ErrorCode::kNotReady);
  // An old subscriber's ACQUIRE (no flag) is leased the committed version 1.
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  Socket control = raw_connect(publisher->address());
  REQUIRE(client_handshake(control, kSecret, Role::kControl, 0, "old", deadline).ok());
  const LeaseMsg lease = raw_acquire(control, deadline);
  CHECK(lease.version == 1);
  CHECK(lease.stamp == 2);
  // Committed, version 2 reaches the plain subscriber too.
  REQUIRE(writer->commit_as(2, std::nullopt).ok());
  auto second = (*plain)->pull(Destination::contiguous(buffer->data(), buffer->size()));
  REQUIRE(second.ok());
  CHECK(second->version == 2);
  CHECK(mismatch(layout, buffer->data(), 2) == -1);
}
