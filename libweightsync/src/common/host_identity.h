// Which kernel instance this process runs on: /proc/sys/kernel/random/boot_id,
// a random id fixed until the next reboot. Equal boot ids mean the same host,
// which is when the shared-memory transport can be used. Empty if unreadable.
#pragma once

#include <string>

namespace weightsync::detail {

std::string boot_id();

}  // namespace weightsync::detail
