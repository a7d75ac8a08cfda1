// Random bytes and ids (random.h).
#include "common/random.h"

#include <openssl/rand.h>

namespace weightsync::detail {

Status random_bytes(void* out, std::size_t n) {
  if (RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n)) != 1) {
    return Status(ErrorCode::kInternal, "OpenSSL RAND_bytes failed (no entropy source?)");
  }
  return Status();
}

Result<std::uint64_t> random_id() {
  std::uint64_t id = 0;
  while (id == 0) {
    Status s = random_bytes(&id, sizeof(id));
    if (!s.ok()) return s;
  }
  return id;
}

}  // namespace weightsync::detail
