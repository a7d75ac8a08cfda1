// LineStream over poll(2) and read/write (send with MSG_NOSIGNAL on sockets).
#include "line_stream.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

namespace wsutil {
namespace {

// write(2) to a pipe without SIGPIPE, for this thread only: SIGPIPE is
// blocked around the write, and one the write raised (EPIPE) is taken off the
// thread's pending set with sigtimedwait before the old mask comes back. The
// process-wide disposition is never touched, so other threads are unaffected.
ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) {
  sigset_t pipe_only;
  sigset_t old_mask;
  sigset_t pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigpending(&pending);
  const bool already_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  const ssize_t n = ::write(fd, data, size);
  const int saved_errno = errno;
  if (n < 0 && saved_errno == EPIPE && !already_pending) {
    const struct timespec no_wait {};
    while (sigtimedwait(&pipe_only, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = saved_errno;
  return n;
}

}  // namespace

LineStream::LineStream(LineStream&& other) noexcept
    : read_fd_(other.read_fd_), write_fd_(other.write_fd_), buffer_(std::move(other.buffer_)) {
  other.read_fd_ = other.write_fd_ = -1;
}

LineStream& LineStream::operator=(LineStream&& other) noexcept {
  if (this != &other) {
    reset();
    read_fd_ = other.read_fd_;
    write_fd_ = other.write_fd_;
    buffer_ = std::move(other.buffer_);
    other.read_fd_ = other.write_fd_ = -1;
  }
  return *this;
}

LineStream::~LineStream() {
  reset();
}

void LineStream::reset() noexcept {
  if (write_fd_ >= 0 && write_fd_ != read_fd_) ::close(write_fd_);
  if (read_fd_ >= 0) ::close(read_fd_);
  read_fd_ = write_fd_ = -1;
  buffer_.clear();
}

std::optional<std::string> LineStream::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (read_fd_ < 0) return std::nullopt;
    // Rounded up, and polled at least once: a timeout under 1 ms still reads
    // what is already there.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{read_fd_, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      continue;
    }
    char chunk[4096];
    ssize_t n = ::read(read_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

bool LineStream::write_line(const std::string& line) {
  if (write_fd_ < 0) return false;
  const std::string data = line + "\n";
  struct stat st {};
  const bool socket = ::fstat(write_fd_, &st) == 0 && S_ISSOCK(st.st_mode);
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n;
    if (socket) {
      n = ::send(write_fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    } else {
      // A pipe whose reader is gone raises SIGPIPE; keep it off this thread.
      n = write_without_sigpipe(write_fd_, data.data() + done, data.size() - done);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void LineStream::close_write() {
  if (write_fd_ >= 0 && write_fd_ != read_fd_) {
    ::close(write_fd_);
  } else if (write_fd_ >= 0) {
    ::shutdown(write_fd_, SHUT_WR);
  }
  write_fd_ = -1;
}

}  // namespace wsutil
