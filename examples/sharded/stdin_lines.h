// Lines from this process's stdin with a timeout (poll + read), so a trainer
// can publish on a clock and still hear "start T" and "quit" from whoever
// launched it. One thread.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace sharded {

class StdinLines {
 public:
  // The next line (without its newline), or nullopt on timeout or end of input
  // (then closed() is true). A zero timeout only looks.
  std::optional<std::string> read(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      if (closed_) return std::nullopt;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{0, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      char chunk[512];
      const ssize_t n = ::read(0, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        closed_ = true;
        if (!buffer_.empty()) {  // a last line without its newline
          std::string line;
          line.swap(buffer_);
          return line;
        }
        return std::nullopt;
      }
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  bool closed() const { return closed_; }

 private:
  std::string buffer_;
  bool closed_ = false;
};

}  // namespace sharded
