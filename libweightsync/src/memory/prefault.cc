// prefault_writable (memory/prefault.h).
#include "memory/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

namespace weightsync::detail {

void prefault_writable(void* data, std::size_t bytes) noexcept {
  if (data == nullptr || bytes == 0) return;
#ifdef MADV_POPULATE_WRITE
  if (::madvise(data, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
  auto* bytes_at = static_cast<volatile char*>(data);
  for (std::size_t i = 0; i < bytes; i += page) bytes_at[i] = 0;  // zero-filled already: writes zero
}

}  // namespace weightsync::detail
