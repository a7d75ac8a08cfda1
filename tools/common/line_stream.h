// LineStream: newline-terminated text lines over a pair of file descriptors
// (a child's pipes, a socket, or this process's stdin/stdout), with a timeout
// on every read. Used by ChildProcess and by weightsync-bench's control
// protocol. Owns (closes) the descriptors it is given. One thread at a time.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace wsutil {

class LineStream {
 public:
  LineStream() = default;
  // `read_fd` and `write_fd` may be equal (a socket); both are closed at destruction.
  LineStream(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  LineStream(LineStream&& other) noexcept;
  LineStream& operator=(LineStream&& other) noexcept;
  LineStream(const LineStream&) = delete;
  LineStream& operator=(const LineStream&) = delete;
  ~LineStream();

  // The next line without its newline; nullopt on end of stream, error or timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // Writes `line` and a newline; false if the other end is gone. Never raises SIGPIPE.
  bool write_line(const std::string& line);
  void close_write();
  bool valid() const { return read_fd_ >= 0; }

 private:
  void reset() noexcept;
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::string buffer_;
};

}  // namespace wsutil
