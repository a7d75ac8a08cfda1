// recv_iov's wake mark (net/socket.h, SO_RCVLOWAT; docs/perf/relay_cpu.md):
// over real loopback TCP, a transfer wakes the reader about once per mark
// instead of once per arrival, every byte still lands in order, the socket
// wakes on a frame's first byte again afterwards, a sender slower than the
// mark is progress and not a stall, and a silent one still times out.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "net/socket.h"

using namespace weightsync;
using namespace weightsync::detail;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kMark = 1u << 20;

struct Pair {
  Socket client;  // the receiver
  Socket server;  // the sender
};

Pair connected_pair() {
  auto listener = listen_tcp("127.0.0.1", 0);
  REQUIRE(listener.ok());
  auto port = local_port(*listener);
  REQUIRE(port.ok());
  auto client = connect_tcp(HostPort{"127.0.0.1", *port}, Deadline::after(std::chrono::seconds(2)));
  REQUIRE(client.ok());
  auto server = accept_tcp(*listener, Deadline::after(std::chrono::seconds(2)), nullptr);
  REQUIRE(server.ok());
  return Pair{std::move(*client), std::move(*server)};
}

std::uint8_t byte_at(std::size_t i) {
  return static_cast<std::uint8_t>((i * 131u + (i >> 12)) & 0xff);
}

// Sends `total` pattern bytes in `piece`-byte sends, `gap` apart.
std::thread paced_sender(const Socket& socket, std::size_t total, std::size_t piece,
                         std::chrono::milliseconds gap) {
  return std::thread([&socket, total, piece, gap] {
    std::vector<std::uint8_t> data(total);
    for (std::size_t i = 0; i < total; ++i) data[i] = byte_at(i);
    for (std::size_t at = 0; at < total; at += piece) {
      const std::size_t n = std::min(piece, total - at);
      if (!send_all(socket, data.data() + at, n, Deadline::after(std::chrono::seconds(5)), "receiver").ok()) return;
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
    }
  });
}

int receive_lowat(const Socket& socket) {
  int value = -1;
  socklen_t len = sizeof(value);
  ::getsockopt(socket.fd(), SOL_SOCKET, SO_RCVLOWAT, &value, &len);
  return value;
}

}  // namespace

TEST_CASE("tcp receive: with a wake mark every byte lands in order, with few wakeups, and frames wake at once after",
          "[tcp-wake]") {
  Pair pair = connected_pair();
  // Not a multiple of the mark or of a page; three destinations of odd sizes.
  const std::size_t total = 3 * kMark + 4097;
  std::vector<std::uint8_t> out(total, 0);
  iovec iov[3] = {{out.data(), 777777}, {out.data() + 777777, 1u << 20}, {out.data() + 777777 + (1u << 20), 0}};
  iov[2].iov_len = total - 777777 - (1u << 20);
  std::thread sender = paced_sender(pair.server, total, 64u << 10, std::chrono::milliseconds(2));
  std::size_t calls = 0, received = 0;
  const auto start = Clock::now();
  Status s = recv_iov(pair.client, iov, 3, 3000, "sender",
                      [&](const void*, std::size_t n) {
                        ++calls;
                        received += n;
                      },
                      kMark);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  sender.join();
  INFO(s.to_string());
  REQUIRE(s.ok());
  CHECK(received == total);
  // The mark follows the bytes left: the 4097-byte tail is not waited for
  // until the 3 s stall bound (about 0.1 s of paced sends in all).
  INFO("took " << took << " ms");
  CHECK(took < 1500);
  std::size_t bad = total;
  for (std::size_t i = 0; i < total && bad == total; ++i) {
    if (out[i] != byte_at(i)) bad = i;
  }
  CHECK(bad == total);
  // 52 paced 64 KiB sends: without the mark about one wakeup (and one
  // callback per destination piece) each; with it a handful.
  INFO("on_bytes calls: " << calls);
  CHECK(calls <= 16);
  // Back to waking on the first byte: an 8-byte frame is seen at once.
  CHECK(receive_lowat(pair.client) == 1);
  const std::uint64_t frame = 42;
  REQUIRE(send_all(pair.server, &frame, sizeof(frame), Deadline::after(std::chrono::seconds(1)), "receiver").ok());
  CHECK(wait_readable(pair.client, Deadline::after(std::chrono::milliseconds(500)), "sender").ok());
}

TEST_CASE("tcp receive: a sender slower than the wake mark is progress, a silent one times out within 2 x stall",
          "[tcp-wake]") {
  SECTION("slow: 32 KiB every 100 ms against a 250 ms stall bound and a 192 KiB transfer") {
    Pair pair = connected_pair();
    const std::size_t total = 192u << 10;
    std::vector<std::uint8_t> out(total, 0);
    iovec iov{out.data(), total};
    std::thread sender = paced_sender(pair.server, total, 32u << 10, std::chrono::milliseconds(100));
    Status s = recv_iov(pair.client, &iov, 1, 250, "sender", nullptr, kMark);
    sender.join();
    INFO(s.to_string());
    REQUIRE(s.ok());
    CHECK(out[total - 1] == byte_at(total - 1));
    CHECK(receive_lowat(pair.client) == 1);
  }
  SECTION("silent: 1000 bytes of 2000, then nothing") {
    Pair pair = connected_pair();
    std::vector<std::uint8_t> out(2000, 0);
    iovec iov{out.data(), out.size()};
    std::thread sender = paced_sender(pair.server, 1000, 1000, std::chrono::milliseconds(0));
    sender.join();
    const auto start = Clock::now();
    Status s = recv_iov(pair.client, &iov, 1, 200, "sender", nullptr, kMark);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    INFO(s.to_string() << " after " << took << " ms");
    CHECK(s.code() == ErrorCode::kTimeout);
    CHECK(took >= 190);
    CHECK(took < 2 * 200 + 300);
    CHECK(receive_lowat(pair.client) == 1);
  }
}
