// boot_id() from procfs.
#include "common/host_identity.h"

#include <fstream>

namespace weightsync::detail {

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id)) return "";
  return id;
}

}  // namespace weightsync::detail
