// Streaming xxHash3-64 over the tensors of a version, in layout order and
// without padding, so a contiguous and a scatter destination hash the same.
#pragma once

#include <cstddef>
#include <cstdint>

struct XXH3_state_s;

namespace weightsync::detail {

class StreamHasher {
 public:
  StreamHasher();
  ~StreamHasher();
  StreamHasher(const StreamHasher&) = delete;
  StreamHasher& operator=(const StreamHasher&) = delete;

  void reset();
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;

 private:
  XXH3_state_s* state_;
};

}  // namespace weightsync::detail
