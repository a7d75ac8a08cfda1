// Destinations checked against the layout and expanded into reads
// (destination_plan.h).
#include "subscriber/destination_plan.h"

#include <algorithm>
#include <string>

#include "cuda/device_backend.h"

namespace weightsync::detail {
namespace {

Status check_device_destination(const WeightLayout& layout, const Destination& dst) {
  const DeviceBackend backend = device_backend();
  if (dst.is_contiguous()) {
    return backend.check_device_memory(dst.data(), std::min<std::size_t>(dst.bytes(), layout.total_bytes()),
                                       "the contiguous destination");
  }
  for (const auto& e : dst.entries()) {
    Status s = backend.check_device_memory(e.data, e.bytes, "a scatter destination entry");
    if (!s.ok()) return Status(s.code(), "tensor '" + e.name + "': " + s.message());
  }
  return Status();
}

Result<std::vector<ReadPiece>> whole_reads(const WeightLayout& layout, const Destination& dst) {
  std::vector<ReadPiece> plan;
  const auto& tensors = layout.tensors();
  if (dst.is_contiguous()) {
    if (dst.data() == nullptr || dst.bytes() < layout.total_bytes()) {
      return Status(ErrorCode::kInvalidArgument, "contiguous destination has " + std::to_string(dst.bytes()) +
                                                     " bytes; the layout needs " +
                                                     std::to_string(layout.total_bytes()));
    }
    if (dst.memory_kind() == MemoryKind::kCuda) {
      if (Status s = check_device_destination(layout, dst); !s.ok()) return s;
    }
    auto* base = static_cast<char*>(dst.data());
    for (const auto& t : tensors) {
      // Coalesce tensors with no padding between them into one piece.
      if (!plan.empty() && plan.back().slot_offset + plan.back().length == t.offset) {
        plan.back().length += t.bytes;
      } else {
        plan.push_back(ReadPiece{t.offset, t.bytes, base + t.offset});
      }
    }
    return plan;
  }
  std::vector<void*> by_index(tensors.size(), nullptr);
  for (const auto& e : dst.entries()) {
    const TensorEntry* t = layout.find(e.name);
    if (t == nullptr)
      return Status(ErrorCode::kInvalidArgument, "scatter destination names unknown tensor '" + e.name + "'");
    const std::size_t i = static_cast<std::size_t>(t - tensors.data());
    if (by_index[i] != nullptr)
      return Status(ErrorCode::kInvalidArgument, "scatter destination names '" + e.name + "' twice");
    if (e.data == nullptr || e.bytes != t->bytes) {
      return Status(ErrorCode::kInvalidArgument, "scatter entry '" + e.name + "' has " +
                                                     std::to_string(e.bytes) + " bytes; the tensor has " +
                                                     std::to_string(t->bytes));
    }
    by_index[i] = e.data;
  }
  if (dst.memory_kind() == MemoryKind::kCuda) {
    if (Status s = check_device_destination(layout, dst); !s.ok()) return s;
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (by_index[i] == nullptr) {
      return Status(ErrorCode::kInvalidArgument, "scatter destination is missing tensor '" +
                                                     tensors[i].spec.name +
                                                     "' (every tensor must be given once)");
    }
    plan.push_back(ReadPiece{tensors[i].offset, tensors[i].bytes, by_index[i]});
  }
  return plan;
}

// Overlapping or touching spans become one (one registration per run).
void merge_spans(std::vector<std::pair<void*, std::size_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<void*, std::size_t>> merged;
  for (const auto& [p, n] : spans) {
    auto* begin = static_cast<char*>(p);
    if (!merged.empty()) {
      auto* last_begin = static_cast<char*>(merged.back().first);
      if (begin <= last_begin + merged.back().second) {
        const std::size_t end = std::max<std::size_t>(merged.back().second, (begin - last_begin) + n);
        merged.back().second = end;
        continue;
      }
    }
    merged.emplace_back(p, n);
  }
  spans = std::move(merged);
}

Status slice_reads(const WeightLayout& layout, const Destination& dst, DestinationReads& out) {
  const auto& slices = dst.tensor_slices();
  if (slices.empty()) return Status(ErrorCode::kInvalidArgument, "a partial destination names no slice");
  std::uint64_t total = 0;
  for (const auto& slice : slices) {
    const TensorEntry* t = layout.find(slice.tensor);
    if (t == nullptr) {
      return Status(ErrorCode::kInvalidArgument, "a slice names unknown tensor '" + slice.tensor + "'");
    }
    const std::string where = "slice of '" + slice.tensor + "'";
    if (slice.dest == nullptr || slice.length == 0 || slice.count == 0) {
      return Status(ErrorCode::kInvalidArgument, where + " has no destination, no length or no ranges");
    }
    if (slice.count > 1 && slice.stride < slice.length) {
      return Status(ErrorCode::kInvalidArgument,
                    where + ": stride " + std::to_string(slice.stride) + " is shorter than the range (" +
                        std::to_string(slice.length) + " bytes): ranges overlap");
    }
    const std::uint64_t dest_stride = slice.dest_stride == 0 ? slice.length : slice.dest_stride;
    std::uint64_t last = 0, end = 0, bytes = 0, dest_last = 0;
    if (__builtin_mul_overflow(slice.count - 1, slice.stride, &last) ||
        __builtin_add_overflow(last, slice.offset, &last) ||
        __builtin_add_overflow(last, slice.length, &end) || end > t->bytes ||
        __builtin_mul_overflow(slice.count, slice.length, &bytes) ||
        __builtin_mul_overflow(slice.count - 1, dest_stride, &dest_last) ||
        __builtin_add_overflow(total, bytes, &total)) {
      return Status(ErrorCode::kInvalidArgument,
                    where + " reaches past the tensor's " + std::to_string(t->bytes) + " bytes");
    }
    if (slice.count > 1 && dest_stride < slice.length) {
      return Status(ErrorCode::kInvalidArgument, where + ": dest_stride is shorter than the range");
    }
    auto* dest = static_cast<char*>(slice.dest);
    const std::uint64_t offset = t->offset + slice.offset;
    if (slice.count == 1 || (slice.stride == slice.length && dest_stride == slice.length)) {
      // One contiguous run on both sides.
      out.pieces.push_back(ReadPiece{offset, bytes, dest});
      out.view.push_back(ViewEntry{offset, bytes, 1, 0});
    } else {
      for (std::uint64_t i = 0; i < slice.count; ++i) {
        out.pieces.push_back(ReadPiece{offset + i * slice.stride, slice.length, dest + i * dest_stride});
      }
      out.view.push_back(ViewEntry{offset, slice.length, slice.count, slice.stride});
    }
    out.spans.emplace_back(dest, static_cast<std::size_t>(dest_last + slice.length));
  }
  if (total > layout.payload_bytes()) {
    return Status(ErrorCode::kInvalidArgument,
                  "the slices name " + std::to_string(total) + " bytes, more than the layout's " +
                      std::to_string(layout.payload_bytes()) + ": name each byte once");
  }
  out.bytes = total;
  merge_spans(out.spans);
  return Status();
}

}  // namespace

Result<DestinationReads> plan_destination(const WeightLayout& layout, const Destination& dst) {
  if (dst.memory_kind() != MemoryKind::kHost && dst.memory_kind() != MemoryKind::kCuda) {
    return Status(ErrorCode::kInvalidArgument,
                  "unknown destination memory kind " + std::to_string(static_cast<int>(dst.memory_kind())));
  }
  DestinationReads out;
  if (!dst.is_partial()) {
    auto whole = whole_reads(layout, dst);
    if (!whole.ok()) return whole.status();
    out.pieces = std::move(*whole);
    out.bytes = layout.payload_bytes();
    return out;
  }
  out.partial = true;
  if (Status s = slice_reads(layout, dst, out); !s.ok()) return s;
  if (dst.memory_kind() == MemoryKind::kCuda) {
    const DeviceBackend backend = device_backend();
    for (const auto& [p, n] : out.spans) {
      if (Status s = backend.check_device_memory(p, n, "a slice destination"); !s.ok()) return s;
    }
  }
  return out;
}

}  // namespace weightsync::detail
