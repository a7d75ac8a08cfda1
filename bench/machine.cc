// describe_machine() (machine.h), from uname(2), /proc/cpuinfo and /proc/meminfo.
#include "machine.h"

#include <sys/utsname.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace wsbench {
namespace {

// The first "model name" of /proc/cpuinfo, or "?".
std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "?";
}

// ", <x.y> GiB" from /proc/meminfo's MemTotal, or "".
std::string memory_total() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream in(line.substr(9));
      double kib = 0;
      in >> kib;
      char buf[32];
      std::snprintf(buf, sizeof(buf), ", %.1f GiB", kib / (1024.0 * 1024.0));
      return buf;
    }
  }
  return "";
}

}  // namespace

std::string describe_machine(MemoryShown memory) {
  utsname u{};
  ::uname(&u);
  return std::string(u.sysname) + " " + u.release + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " cores (" + cpu_model() + ")" +
         (memory == MemoryShown::kYes ? memory_total() : "");
}

}  // namespace wsbench
