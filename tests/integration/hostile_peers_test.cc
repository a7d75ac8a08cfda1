// Hostile and crowded peers against the publisher's server (issue 14,
// findings 1, 2, 3 and part of 7): floods of connections that never
// authenticate, idle sessions, oversized requests, a dead event loop and log
// floods. Each case names the attack; a good subscriber must stay served.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "auth/handshake.h"
#include "net/socket.h"
#include "peers.h"
#include "raw_peer.h"
#include "wire/frame_io.h"

using namespace weightsync;
using namespace weightsync::detail;
using namespace wstest;

namespace {

const std::string kSecret = "hostile-peers-secret";

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kSlowdown = 5.0;  // sanitizer builds run several times slower
#else
constexpr double kSlowdown = 1.0;
#endif

std::vector<std::uint8_t> framed(MsgType type, const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out(kFrameHeaderBytes);
  encode_header(type, static_cast<std::uint32_t>(payload.size()), out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Waits until the publisher closes `s`; the frame types it sent first, or
// nullopt if it is still open after `limit`.
std::optional<std::vector<MsgType>> wait_closed(const Socket& s, std::chrono::milliseconds limit) {
  std::vector<MsgType> seen;
  const auto deadline = Deadline::after(limit);
  for (;;) {
    auto frame = read_frame(s, kMaxReplyPayload, deadline, deadline, "publisher");
    if (!frame.ok()) {
      if (frame.status().code() == ErrorCode::kTimeout) return std::nullopt;
      return seen;
    }
    seen.push_back(frame->type);
  }
}

std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.' ? 1 : 0;
    ::closedir(dir);
  }
  return n;
}

// Raises the open-file limit to at least `want`; returns what it is now.
rlim_t raise_fd_limit(rlim_t want) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur >= want) return lim.rlim_cur;
  rlimit raised{std::max(lim.rlim_cur, want), std::max(lim.rlim_max, want)};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    raised.rlim_cur = std::min(want, lim.rlim_max);
    raised.rlim_max = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

std::unique_ptr<Publisher> make_publisher(const WeightLayout& layout, PublisherOptions options = {}) {
  if (!options.secret) options.secret = kSecret;
  auto publisher = Publisher::create(layout, options);
  REQUIRE(publisher.ok());
  return std::move(*publisher);
}

SubscriberOptions good_options(int connect_timeout_ms = 5000) {
  auto options = quick_options();
  options.secret = kSecret;
  options.connect_timeout_ms = connect_timeout_ms;
  return options;
}

// The three kinds of connection that never authenticate: silent, a header
// cut short, and HELLO followed by silence.
std::vector<std::uint8_t> stalling_prefix(int kind) {
  if (kind == 0) return {};
  auto hello = framed(MsgType::kHello, HelloMsg{Role::kControl, 0, {}, "flood"}.encode());
  if (kind == 1) hello.resize(7);
  return hello;
}

// Holds `count` unauthenticated connections open, reopening each one the
// publisher closes, until `stop` (or 120 s).
class Flood {
 public:
  Flood(std::string address, int count) : address_(std::move(address)), count_(count) {
    thread_ = std::thread([this] { run(); });
  }
  ~Flood() {
    stop_ = true;
    thread_.join();
  }
  std::uint64_t reopened() const { return reopened_.load(); }
  int open_now() const { return open_.load(); }

 private:
  Socket open_one(int kind) {
    auto target = parse_host_port(address_);
    auto s = connect_tcp(*target, Deadline::after(std::chrono::seconds(2)));
    if (!s.ok()) return Socket();
    auto prefix = stalling_prefix(kind);
    if (!prefix.empty()) ::send(s->fd(), prefix.data(), prefix.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return std::move(*s);
  }

  void run() {
    std::vector<Socket> sockets(count_);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::vector<pollfd> fds(count_);
    while (!stop_ && std::chrono::steady_clock::now() < give_up) {
      int open = 0;
      for (int i = 0; i < count_ && !stop_; ++i) {
        if (!sockets[i].valid()) {
          sockets[i] = open_one(i % 3);
          reopened_.fetch_add(1);
        }
        open += sockets[i].valid() ? 1 : 0;
        fds[i] = pollfd{sockets[i].fd(), POLLIN | POLLRDHUP, 0};
      }
      open_ = open;
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      char drain[4096];
      for (int i = 0; i < count_; ++i) {
        if (fds[i].revents == 0) continue;
        // Whatever the publisher said (ERROR), the attacker drops it and reconnects once it closes.
        ssize_t n = ::recv(sockets[i].fd(), drain, sizeof(drain), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN) || (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
          sockets[i].close();
        }
      }
    }
  }

  std::string address_;
  int count_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> reopened_{0};
  std::atomic<int> open_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE(
    "hostile peers: a flood of 1000 connections that never authenticate does not lock out a good "
    "subscriber",
    "[hostile]") {
  const int flood = 1000;
  const rlim_t limit = raise_fd_limit(4 * flood + 256);
  REQUIRE(limit >= static_cast<rlim_t>(2 * flood + 128));
  const auto layout = bytes_layout(1 << 20, 2);
  PublisherOptions options;
  options.io_timeout_ms = 2000;
  auto publisher = make_publisher(layout, options);
  publish_pattern(*publisher, 1);

  Flood attack(publisher->address(), flood);
  // Let the flood fill every budget first. Opening 1000 sockets one by one
  // took over 5 s under ASan on a loaded CI machine, so the bound scales.
  const int fill_polls = static_cast<int>(200 * kSlowdown * 2);
  for (int i = 0; i < fill_polls && attack.reopened() < static_cast<std::uint64_t>(flood); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  REQUIRE(attack.reopened() >= static_cast<std::uint64_t>(flood));

  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  int served = 0;
  double slowest = 0;
  std::vector<double> times;
  for (int attempt = 0; attempt < 20; ++attempt) {
    const auto t0 = std::chrono::steady_clock::now();
    auto sub = Subscriber::connect(publisher->address(), good_options(static_cast<int>(4000 * kSlowdown)));
    if (!sub.ok()) {
      UNSCOPED_INFO("attempt " << attempt << ": " << sub.status().to_string());
      continue;
    }
    auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
    const double took = seconds_since(t0);
    slowest = std::max(slowest, took);
    times.push_back(took);
    if (pulled.ok() && image_mismatch(layout, image->data(), 1) == -1 && took <= 2.0 * kSlowdown) ++served;
    UNSCOPED_INFO("attempt " << attempt << ": " << (pulled.ok() ? "pulled" : pulled.status().to_string())
                             << " in " << took << " s");
  }
  const auto stats = publisher->stats();
  INFO("reopened " << attack.reopened() << ", refused " << stats.connections_refused << ", timed out "
                   << stats.handshakes_timed_out << ", slowest good pull " << slowest << " s");
  std::sort(times.begin(), times.end());
  // The figure in docs/security.md.
  WARN("flood of " << flood << ": " << served << "/20 good connect+pull within 2 s; median "
                   << (times.empty() ? 0.0 : times[times.size() / 2]) << " s, slowest " << slowest
                   << " s; the flood was reopened " << attack.reopened() << " times");
  CHECK(served == 20);
  CHECK(stats.connections_refused > 0);  // the flood was turned away, with kBusy
  CHECK(stats.handshakes_active <= 64);
}

TEST_CASE("hostile peers: open connections cost file descriptors, not threads", "[hostile]") {
  raise_fd_limit(4096);
  const auto layout = bytes_layout(1 << 16, 1);
  PublisherOptions options;
  options.max_handshakes = 512;  // keep the unauthenticated ones open for the count
  options.handshake_timeout_ms = 60000;
  options.io_timeout_ms = 60000;
  options.max_connections = 512;
  auto publisher = make_publisher(layout, options);
  publish_pattern(*publisher, 1);
  // Warm up: one pull starts the workers it needs.
  {
    auto sub = Subscriber::connect(publisher->address(), good_options());
    REQUIRE(sub.ok());
    auto image = HostBuffer::allocate(layout.total_bytes());
    REQUIRE((*sub)->pull(Destination::contiguous(image->data(), image->size())).ok());
  }
  const std::size_t before = thread_count();
  std::vector<Socket> idle;
  for (int i = 0; i < 300; ++i) {
    idle.push_back(raw_connect(publisher->address()));
    send_bytes(idle.back(), stalling_prefix(i % 3));
  }
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  for (int i = 0; i < 200; ++i) {
    Socket s = raw_connect(publisher->address());
    REQUIRE(client_handshake(s, kSecret, Role::kControl, 0, "idle", deadline).ok());
    idle.push_back(std::move(s));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto stats = publisher->stats();
  CHECK(stats.connections_active >= 500);
  const std::size_t after = thread_count();
  INFO("threads before " << before << ", with 500 idle connections " << after);
  CHECK(after <= before + 2);
}

TEST_CASE(
    "hostile peers: a connection turned away for capacity is told kBusy, and a subscriber retries "
    "until a place frees up",
    "[hostile]") {
  const auto layout = bytes_layout(1 << 16, 1);
  PublisherOptions options;
  options.max_connections = 2;  // one tcp subscriber: control + data
  auto publisher = make_publisher(layout, options);
  publish_pattern(*publisher, 1);
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());

  auto first = Subscriber::connect(publisher->address(), good_options());
  REQUIRE(first.ok());
  REQUIRE((*first)->pull(Destination::contiguous(image->data(), image->size())).ok());

  const auto t0 = std::chrono::steady_clock::now();
  auto refused = Subscriber::connect(publisher->address(), good_options(600));
  REQUIRE_FALSE(refused.ok());
  INFO(refused.status().to_string());
  CHECK(refused.status().code() == ErrorCode::kBusy);
  CHECK(refused.status().action() == Action::kRetry);
  CHECK(refused.status().message().find("max_connections") != std::string::npos);
  CHECK(seconds_since(t0) >= 0.3);  // it kept retrying for most of its connect timeout
  CHECK(seconds_since(t0) < 3.0);
  CHECK(publisher->stats().connections_refused >= 1);

  // A subscriber that is already retrying gets in once the first one leaves.
  std::thread leave([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    first->reset();
  });
  auto waiting = Subscriber::connect(publisher->address(), good_options(5000));
  leave.join();
  REQUIRE(waiting.ok());
  CHECK((*waiting)->pull(Destination::contiguous(image->data(), image->size())).ok());
  CHECK(image_mismatch(layout, image->data(), 1) == -1);
}

TEST_CASE(
    "hostile peers: a connection that does not authenticate is closed after the handshake timeout, "
    "not the I/O timeout",
    "[hostile]") {
  const auto layout = bytes_layout(4096, 1);
  PublisherOptions options;
  options.handshake_timeout_ms = 300;
  options.io_timeout_ms = 10000;
  auto publisher = make_publisher(layout, options);
  for (int kind = 0; kind < 3; ++kind) {
    INFO("kind " << kind);
    Socket s = raw_connect(publisher->address());
    send_bytes(s, stalling_prefix(kind));
    const auto t0 = std::chrono::steady_clock::now();
    auto seen = wait_closed(s, std::chrono::milliseconds(5000));
    REQUIRE(seen.has_value());
    CHECK(seconds_since(t0) < 0.3 + 0.7 * kSlowdown);
  }
  CHECK(publisher->stats().handshakes_timed_out >= 3);
}

TEST_CASE(
    "hostile peers: an idle authenticated session is closed after idle_timeout_ms and its leases are "
    "released",
    "[hostile]") {
  const auto layout = bytes_layout(4096, 1);
  PublisherOptions options;
  options.idle_timeout_ms = 300;
  auto publisher = make_publisher(layout, options);
  publish_pattern(*publisher, 1);
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  Socket control = raw_connect(publisher->address());
  REQUIRE(client_handshake(control, kSecret, Role::kControl, 0, "idle", deadline).ok());
  REQUIRE(write_frame(control, MsgType::kAcquire, AcquireMsg{0}.encode(), deadline, "p").ok());
  REQUIRE(read_expected(control, MsgType::kLease, kMaxReplyPayload, deadline, "p").ok());
  CHECK(publisher->stats().leases_active == 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto seen = wait_closed(control, std::chrono::milliseconds(5000));
  REQUIRE(seen.has_value());
  CHECK(seconds_since(t0) < 0.3 + 0.7 * kSlowdown);
  const auto stats = publisher->stats();
  CHECK(stats.sessions_idle_closed == 1);
  CHECK(stats.leases_active == 0);
}

TEST_CASE("hostile peers: a READ may ask for at most one slot's worth of bytes", "[hostile]") {
  const std::uint64_t slot_bytes = 1 << 20;
  const auto layout = bytes_layout(slot_bytes, 1);
  auto publisher = make_publisher(layout);
  publish_pattern(*publisher, 1);
  const auto deadline = Deadline::after(std::chrono::seconds(5));
  Socket control = raw_connect(publisher->address());
  auto session = client_handshake(control, kSecret, Role::kControl, 0, "greedy", deadline);
  REQUIRE(session.ok());
  const LeaseMsg lease = raw_acquire(control, deadline);

  Socket data = raw_connect(publisher->address());
  REQUIRE(client_handshake(data, kSecret, Role::kData, *session, "greedy-data", deadline).ok());
  ReadMsg read;
  read.lease_id = lease.lease_id;
  read.ranges.assign(1000, ByteRange{0, slot_bytes});  // a 16 KiB request for ~1 GB
  REQUIRE(write_frame(data, MsgType::kRead, read.encode(), deadline, "p").ok());
  auto seen = wait_closed(data, std::chrono::milliseconds(5000));
  REQUIRE(seen.has_value());
  CHECK(*seen == std::vector<MsgType>{MsgType::kError});  // refused, never DATA
  CHECK(publisher->stats().bytes_served == 0);
}

TEST_CASE("hostile peers: a handshake frame longer than the pre-authentication bound is refused at once",
          "[hostile]") {
  const auto layout = bytes_layout(4096, 1);
  PublisherOptions options;
  options.io_timeout_ms = 10000;
  options.handshake_timeout_ms = 10000;
  auto publisher = make_publisher(layout, options);
  Socket s = raw_connect(publisher->address());
  std::uint8_t header[kFrameHeaderBytes];
  encode_header(MsgType::kHello, 100 * 1024, header);  // under the 128 KiB request limit
  send_bytes(s, std::vector<std::uint8_t>(header, header + sizeof(header)));
  const auto t0 = std::chrono::steady_clock::now();
  auto seen = wait_closed(s, std::chrono::milliseconds(3000));
  REQUIRE(seen.has_value());
  CHECK(*seen == std::vector<MsgType>{MsgType::kError});
  CHECK(seconds_since(t0) < 0.5 * kSlowdown);
}

TEST_CASE("hostile peers: when the event loop dies, stats() says so and new subscribers fail fast",
          "[hostile]") {
  auto eventpolls = [] {
    std::set<int> fds;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
      while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] == '.') continue;
        char target[256] = {};
        const std::string link = std::string("/proc/self/fd/") + e->d_name;
        if (::readlink(link.c_str(), target, sizeof(target) - 1) > 0 &&
            std::string(target).find("eventpoll") != std::string::npos) {
          fds.insert(std::atoi(e->d_name));
        }
      }
      ::closedir(dir);
    }
    return fds;
  };
  const auto layout = bytes_layout(4096, 1);
  PublisherOptions options;
  options.secret = kSecret;
  options.slot_allocator = "memfd";
  const auto before = eventpolls();
  auto publisher = make_publisher(layout, options);
  const auto after = eventpolls();
  CHECK(publisher->stats().serving);
  // The loop's epoll descriptor is the new one that watches the listening
  // socket (/proc/self/fdinfo lists each watched descriptor as "tfd: N"); UCX
  // may have epoll descriptors of its own, which are left alone.
  const auto port =
      static_cast<std::uint16_t>(std::stoi(publisher->address().substr(publisher->address().rfind(':') + 1)));
  int listener = -1;
  for (int fd = 3; fd < 65536 && listener < 0; ++fd) {
    sockaddr_in local{}, peer{};
    socklen_t len = sizeof(local), plen = sizeof(peer);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 && local.sin_family == AF_INET &&
        ntohs(local.sin_port) == port && ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
      listener = fd;
    }
  }
  REQUIRE(listener >= 0);
  int loop_epoll = -1;
  for (int fd : after) {
    if (before.count(fd) != 0) continue;
    std::ifstream info("/proc/self/fdinfo/" + std::to_string(fd));
    std::string line;
    while (std::getline(info, line)) {
      std::istringstream words(line);
      std::string key;
      int watched = -1;
      if (words >> key >> watched && key == "tfd:" && watched == listener) loop_epoll = fd;
    }
  }
  REQUIRE(loop_epoll >= 0);
  // Fault injection: that descriptor becomes something epoll_wait refuses.
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::dup2(null_fd, loop_epoll);
  ::close(null_fd);
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; ++i) {
    stopped = !publisher->stats().serving;
    if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(stopped);
  const auto stats = publisher->stats();
  INFO(stats.server_error);
  CHECK_FALSE(stats.server_error.empty());
  const auto t0 = std::chrono::steady_clock::now();
  auto late = Subscriber::connect(publisher->address(), good_options(3000));
  CHECK_FALSE(late.ok());
  CHECK(seconds_since(t0) < 1.0 * kSlowdown);
}

TEST_CASE("hostile peers: names from unauthenticated peers are escaped and their log lines rate-limited",
          "[hostile]") {
  const auto layout = bytes_layout(4096, 1);
  auto publisher = make_publisher(layout);
  const std::string forged = "x\n[weightsync error] forged line\x1b[2J" + std::string(200, 'A');

  char path[] = "/tmp/ws-hostile-log-XXXXXX";
  const int log_fd = ::mkstemp(path);
  REQUIRE(log_fd >= 0);
  const int saved_stderr = ::dup(2);
  ::dup2(log_fd, 2);
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = Deadline::after(std::chrono::seconds(20));
  int refused = 0;
  for (int i = 0; i < 300 && !deadline.expired(); ++i) {
    Socket s = raw_connect(publisher->address());
    auto hs = client_handshake(s, "the wrong secret", Role::kControl, 0, forged, deadline);
    refused += hs.ok() ? 0 : 1;
  }
  const double seconds = seconds_since(t0);
  ::dup2(saved_stderr, 2);
  ::close(saved_stderr);
  ::close(log_fd);
  std::ifstream in(path);
  std::string line;
  int lines = 0, forged_lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    forged_lines += line.rfind("[weightsync error] forged", 0) == 0 ? 1 : 0;
    CHECK(line.find('\x1b') == std::string::npos);
  }
  ::unlink(path);
  INFO(refused << " refused in " << seconds << " s, " << lines << " log lines");
  CHECK(refused == 300);
  CHECK(forged_lines == 0);
  CHECK(lines <= static_cast<int>(12 * (seconds + 1)) + 2);
}

TEST_CASE(
    "hostile peers: the publisher's connections carry keepalive and TCP_USER_TIMEOUT, so a vanished "
    "host is found",
    "[hostile]") {
  const auto layout = bytes_layout(4096, 1);
  PublisherOptions options;
  options.io_timeout_ms = 7000;
  auto publisher = make_publisher(layout, options);
  Socket client = raw_connect(publisher->address());
  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  REQUIRE(::getsockname(client.fd(), reinterpret_cast<sockaddr*>(&mine), &len) == 0);
  // The publisher runs in this process: find its end of this connection.
  int server_fd = -1;
  for (int attempt = 0; attempt < 200 && server_fd < 0; ++attempt) {
    for (int fd = 3; fd < 65536 && server_fd < 0; ++fd) {
      sockaddr_in peer{};
      socklen_t plen = sizeof(peer);
      if (fd == client.fd() || ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
      if (peer.sin_family == AF_INET && peer.sin_port == mine.sin_port) server_fd = fd;
    }
    if (server_fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(server_fd >= 0);
  int keepalive = 0, idle_s = 0;
  unsigned int user_timeout = 0;
  socklen_t ilen = sizeof(int), ulen = sizeof(user_timeout);
  // The event loop sets the options just after accept(), TCP_USER_TIMEOUT last; the descriptor
  // is visible here before that, so wait (bounded) for the loop to get to it.
  for (int attempt = 0; attempt < 200; ++attempt) {
    REQUIRE(::getsockopt(server_fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, &ulen) == 0);
    if (user_timeout != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(::getsockopt(server_fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &ilen) == 0);
  REQUIRE(::getsockopt(server_fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, &ilen) == 0);
  CHECK(keepalive == 1);
  CHECK(idle_s == 30);           // probes after 30 s of silence, not the kernel's 2 hours
  CHECK(user_timeout == 7000u);  // unacknowledged data or probes for the I/O timeout reset it
}
