// weightsync/layout.h: named tensors packed into one contiguous region.
//
// Contract
// - A WeightLayout is immutable once built. Offsets are computed once, in
//   declaration order, each tensor starting at a multiple of the layout's
//   alignment (default kDefaultAlignment = 256 bytes: a cache-line and CUDA
//   allocation multiple). Padding bytes between tensors are not part of a
//   version: pulls never transfer them and checksums skip them.
// - total_bytes() is the end of the last tensor rounded up to the alignment;
//   it is the size of every slot of a publisher using this layout.
// - build() rejects: an empty layout, an empty or over-long name, duplicate
//   names, a zero-size tensor (a zero or negative dimension), more than
//   kMaxDims dimensions, an alignment that is not a power of two in
//   [element size, 1 MiB], and any size or offset that overflows 64 bits.
// - serialize()/deserialize() carry the specs and the alignment; offsets are
//   recomputed on deserialize, never trusted from the bytes, so a decoded
//   layout obeys the same rules as a built one.
// - Thread safety: const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "weightsync/status.h"

namespace weightsync {

enum class DType : std::uint8_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt16 = 6,
  kInt32 = 7,
  kInt64 = 8,
  kBool = 9,
  kFloat8E4M3 = 10,
  kFloat8E5M2 = 11,
};

// Bytes per element; 0 for a value outside the enum.
std::size_t dtype_size(DType dtype) noexcept;
const char* to_string(DType dtype) noexcept;

struct TensorSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
};

// A TensorSpec placed in the region.
struct TensorEntry {
  TensorSpec spec;
  std::uint64_t offset = 0;  // bytes from the start of the region
  std::uint64_t bytes = 0;   // numel * dtype_size
};

class WeightLayout {
 public:
  static constexpr std::size_t kDefaultAlignment = 256;
  static constexpr std::size_t kMaxDims = 8;
  static constexpr std::size_t kMaxNameBytes = 1024;
  static constexpr std::size_t kMaxTensors = 1u << 20;

  static Result<WeightLayout> build(std::vector<TensorSpec> specs, std::size_t alignment = kDefaultAlignment);
  static Result<WeightLayout> deserialize(const void* data, std::size_t size);

  std::vector<std::uint8_t> serialize() const;

  const std::vector<TensorEntry>& tensors() const noexcept { return tensors_; }
  // nullptr when no tensor has that name.
  const TensorEntry* find(const std::string& name) const;
  std::uint64_t total_bytes() const noexcept { return total_bytes_; }
  // Sum of tensor bytes, without padding.
  std::uint64_t payload_bytes() const noexcept { return payload_bytes_; }
  std::size_t alignment() const noexcept { return alignment_; }

  bool operator==(const WeightLayout& other) const;
  bool operator!=(const WeightLayout& other) const { return !(*this == other); }

 private:
  WeightLayout() = default;

  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::uint64_t total_bytes_ = 0;
  std::uint64_t payload_bytes_ = 0;
  std::size_t alignment_ = kDefaultAlignment;
};

}  // namespace weightsync
