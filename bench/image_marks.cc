// Version marks at both ends of a bench image.
#include <cstring>

#include "roles.h"

namespace wsbench {

void image_marks(std::uint64_t version, std::uint64_t* head, std::uint64_t* tail) {
  *head = version;
  *tail = ~version;
}

void mark_image(void* image, std::uint64_t size, std::uint64_t version) {
  auto* bytes = static_cast<unsigned char*>(image);
  std::uint64_t head = 0, tail = 0;
  image_marks(version, &head, &tail);
  std::memcpy(bytes, &head, sizeof(head));
  std::memcpy(bytes + size - sizeof(tail), &tail, sizeof(tail));
}

bool image_has_marks(const void* image, std::uint64_t size, std::uint64_t version) {
  const auto* bytes = static_cast<const unsigned char*>(image);
  std::uint64_t head = 0, tail = 0;
  std::memcpy(&head, bytes, sizeof(head));
  std::memcpy(&tail, bytes + size - sizeof(tail), sizeof(tail));
  std::uint64_t want_head = 0, want_tail = 0;
  image_marks(version, &want_head, &want_tail);
  return head == want_head && tail == want_tail;
}

}  // namespace wsbench
