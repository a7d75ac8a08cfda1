// The fanout bench's handle on a test bed made by scripts/testbed.sh (one
// network namespace per host, a bridge, optional per-link rate caps). Every
// command it runs is recorded, as run, for the report. The destructor (and a
// SIGINT/SIGTERM/SIGHUP while one is up) removes the bed. One thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanout.h"

namespace wsbench {

// Runs argv (argv[0] a path or a name on PATH) with stdout and stderr captured
// together, killed after `timeout_s`; returns the exit code (128 + signal;
// -1 if it could not start) and appends its output to *output.
int run_captured(const std::vector<std::string>& argv, double timeout_s, std::string* output);

// "a 'b c'" for the report.
std::string shell_join(const std::vector<std::string>& argv);

class TestBed {
 public:
  // `testbed.sh check`: true when namespaces can be made here; else *why.
  static bool check(const std::string& script, std::string* why);

  TestBed(std::string script, std::vector<std::string>* commands);
  ~TestBed();
  TestBed(const TestBed&) = delete;
  TestBed& operator=(const TestBed&) = delete;

  // `testbed.sh up NAME K [--rate RATE]` ("none": no --rate). False + *error on failure.
  bool up(const std::string& name, int hosts, const std::string& rate, std::string* error);
  void down();

  const std::string& name() const { return name_; }
  const std::vector<FanoutHost>& hosts() const { return hosts_; }
  // `testbed.sh exec NAME i argv...` as an argv (recorded).
  std::vector<std::string> exec(int host, const std::vector<std::string>& argv);
  // The bridge's address in the root namespace (host 0's address with .254) and the /24.
  std::string bridge_address() const;
  std::string subnet() const;

 private:
  std::string script_;
  std::vector<std::string>* commands_;
  std::string name_;
  std::vector<FanoutHost> hosts_;
  bool up_ = false;
};

}  // namespace wsbench
