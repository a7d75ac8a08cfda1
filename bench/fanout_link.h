// A fanout role process as the orchestrator sees it: a ChildProcess started
// through `testbed.sh exec`, answering the lines of fanout.h. expect() throws
// FanoutError on ERROR, a wrong answer or a timeout; the destructor sends QUIT
// and kills the process if it does not exit within 10 s. One thread.
#pragma once

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.h"

namespace wsbench {

struct FanoutError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RoleLink {
 public:
  RoleLink(std::string who, const std::vector<std::string>& argv, const std::vector<std::string>& env)
      : who_(std::move(who)), child_(wsutil::ChildProcess::spawn(argv, env)) {}
  ~RoleLink() {
    try {
      child_.write_line("QUIT");
    } catch (...) {
    }
    if (!child_.wait(std::chrono::seconds(10))) {
      child_.signal(SIGKILL);
      (void)child_.wait(std::chrono::seconds(10));
    }
  }
  RoleLink(const RoleLink&) = delete;
  RoleLink& operator=(const RoleLink&) = delete;

  const std::string& who() const { return who_; }
  void send(const std::string& line) {
    try {
      child_.write_line(line);
    } catch (const std::exception&) {
      throw FanoutError(who_ + " is gone (see its messages above)");
    }
  }
  // The rest of the next line, which must start with `prefix`.
  std::string expect(const std::string& prefix, std::chrono::milliseconds timeout) {
    auto line = child_.read_line(timeout);
    if (!line) {
      throw FanoutError(who_ + " did not answer " + prefix + "within " +
                        std::to_string(timeout.count() / 1000) + " s (or exited; see its messages above)");
    }
    if (line->rfind("ERROR ", 0) == 0) throw FanoutError(who_ + ": " + line->substr(6));
    if (line->rfind(prefix, 0) != 0)
      throw FanoutError(who_ + " answered '" + *line + "', expected " + prefix);
    return line->substr(prefix.size());
  }
  double cpu_seconds() {
    send("CPU");
    return std::stod(expect("CPU ", std::chrono::seconds(30)));
  }

 private:
  std::string who_;
  wsutil::ChildProcess child_;
};

}  // namespace wsbench
