// The linked library's version.
#include "weightsync/version.h"

namespace weightsync {
const char* version() noexcept {
  return WEIGHTSYNC_VERSION_STRING;
}
}  // namespace weightsync
