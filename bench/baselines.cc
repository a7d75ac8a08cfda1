// The machine's limits for weightsync-bench: memcpy, our own loopback TCP
// stream, iperf3, ucx_perftest and a checkpoint file round trip. Every public
// function catches everything and reports a failure as gbps = NaN with a note;
// external tools run under wsutil::ChildProcess with a time limit.
#include "baselines.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "child_process.h"
#include "stats.h"

namespace wsbench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::uint64_t kTcpChunk = 4ull << 20;   // send() size for measure_tcp_raw
constexpr std::uint64_t kFileChunk = 8ull << 20;  // write()/read() size for the checkpoint
constexpr int kSocketTimeoutS = 30;
constexpr int kConnectAttempts = 5;
constexpr milliseconds kRetryPause{200};
constexpr milliseconds kServerStartPause{300};
constexpr milliseconds kUcxTimeLimit{120000};
constexpr long kTmpfsMagic = 0x01021994;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::runtime_error(errno_text(what, errno));
}

BaselineFigure failed(const std::string& note) {
  BaselineFigure figure;
  figure.note = note;
  return figure;
}

// An anonymous private mapping, pre-faulted with `fill` so no page fault lands in a timed region.
class MappedBuffer {
 public:
  MappedBuffer(std::uint64_t bytes, int fill) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw_errno("mmap of " + std::to_string(bytes) + " bytes");
    data_ = static_cast<char*>(p);
    std::memset(data_, fill, bytes);
  }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  ~MappedBuffer() { ::munmap(data_, bytes_); }
  char* data() { return data_; }
  std::uint64_t size() const { return bytes_; }

 private:
  std::uint64_t bytes_;
  char* data_ = nullptr;
};

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// ---- memcpy ---------------------------------------------------------------------------------------------

// Start of share `i` of `threads`, page-aligned so no two threads write the same page.
std::uint64_t share_begin(std::uint64_t bytes, int threads, int i) {
  if (i >= threads) return bytes;
  const std::uint64_t raw = bytes / static_cast<std::uint64_t>(threads) * static_cast<std::uint64_t>(i);
  return std::min(bytes, raw / 4096 * 4096);
}

double timed_copy(char* dst, const char* src, std::uint64_t bytes, int threads) {
  const auto start = Clock::now();
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) {
    const std::uint64_t b = share_begin(bytes, threads, i), e = share_begin(bytes, threads, i + 1);
    helpers.emplace_back([=] { std::memcpy(dst + b, src + b, e - b); });
  }
  std::memcpy(dst, src, share_begin(bytes, threads, 1));
  for (auto& t : helpers) t.join();
  return seconds_since(start);
}

// ---- loopback TCP ---------------------------------------------------------------------------------------

void set_timeouts(int fd) {
  timeval tv{kSocketTimeoutS, 0};
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    throw_errno("setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)");
  }
}

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// A listening socket on 127.0.0.1 with a kernel-chosen port.
int listen_loopback(std::uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  Fd guard(fd);
  sockaddr_in addr = loopback(0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) throw_errno("bind 127.0.0.1:0");
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw_errno("getsockname");
  if (::listen(fd, 1) != 0) throw_errno("listen");
  *port = ntohs(addr.sin_port);
  return guard.release();
}

void send_all(int fd, const char* data, std::uint64_t bytes) {
  std::uint64_t done = 0;
  while (done < bytes) {
    const std::size_t n = static_cast<std::size_t>(std::min(kTcpChunk, bytes - done));
    const ssize_t sent = ::send(fd, data + done, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) throw_errno("send");
    done += static_cast<std::uint64_t>(sent);
  }
}

void recv_all(int fd, char* data, std::uint64_t bytes) {
  std::uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::recv(fd, data + done, static_cast<std::size_t>(bytes - done), MSG_WAITALL);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) throw std::runtime_error("recv: connection closed by the peer");
    if (got < 0) throw_errno("recv");
    done += static_cast<std::uint64_t>(got);
  }
}

// ---- external tools -------------------------------------------------------------------------------------

std::optional<std::string> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream entries(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(entries, dir, ':')) {
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

// A port that was free a moment ago on 127.0.0.1 (bound to port 0, read back, closed).
std::uint16_t free_port() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw_errno("socket");
  sockaddr_in addr = loopback(0);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) throw_errno("bind");
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw_errno("getsockname");
  return ntohs(addr.sin_port);
}

// All of the child's stdout until EOF or `deadline`; *timed_out says which.
std::vector<std::string> read_all_lines(wsutil::ChildProcess& child, Clock::time_point deadline,
                                        bool* timed_out) {
  std::vector<std::string> lines;
  *timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      *timed_out = true;
      return lines;
    }
    auto line = child.read_line(left);
    if (!line) {
      *timed_out = Clock::now() >= deadline;
      return lines;
    }
    lines.push_back(std::move(*line));
  }
}

// Waits briefly for a child that should be finishing; kills it (and reaps it) if it does not.
std::optional<int> finish(wsutil::ChildProcess& child, milliseconds grace) {
  auto code = child.wait(grace);
  if (!code) {
    child.signal(SIGKILL);
    child.wait(milliseconds(2000));
  }
  return code;
}

// The "Final:" line of ucx_perftest: iterations, lat 50%, lat avg, lat overall, bw avg, bw overall, ...
// Fields are read with strtod, since a column can be "inf" (the average latency of a run with a stall).
std::optional<double> ucx_bandwidth_overall_mbps(const std::vector<std::string>& lines) {
  constexpr int kBandwidthOverallColumn = 5;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const auto pos = it->find("Final:");
    if (pos == std::string::npos) continue;
    std::istringstream fields(it->substr(pos + 6));
    std::string field;
    for (int column = 0; column <= kBandwidthOverallColumn; ++column) {
      if (!(fields >> field)) return std::nullopt;
    }
    char* end = nullptr;
    const double mbps = std::strtod(field.c_str(), &end);
    if (end == field.c_str() || *end != '\0' || !std::isfinite(mbps)) return std::nullopt;
    return mbps;
  }
  return std::nullopt;
}

// ---- checkpoint file ------------------------------------------------------------------------------------

// Creates `path` exclusively and unlinks it on scope exit, whatever happens.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd_.get() < 0) throw_errno("open " + path_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    fd_.reset();
    ::unlink(path_.c_str());
  }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  Fd fd_;
};

void write_all(int fd, const char* data, std::uint64_t bytes) {
  std::uint64_t done = 0;
  while (done < bytes) {
    const std::size_t n = static_cast<std::size_t>(std::min(kFileChunk, bytes - done));
    const ssize_t w = ::write(fd, data + done, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw_errno("write");
    if (w == 0) throw std::runtime_error("write: wrote nothing");
    done += static_cast<std::uint64_t>(w);
  }
}

void read_all(int fd, char* data, std::uint64_t bytes) {
  std::uint64_t done = 0;
  while (done < bytes) {
    const std::size_t n = static_cast<std::size_t>(std::min(kFileChunk, bytes - done));
    const ssize_t r = ::read(fd, data + done, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("read");
    if (r == 0) throw std::runtime_error("read: file shorter than written");
    done += static_cast<std::uint64_t>(r);
  }
}

// Fraction of the file's pages still in the page cache (mincore over a mapping); NaN if unknown.
double resident_fraction(int fd, std::uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return kNaN;
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t pages =
      (bytes + static_cast<std::uint64_t>(page) - 1) / static_cast<std::uint64_t>(page);
  std::vector<unsigned char> residency(pages);
  double fraction = kNaN;
  if (::mincore(p, bytes, residency.data()) == 0) {
    std::uint64_t resident = 0;
    for (unsigned char r : residency) resident += (r & 1u);
    fraction = static_cast<double>(resident) / static_cast<double>(pages);
  }
  ::munmap(p, bytes);
  return fraction;
}

struct RoundTrip {
  double seconds = 0;
  bool matches = true;
  double resident_after_evict = kNaN;  // forced variant only
};

// One checkpoint round trip into a fresh file; throws on any I/O error (the file is removed regardless).
RoundTrip checkpoint_once(const std::string& path, MappedBuffer& source, MappedBuffer& target, bool forced) {
  TempFile file(path);
  const std::uint64_t bytes = source.size();
  std::memset(target.data(), 0, bytes);  // a read that fills nothing must not pass the check
  RoundTrip trip;

  const auto write_start = Clock::now();
  write_all(file.fd(), source.data(), bytes);
  if (forced && ::fsync(file.fd()) != 0) throw_errno("fsync");
  const double write_s = seconds_since(write_start);

  if (forced) {
    const int rc = ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_DONTNEED);
    if (rc != 0) throw std::runtime_error(errno_text("posix_fadvise(DONTNEED)", rc));
    trip.resident_after_evict = resident_fraction(file.fd(), bytes);
  }
  if (::lseek(file.fd(), 0, SEEK_SET) != 0) throw_errno("lseek");

  const auto read_start = Clock::now();
  read_all(file.fd(), target.data(), bytes);
  const double read_s = seconds_since(read_start);

  trip.seconds = write_s + read_s;
  trip.matches = std::memcmp(source.data(), target.data(), bytes) == 0;
  return trip;
}

BaselineFigure checkpoint_variant(std::uint64_t bytes, const std::string& directory, int repetitions,
                                  bool forced, MappedBuffer& source, MappedBuffer& target, int* counter) {
  BaselineFigure figure;
  figure.note = forced ? "write + fsync, evict, read from disk" : "write + read through the page cache";
  try {
    const std::string prefix = directory + "/ws-bench-checkpoint-" + std::to_string(::getpid()) + "-";
    if (!forced) checkpoint_once(prefix + std::to_string((*counter)++), source, target, false);  // warm-up
    std::vector<double> gbps;
    int mismatches = 0;
    double max_resident = 0;
    for (int i = 0; i < repetitions; ++i) {
      const RoundTrip trip = checkpoint_once(prefix + std::to_string((*counter)++), source, target, forced);
      if (!trip.matches) ++mismatches;
      if (!std::isnan(trip.resident_after_evict)) {
        max_resident = std::max(max_resident, trip.resident_after_evict);
      }
      gbps.push_back(static_cast<double>(bytes) / 1e9 / trip.seconds);
    }
    figure.gbps = median(gbps);
    figure.repetitions = repetitions;
    if (mismatches > 0) {
      figure.note += "; read-back MISMATCH in " + std::to_string(mismatches) + " of " +
                     std::to_string(repetitions) + " repetitions";
    }
    if (forced && max_resident > 0.01) {
      figure.note += "; up to " + std::to_string(static_cast<int>(std::lround(max_resident * 100))) +
                     "% of the file stayed cached after POSIX_FADV_DONTNEED";
    }
    struct statfs fs {};
    if (forced && ::statfs(directory.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) == kTmpfsMagic) {
      figure.note += "; " + directory + " is tmpfs: nothing reaches a disk";
    }
  } catch (const std::exception& e) {
    figure.gbps = kNaN;
    figure.repetitions = 0;
    figure.note += " failed in " + directory + ": " + e.what();
  }
  return figure;
}

bool valid_arguments(std::uint64_t bytes, int repetitions, BaselineFigure* figure) {
  if (bytes == 0 || repetitions < 1) {
    *figure = failed("nothing to measure (bytes = " + std::to_string(bytes) +
                     ", repetitions = " + std::to_string(repetitions) + ")");
    return false;
  }
  return true;
}

}  // namespace

BaselineFigure measure_memcpy(std::uint64_t bytes, int threads, int repetitions) {
  const std::string note = "memcpy, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  try {
    BaselineFigure figure;
    if (!valid_arguments(bytes, repetitions, &figure)) return figure;
    if (threads < 1) return failed(note + ": threads must be >= 1");
    MappedBuffer src(bytes, 0x5a), dst(bytes, 0);
    timed_copy(dst.data(), src.data(), bytes, threads);  // warm-up
    std::vector<double> gbps;
    for (int i = 0; i < repetitions; ++i) {
      gbps.push_back(static_cast<double>(bytes) / 1e9 / timed_copy(dst.data(), src.data(), bytes, threads));
    }
    figure.gbps = median(gbps);
    figure.repetitions = repetitions;
    figure.note = note;
    return figure;
  } catch (const std::exception& e) {
    return failed(note + " failed: " + e.what());
  } catch (...) {
    return failed(note + " failed");
  }
}

BaselineFigure measure_tcp_raw(std::uint64_t bytes, int repetitions) {
  const std::string note = "own sender/receiver, one loopback TCP stream";
  try {
    BaselineFigure figure;
    if (!valid_arguments(bytes, repetitions, &figure)) return figure;
    MappedBuffer send_buffer(bytes, 0x5a), recv_buffer(bytes, 0);

    std::uint16_t port = 0;
    Fd listener(listen_loopback(&port));
    Fd receiver(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (receiver.get() < 0) throw_errno("socket");
    set_timeouts(receiver.get());
    sockaddr_in addr = loopback(port);
    if (::connect(receiver.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      throw_errno("connect");
    Fd sender(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (sender.get() < 0) throw_errno("accept");
    set_timeouts(sender.get());
    listener.reset();
    const int one = 1;
    ::setsockopt(receiver.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // the 1-byte "go"

    const int transfers = repetitions + 1;  // the first is the warm-up
    std::string sender_error;
    std::thread sender_thread([&] {
      try {
        for (int i = 0; i < transfers; ++i) {
          char go = 0;
          recv_all(sender.get(), &go, 1);
          send_all(sender.get(), send_buffer.data(), bytes);
        }
      } catch (const std::exception& e) {
        sender_error = e.what();
        ::shutdown(sender.get(), SHUT_RDWR);  // the receiver sees EOF instead of waiting for its timeout
      }
    });

    std::vector<double> gbps;
    std::string receiver_error;
    try {
      for (int i = 0; i < transfers; ++i) {
        const char go = 'g';
        const auto start = Clock::now();
        send_all(receiver.get(), &go, 1);
        recv_all(receiver.get(), recv_buffer.data(), bytes);
        const double s = seconds_since(start);
        if (i > 0) gbps.push_back(static_cast<double>(bytes) / 1e9 / s);
      }
    } catch (const std::exception& e) {
      receiver_error = e.what();
      ::shutdown(receiver.get(), SHUT_RDWR);  // the sender sees EOF / EPIPE
    }
    sender_thread.join();
    if (!sender_error.empty() || !receiver_error.empty()) {
      return failed(note + " failed: " + (sender_error.empty() ? "" : "sender: " + sender_error) +
                    (sender_error.empty() || receiver_error.empty() ? "" : "; ") +
                    (receiver_error.empty() ? "" : "receiver: " + receiver_error));
    }
    if (std::memcmp(send_buffer.data(), recv_buffer.data(), bytes) != 0) {
      return failed(note + ": received bytes differ from the sent ones");
    }
    figure.gbps = median(gbps);
    figure.repetitions = repetitions;
    figure.note = note;
    return figure;
  } catch (const std::exception& e) {
    return failed(note + " failed: " + e.what());
  } catch (...) {
    return failed(note + " failed");
  }
}

BaselineFigure measure_iperf3(double seconds) {
  char seconds_text[32];
  std::snprintf(seconds_text, sizeof(seconds_text), "%g", seconds);
  const std::string note = std::string("iperf3 -c 127.0.0.1 -t ") + seconds_text + ", one stream";
  try {
    const auto iperf3 = find_on_path("iperf3");
    if (!iperf3) return failed("iperf3 not installed (apt-get install iperf3)");
    if (!(seconds > 0)) return failed(note + ": seconds must be > 0");
    std::optional<wsutil::ChildProcess> server;
    std::string port;
    std::string error = "no output";
    for (int attempt = 0; attempt < kConnectAttempts; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(kRetryPause);
      if (!server || server->wait(milliseconds(0))) {  // first attempt, or the server exited (port taken?)
        server.reset();
        port = std::to_string(free_port());
        server.emplace(wsutil::ChildProcess::spawn({*iperf3, "-s", "-1", "-p", port}));
        std::this_thread::sleep_for(kServerStartPause);
      }
      auto client =
          wsutil::ChildProcess::spawn({*iperf3, "-c", "127.0.0.1", "-p", port, "-t", seconds_text, "-J"});
      bool timed_out = false;
      const auto deadline = Clock::now() + milliseconds(static_cast<long long>(seconds * 1000) + 20000);
      const auto lines = read_all_lines(client, deadline, &timed_out);
      const auto code = finish(client, timed_out ? milliseconds(0) : milliseconds(5000));
      if (timed_out) {
        error = "timed out after " + std::to_string(static_cast<long long>(seconds) + 20) + " s, killed";
        break;
      }
      std::string text;
      for (const auto& line : lines) text += line + "\n";
      const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (json.is_discarded()) {
        error = "unparsable output (exit code " + (code ? std::to_string(*code) : std::string("?")) + ")";
        break;
      }
      if (json.contains("error")) {
        error = json["error"].is_string() ? json["error"].get<std::string>() : json["error"].dump();
        if (error.find("unable to connect") != std::string::npos) continue;  // server not listening yet
        break;
      }
      const auto* bps = &json;
      for (const char* key : {"end", "sum_received", "bits_per_second"}) {
        if (!bps->is_object() || !bps->contains(key)) {
          bps = nullptr;
          break;
        }
        bps = &(*bps)[key];
      }
      if (bps == nullptr || !bps->is_number()) {
        error = "no end.sum_received.bits_per_second in its output";
        break;
      }
      finish(*server, milliseconds(5000));
      BaselineFigure figure;
      figure.gbps = bps->get<double>() / 8e9;
      figure.repetitions = 1;
      figure.note = note;
      return figure;
    }
    if (server) finish(*server, milliseconds(0));
    return failed(note + " failed: " + error);
  } catch (const std::exception& e) {
    return failed(note + " failed: " + e.what());
  } catch (...) {
    return failed(note + " failed");
  }
}

BaselineFigure measure_ucx_perftest(const std::string& tls, std::uint64_t bytes, int repetitions) {
  const std::string note =
      "ucx_perftest -t ucp_get, UCX_TLS=" + tls + ", " + std::to_string(repetitions) + " iterations";
  try {
    const auto perftest = find_on_path("ucx_perftest");
    if (!perftest) return failed("ucx_perftest not installed (apt-get install ucx-utils)");
    BaselineFigure figure;
    if (!valid_arguments(bytes, repetitions, &figure)) return figure;
    const std::vector<std::string> env = {"UCX_TLS=" + tls};
    const std::string warmup = bytes >= (256ull << 20) ? "2" : "3";
    const auto deadline = Clock::now() + kUcxTimeLimit;

    std::optional<wsutil::ChildProcess> server;
    std::string port;
    std::string error = "no Final: line in its output";
    for (int attempt = 0; attempt < kConnectAttempts; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(kRetryPause);
      if (!server || server->wait(milliseconds(0))) {  // first attempt, or the server exited
        server.reset();
        port = std::to_string(free_port());
        server.emplace(wsutil::ChildProcess::spawn({*perftest, "-p", port}, env));
        std::this_thread::sleep_for(kServerStartPause);
      }
      auto client = wsutil::ChildProcess::spawn(
          {*perftest, "127.0.0.1", "-p", port, "-t", "ucp_get", "-s", std::to_string(bytes), "-n",
           std::to_string(repetitions), "-w", warmup},
          env);
      bool timed_out = false;
      const auto lines = read_all_lines(client, deadline, &timed_out);
      const auto code = finish(client, timed_out ? milliseconds(0) : milliseconds(5000));
      if (timed_out) {
        error = "timed out after " + std::to_string(kUcxTimeLimit.count() / 1000) + " s, killed";
        break;
      }
      const auto mbps = ucx_bandwidth_overall_mbps(lines);
      if (mbps && code && *code == 0) {
        finish(*server, milliseconds(5000));
        figure.gbps = *mbps * 1048576.0 / 1e9;
        figure.repetitions = repetitions;
        figure.note = note;
        return figure;
      }
      error = "exit code " + (code ? std::to_string(*code) : std::string("?")) +
              (mbps ? "" : ", no Final: line") + " (its stderr says why)";
      if (!lines.empty()) break;  // it connected and printed its table: a real failure, not a slow server
    }
    if (server) finish(*server, milliseconds(0));
    return failed(note + " failed: " + error);
  } catch (const std::exception& e) {
    return failed(note + " failed: " + e.what());
  } catch (...) {
    return failed(note + " failed");
  }
}

CheckpointFigures measure_checkpoint_file(std::uint64_t bytes, const std::string& directory, int repetitions,
                                          bool forced_to_disk) {
  CheckpointFigures figures;
  try {
    if (!valid_arguments(bytes, repetitions, &figures.page_cache)) {
      figures.forced_to_disk = figures.page_cache;
      return figures;
    }
    MappedBuffer source(bytes, 0), target(bytes, 0);
    // A position-dependent pattern, so a misplaced chunk fails the read-back check.
    auto* words = reinterpret_cast<std::uint64_t*>(source.data());
    for (std::uint64_t i = 0; i < bytes / sizeof(std::uint64_t); ++i) words[i] = i * 0x9E3779B97F4A7C15ull;
    int counter = 0;
    figures.page_cache = checkpoint_variant(bytes, directory, repetitions, false, source, target, &counter);
    if (forced_to_disk) {
      figures.forced_to_disk =
          checkpoint_variant(bytes, directory, repetitions, true, source, target, &counter);
    } else {
      figures.forced_to_disk.note = "not measured at this size";
    }
  } catch (const std::exception& e) {
    figures.page_cache = failed("checkpoint in " + directory + " failed: " + e.what());
    figures.forced_to_disk = figures.page_cache;
  } catch (...) {
    figures.page_cache = failed("checkpoint in " + directory + " failed");
    figures.forced_to_disk = figures.page_cache;
  }
  return figures;
}

}  // namespace wsbench
