// Version marks at both ends of a bench image.
#include <cstring>

#include "roles.h"

namespace wsbench {

void mark_image(void* image, std::uint64_t size, std::uint64_t version) {
  auto* bytes = static_cast<unsigned char*>(image);
  const std::uint64_t head = version, tail = ~version;
  std::memcpy(bytes, &head, sizeof(head));
  std::memcpy(bytes + size - sizeof(tail), &tail, sizeof(tail));
}

bool image_has_marks(const void* image, std::uint64_t size, std::uint64_t version) {
  const auto* bytes = static_cast<const unsigned char*>(image);
  std::uint64_t head = 0, tail = 0;
  std::memcpy(&head, bytes, sizeof(head));
  std::memcpy(&tail, bytes + size - sizeof(tail), sizeof(tail));
  return head == version && tail == ~version;
}

}  // namespace wsbench
