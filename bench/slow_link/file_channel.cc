#include "file_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common.h"

namespace slowlink {

namespace {

constexpr std::uint32_t kRequestMagic = 0x51435357;  // "WSCQ"
constexpr std::uint32_t kAnswerMagic = 0x41435357;   // "WSCA"

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

void set_timeouts(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void send_all(int fd, const void* data, std::size_t bytes, const char* what) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw sys_error(std::string("sending ") + what);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void recv_all(int fd, void* data, std::size_t bytes, const char* what) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw sys_error(std::string("receiving ") + what);
    if (n == 0)
      throw std::runtime_error(std::string("receiving ") + what + ": the peer closed the connection");
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

sockaddr_in ipv4(const std::string& host, std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw std::runtime_error("'" + host + "' is not an IPv4 address (the checkpoint server is IPv4 only)");
  }
  return addr;
}

}  // namespace

FileServer::FileServer(const std::string& bind_host, FileMaker maker, double io_timeout_s)
    : maker_(std::move(maker)), io_timeout_s_(io_timeout_s) {
  sockaddr_in addr = ipv4(bind_host, 0);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw sys_error("checkpoint server: socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw sys_error("checkpoint server: bind " + bind_host);
  }
  if (::listen(fd.get(), 4) != 0) throw sys_error("checkpoint server: listen");
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  address_ = bind_host + ":" + std::to_string(ntohs(addr.sin_port));
  listen_fd_ = fd.release();
  thread_ = std::thread([this] { run(); });
}

FileServer::~FileServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string FileServer::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void FileServer::run() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int n = ::poll(&p, 1, 100);
    if (n <= 0) continue;
    Fd conn(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    try {
      serve(conn.get());
      ++served_;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = e.what();
      std::fprintf(stderr, "trainer: checkpoint server: %s\n", e.what());
    }
  }
}

void FileServer::serve(int fd) {
  set_timeouts(fd, io_timeout_s_);
  std::uint8_t request[16];
  recv_all(fd, request, sizeof(request), "the checkpoint request");
  if (get32(request) != kRequestMagic) throw std::runtime_error("not a checkpoint request");
  const std::uint64_t version = get64(request + 8);
  std::uint8_t answer[24];
  put32(answer, kAnswerMagic);
  MadeFile made;
  std::string error;
  try {
    made = maker_(version);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    put32(answer + 4, 1);
    put64(answer + 8, 0);
    put64(answer + 16, error.size());
    send_all(fd, answer, sizeof(answer), "the checkpoint answer");
    send_all(fd, error.data(), error.size(), "the checkpoint error");
    return;
  }
  Fd file(::open(made.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) throw sys_error("opening " + made.path);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) throw sys_error("stat " + made.path);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  put32(answer + 4, 0);
  put64(answer + 8, static_cast<std::uint64_t>(made.write_seconds * 1e9));
  put64(answer + 16, size);
  send_all(fd, answer, sizeof(answer), "the checkpoint answer");
  off_t offset = 0;
  while (static_cast<std::uint64_t>(offset) < size) {
    const ssize_t n = ::sendfile(fd, file.get(), &offset, size - static_cast<std::uint64_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw sys_error("sending " + made.path);
  }
  // Wait for the client to close (it has everything): the file is then removed.
  char byte;
  (void)::recv(fd, &byte, 1, 0);
  ::unlink(made.path.c_str());
}

FetchResult fetch_file(const std::string& address, std::uint64_t version, const std::string& dest_path,
                       double timeout_s) {
  std::string host;
  std::uint16_t port = 0;
  split_address(address, &host, &port);
  sockaddr_in addr = ipv4(host, port);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw sys_error("checkpoint client: socket");
  set_timeouts(fd.get(), timeout_s);  // SO_SNDTIMEO bounds connect() too
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw sys_error("connecting to the checkpoint server " + address);
  }
  std::uint8_t request[16];
  put32(request, kRequestMagic);
  put32(request + 4, 0);
  put64(request + 8, version);
  send_all(fd.get(), request, sizeof(request), "the checkpoint request");
  std::uint8_t answer[24];
  recv_all(fd.get(), answer, sizeof(answer), "the checkpoint answer");
  if (get32(answer) != kAnswerMagic) throw std::runtime_error("the checkpoint server sent a bad answer");
  FetchResult out;
  out.write_seconds = static_cast<double>(get64(answer + 8)) * 1e-9;
  const std::uint64_t size = get64(answer + 16);
  if (get32(answer + 4) != 0) {
    std::string message(std::min<std::uint64_t>(size, 1u << 16), '\0');
    recv_all(fd.get(), message.data(), message.size(), "the checkpoint error");
    throw std::runtime_error("the checkpoint server failed: " + message);
  }
  Fd file(::open(dest_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (file.get() < 0) throw sys_error("creating " + dest_path);
  std::vector<char> buffer(1u << 20);
  std::uint64_t got = 0;
  while (got < size) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - got));
    const ssize_t n = ::recv(fd.get(), buffer.data(), want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw sys_error("receiving the checkpoint file");
    if (n == 0)
      throw std::runtime_error("the checkpoint server closed after " + std::to_string(got) + " of " +
                               std::to_string(size) + " bytes");
    const char* p = buffer.data();
    std::size_t left = static_cast<std::size_t>(n);
    while (left > 0) {
      const ssize_t w = ::write(file.get(), p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw sys_error("writing " + dest_path);
      p += w;
      left -= static_cast<std::size_t>(w);
    }
    got += static_cast<std::uint64_t>(n);
  }
  if (::fsync(file.get()) != 0) throw sys_error("fsync " + dest_path);
  if (::close(file.release()) != 0) throw sys_error("closing " + dest_path);
  out.bytes = got;
  return out;
}

}  // namespace slowlink
