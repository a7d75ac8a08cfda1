// WeightLayout: validation, offsets, and the binary encoding (docs/protocol.md,
// "Layout encoding").
#include "weightsync/layout.h"

#include <unordered_set>

#include "common/byte_codec.h"

namespace weightsync {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
    case DType::kFloat8E4M3: return 1;
    case DType::kFloat8E5M2: return 1;
  }
  return 0;
}

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kFloat8E4M3: return "float8_e4m3";
    case DType::kFloat8E5M2: return "float8_e5m2";
  }
  return "unknown";
}

namespace {

constexpr std::uint32_t kLayoutMagic = 0x5759414cu;  // "LAYW" little-endian
constexpr std::uint16_t kLayoutEncodingVersion = 1;
constexpr std::size_t kMaxAlignment = 1u << 20;

Status bad_layout(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "invalid weight layout: " + why);
}

// a + b with overflow detection.
bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

Result<WeightLayout> WeightLayout::build(std::vector<TensorSpec> specs, std::size_t alignment) try {
  if (specs.empty()) return bad_layout("it has no tensors");
  if (specs.size() > kMaxTensors) {
    return bad_layout("it has " + std::to_string(specs.size()) + " tensors, more than " +
                      std::to_string(kMaxTensors));
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kMaxAlignment) {
    return bad_layout("alignment " + std::to_string(alignment) + " is not a power of two in [1, 1 MiB]");
  }

  WeightLayout layout;
  layout.alignment_ = alignment;
  layout.tensors_.reserve(specs.size());
  layout.index_.reserve(specs.size());
  std::uint64_t cursor = 0;
  for (auto& spec : specs) {
    if (spec.name.empty()) return bad_layout("a tensor has an empty name");
    if (spec.name.size() > kMaxNameBytes) {
      return bad_layout("tensor name longer than " + std::to_string(kMaxNameBytes) + " bytes");
    }
    const std::size_t elem = dtype_size(spec.dtype);
    if (elem == 0) return bad_layout("tensor '" + spec.name + "' has an unknown dtype");
    if (elem > alignment) {
      return bad_layout("alignment " + std::to_string(alignment) + " is smaller than the " +
                        std::to_string(elem) + "-byte elements of '" + spec.name + "'");
    }
    if (spec.shape.size() > kMaxDims) {
      return bad_layout("tensor '" + spec.name + "' has more than " + std::to_string(kMaxDims) +
                        " dimensions");
    }
    std::uint64_t numel = 1;
    for (std::int64_t dim : spec.shape) {
      if (dim <= 0) {
        return bad_layout("tensor '" + spec.name + "' has a dimension of " + std::to_string(dim) +
                          " (zero-size tensors are not allowed)");
      }
      if (mul_overflows(numel, static_cast<std::uint64_t>(dim), &numel)) {
        return bad_layout("tensor '" + spec.name + "' has more elements than fit in 64 bits");
      }
    }
    std::uint64_t bytes = 0;
    std::uint64_t aligned = 0;
    std::uint64_t end = 0;
    if (mul_overflows(numel, elem, &bytes) || add_overflows(cursor, alignment - 1, &aligned)) {
      return bad_layout("tensor '" + spec.name + "' overflows a 64-bit region");
    }
    aligned &= ~static_cast<std::uint64_t>(alignment - 1);
    if (add_overflows(aligned, bytes, &end)) {
      return bad_layout("tensor '" + spec.name + "' overflows a 64-bit region");
    }
    if (!layout.index_.emplace(spec.name, layout.tensors_.size()).second) {
      return bad_layout("duplicate tensor name '" + spec.name + "'");
    }
    layout.payload_bytes_ += bytes;
    layout.tensors_.push_back(TensorEntry{std::move(spec), aligned, bytes});
    cursor = end;
  }
  std::uint64_t total = 0;
  if (add_overflows(cursor, alignment - 1, &total)) return bad_layout("total size overflows 64 bits");
  layout.total_bytes_ = total & ~static_cast<std::uint64_t>(alignment - 1);
  return layout;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("WeightLayout::build: ") + e.what());
}

const TensorEntry* WeightLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

bool WeightLayout::operator==(const WeightLayout& other) const {
  if (alignment_ != other.alignment_ || tensors_.size() != other.tensors_.size()) return false;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& a = tensors_[i];
    const auto& b = other.tensors_[i];
    if (a.spec.name != b.spec.name || a.spec.dtype != b.spec.dtype || a.spec.shape != b.spec.shape ||
        a.offset != b.offset || a.bytes != b.bytes) {
      return false;
    }
  }
  return true;
}

std::vector<std::uint8_t> WeightLayout::serialize() const {
  detail::ByteWriter w;
  w.u32(kLayoutMagic);
  w.u16(kLayoutEncodingVersion);
  w.u32(static_cast<std::uint32_t>(alignment_));
  w.u32(static_cast<std::uint32_t>(tensors_.size()));
  for (const auto& t : tensors_) {
    w.str16(t.spec.name);
    w.u8(static_cast<std::uint8_t>(t.spec.dtype));
    w.u8(static_cast<std::uint8_t>(t.spec.shape.size()));
    for (std::int64_t dim : t.spec.shape) w.i64(dim);
  }
  return w.take();
}

Result<WeightLayout> WeightLayout::deserialize(const void* data, std::size_t size) try {
  detail::ByteReader r(data, size);
  std::uint32_t magic = 0, alignment = 0, count = 0;
  std::uint16_t encoding = 0;
  if (!r.u32(&magic) || magic != kLayoutMagic) return bad_layout("encoded layout has a bad magic number");
  if (!r.u16(&encoding) || encoding != kLayoutEncodingVersion) {
    return bad_layout("encoded layout has unsupported encoding version " + std::to_string(encoding));
  }
  if (!r.u32(&alignment) || !r.u32(&count)) return bad_layout("encoded layout is truncated");
  if (count == 0 || count > kMaxTensors) {
    return bad_layout("encoded layout declares " + std::to_string(count) + " tensors");
  }
  // Each tensor needs at least 2 (name length) + 1 + 1 bytes: refuse counts the
  // remaining bytes cannot hold before reserving memory for them.
  if (static_cast<std::uint64_t>(count) * 4 > r.remaining()) return bad_layout("encoded layout is truncated");
  std::vector<TensorSpec> specs;
  specs.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    TensorSpec spec;
    std::uint8_t dtype = 0, ndim = 0;
    if (!r.str16(&spec.name, kMaxNameBytes) || !r.u8(&dtype) || !r.u8(&ndim)) {
      return bad_layout("encoded layout is truncated or has an over-long name");
    }
    if (ndim > kMaxDims) return bad_layout("encoded tensor has too many dimensions");
    spec.dtype = static_cast<DType>(dtype);
    spec.shape.resize(ndim);
    for (auto& dim : spec.shape) {
      if (!r.i64(&dim)) return bad_layout("encoded layout is truncated");
    }
    specs.push_back(std::move(spec));
  }
  if (r.remaining() != 0) return bad_layout("encoded layout has trailing bytes");
  return build(std::move(specs), alignment);
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("WeightLayout::deserialize: ") + e.what());
}

}  // namespace weightsync
