// ChildProcess: a real child process with pipes on stdin and stdout, for the
// multi-process tests and weightsync-bench. read_line() waits with a timeout;
// the destructor kills and reaps the child so a failure never leaves one
// behind. Not thread-safe: one owner thread. spawn() throws std::runtime_error.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "line_stream.h"

namespace wsutil {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv; stderr is inherited. `extra_env`
  // entries ("NAME=value") are added to (or override) this process's environment.
  static ChildProcess spawn(const std::vector<std::string>& argv,
                            const std::vector<std::string>& extra_env = {});

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // The next line of stdout without its newline; nullopt on EOF or timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // Reads lines until one starts with `prefix`; returns the rest of it.
  std::optional<std::string> wait_for(const std::string& prefix, std::chrono::milliseconds timeout);
  // Writes `line` and a newline to the child's stdin; throws std::runtime_error
  // if the child closed it.
  void write_line(const std::string& line);
  void close_stdin();
  void signal(int sig);
  // Exit code, or 128 + signal; nullopt if it did not exit in time.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  ChildProcess(pid_t pid, int in_fd, int out_fd) : pid_(pid), io_(out_fd, in_fd) {}
  pid_t pid_ = -1;
  LineStream io_;  // reads the child's stdout, writes its stdin
  bool reaped_ = false;
};

}  // namespace wsutil
