// host_identity(): WEIGHTSYNC_HOST_ID, else boot id + network namespace inode.
#include "common/host_identity.h"

#include <sys/stat.h>

#include <fstream>

#include "common/printable.h"
#include "common/settings_table.h"

namespace weightsync::detail {
namespace {

bool allowed(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == ':' || c == '-';
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id)) return "";
  return id;
}

}  // namespace

Result<std::string> host_identity() {
  auto set = resolve_setting<std::string>(SettingId::kHostId, std::nullopt);
  if (!set.ok()) return set.status();
  if (set->source != SettingSource::kDefault) {
    const std::string& id = set->value;
    if (id.size() > kMaxHostIdBytes) {
      return Status(ErrorCode::kInvalidConfig, "WEIGHTSYNC_HOST_ID is " + std::to_string(id.size()) +
                                                   " bytes long; at most " + std::to_string(kMaxHostIdBytes) +
                                                   " are allowed");
    }
    for (char c : id) {
      if (!allowed(c)) {
        return Status(ErrorCode::kInvalidConfig,
                      "WEIGHTSYNC_HOST_ID='" + printable(id) +
                          "' has a character other than letters, digits and . _ : - (at most 64 of them)");
      }
    }
    return id;
  }
  const std::string boot = boot_id();
  struct stat ns {};
  if (boot.empty() || ::stat("/proc/self/ns/net", &ns) != 0) return std::string();
  // 36 + 1 + at most 20 digits: always within kMaxHostIdBytes.
  std::string id = boot + ":" + std::to_string(static_cast<unsigned long long>(ns.st_ino));
  if (id.size() > kMaxHostIdBytes) return std::string();  // an odd boot id: recognise no peer
  return id;
}

}  // namespace weightsync::detail
