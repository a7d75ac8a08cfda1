// describe_machine(): the one line the bench reports (fanout, sharded) say of
// the machine they ran on. Any thread.
#pragma once

#include <string>

namespace wsbench {

enum class MemoryShown { kNo, kYes };

// "<sysname> <release>, <n> cores (<cpu model>)", then ", <x.y> GiB" (MemTotal) with MemoryShown::kYes.
std::string describe_machine(MemoryShown memory);

}  // namespace wsbench
