// ws_channel_attacker: the other process of the trajectory-channel attack
// tests (channel_attack_test.cc). A raw ZeroMQ PUSH socket that knows nothing
// of the channel's rules: it connects to ENDPOINT and sends what it is told.
//
//   ws_channel_attacker ENDPOINT frames COUNT MIB HOLD_MS
//     raw ZMTP 3.0 over TCP (NULL mechanism, as a PUSH peer; libzmq itself
//     would hold back an unfinished message): COUNT frames of MIB MiB each,
//     every one marked MORE (a message that never ends), then waits HOLD_MS
//     and exits. ENDPOINT is tcp://127.0.0.1:PORT here.
//   ws_channel_attacker ENDPOINT files REPEAT HOLD_MS FILE...
//     the message whose frames are the FILEs' bytes, REPEAT times, then waits.
//
// Options before ENDPOINT: --curve SERVER_PUBLIC CLIENT_PUBLIC CLIENT_SECRET
// (40-character Z85 keys) to speak CURVE as a client.
// Prints "sent N" (messages, or frames for `frames`) on stdout; exit 0, or 2
// on a usage error. Every loop is bounded by its count and a 30 s deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ws_channel_attacker [--curve SPUB CPUB CSEC] ENDPOINT frames COUNT MIB HOLD_MS\n"
               "       ws_channel_attacker [--curve SPUB CPUB CSEC] ENDPOINT files REPEAT HOLD_MS FILE...\n");
  return 2;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool write_all(int fd, const char* data, std::size_t size) {
  for (int i = 0; size > 0 && i < 1000000; ++i) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return size == 0;
}

// Raw ZMTP: greeting, READY, then `count` MORE frames of `mib` MiB.
long raw_more_frames(const std::string& endpoint, long count, std::size_t mib) {
  const auto colon = endpoint.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 0;
  std::string greeting(64, '\0');
  greeting[0] = '\xff';
  greeting[9] = '\x7f';
  greeting[10] = 3;
  greeting.replace(12, 4, "NULL");
  const std::string ready_body = std::string("\x05READY\x0bSocket-Type\0\0\0\x04PUSH", 6 + 12 + 4 + 4);
  const std::string ready = std::string("\x04") + static_cast<char>(ready_body.size()) + ready_body;
  if (!write_all(fd, greeting.data(), greeting.size()) || !write_all(fd, ready.data(), ready.size()))
    return 0;
  const std::uint64_t size = static_cast<std::uint64_t>(mib) << 20;
  std::string header = "\x03";
  for (int shift = 56; shift >= 0; shift -= 8) header += static_cast<char>((size >> shift) & 0xff);
  const std::string body(1 << 20, 'A');
  long sent = 0;
  for (long i = 0; i < count && i < 4096; ++i) {
    bool ok = write_all(fd, header.data(), header.size());
    for (std::size_t m = 0; ok && m < mib; ++m) ok = write_all(fd, body.data(), body.size());
    if (!ok) break;
    ++sent;
  }
  return sent;  // the descriptor stays open until exit
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::push};
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::sndtimeo, 5000);
  std::size_t at = 0;
  if (args.size() >= 4 && args[0] == "--curve") {
    socket.set(zmq::sockopt::curve_serverkey, args[1]);
    socket.set(zmq::sockopt::curve_publickey, args[2]);
    socket.set(zmq::sockopt::curve_secretkey, args[3]);
    at = 4;
  }
  if (args.size() < at + 4) return usage();
  const std::string endpoint = args[at];
  const std::string mode = args[at + 1];
  const long count = std::atol(args[at + 2].c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  if (mode != "frames") socket.connect(endpoint);
  long sent = 0;
  long hold_ms = 0;
  if (mode == "frames" && args.size() == at + 5) {
    hold_ms = std::atol(args[at + 4].c_str());
    sent = raw_more_frames(endpoint, count, static_cast<std::size_t>(std::atol(args[at + 3].c_str())));
  } else if (mode == "files" && args.size() > at + 4) {
    hold_ms = std::atol(args[at + 3].c_str());
    std::vector<std::string> frames;
    for (std::size_t i = at + 4; i < args.size(); ++i) frames.push_back(read_file(args[i].c_str()));
    for (long i = 0; i < count && i < 1000000 && std::chrono::steady_clock::now() < deadline; ++i) {
      bool ok = true;
      for (std::size_t f = 0; f < frames.size() && ok; ++f) {
        const auto flags = f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        ok = socket.send(zmq::buffer(frames[f]), flags).has_value();
      }
      if (!ok) break;
      ++sent;
    }
  } else {
    return usage();
  }
  std::printf("sent %ld\n", sent);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(hold_ms, 30000L)));
  return 0;
}
