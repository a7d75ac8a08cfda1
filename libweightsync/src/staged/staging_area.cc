// The staging area of a StagedUpdates (staging_area.h).
#include "staged/staging_area.h"

#include <cstring>
#include <string>
#include <utility>

#include "memory/prefault.h"
#include "subscriber/destination_plan.h"

namespace weightsync::detail {

Result<StagingBuffer> StagingBuffer::allocate(std::size_t bytes, MemoryKind kind, bool lock_host) {
  StagingBuffer buffer;
  if (kind == MemoryKind::kHost) {
    auto host = HostBuffer::allocate(bytes, lock_host);
    if (!host.ok()) return host.status();
    buffer.host_ = std::move(*host);
    buffer.data_ = buffer.host_.data();
    // Every page mapped now, so the first pulls into a fresh buffer do not pay
    // for its page faults (on this VM the first pull into a fresh 1 GiB buffer
    // took 2.5-4.5 s, against 0.12-0.17 s once its pages were mapped).
    prefault_writable(buffer.host_.data(), buffer.host_.size());
    return buffer;
  }
  const DeviceBackend backend = device_backend();
  if (!backend.allocate) {
    return Status(ErrorCode::kInvalidConfig, "this device backend cannot allocate staging buffers");
  }
  auto device = backend.allocate(bytes);
  if (!device.ok()) {
    return Status(device.status().code(), "allocating a " + std::to_string(bytes) +
                                              "-byte device staging buffer: " + device.status().message());
  }
  buffer.device_ = std::move(*device);
  buffer.data_ = buffer.device_->data();
  return buffer;
}

Result<StagingArea> StagingArea::create(const WeightLayout& layout, const StagedUpdatesOptions& options) {
  if (options.memory != MemoryKind::kHost && options.memory != MemoryKind::kCuda) {
    return Status(ErrorCode::kInvalidArgument, "unknown staging memory kind");
  }
  StagingArea area;
  area.kind_ = options.memory;
  area.total_bytes_ = layout.total_bytes();
  if (options.mode == InstallMode::kSwap) {
    if (options.live) {
      return Status(ErrorCode::kInvalidArgument,
                    "kSwap takes no live destination: the library owns both buffers and the engine reads "
                    "live_data(); use kCopy to keep the engine's weights at fixed addresses");
    }
    area.slices_ = options.slices;
  } else if (options.mode == InstallMode::kCopy) {
    if (!options.live) {
      return Status(ErrorCode::kInvalidArgument,
                    "kCopy needs the live destination (StagedUpdatesOptions::live): the engine's weights");
    }
    if (!options.slices.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "kCopy takes its slices from the live destination (Destination::slices), not from "
                    "StagedUpdatesOptions::slices");
    }
    if (options.live->memory_kind() != options.memory) {
      return Status(ErrorCode::kInvalidArgument,
                    std::string("the live weights are ") + to_string(options.live->memory_kind()) +
                        " memory and the staging area " + to_string(options.memory) +
                        ": set StagedUpdatesOptions::memory to the live weights' kind");
    }
    if (options.live->is_partial()) area.slices_ = options.live->tensor_slices();
  } else {
    return Status(ErrorCode::kInvalidArgument, "unknown install mode");
  }
  std::uint64_t packed = 0;
  for (auto& slice : area.slices_) {
    area.slice_offsets_.push_back(packed);
    packed += slice.length * slice.count;  // checked against the layout by plan_destination below
    slice.dest = nullptr;
    slice.dest_stride = 0;
  }
  area.buffer_bytes_ =
      area.partial() ? static_cast<std::size_t>(packed) : static_cast<std::size_t>(area.total_bytes_);
  if (area.buffer_bytes_ == 0) return Status(ErrorCode::kInvalidArgument, "the slices name no byte");
  const std::size_t count = options.mode == InstallMode::kSwap ? 2 : 1;
  for (std::size_t i = 0; i < count; ++i) {
    auto buffer = StagingBuffer::allocate(area.buffer_bytes_, area.kind_, options.lock_host);
    if (!buffer.ok()) return buffer.status();
    area.buffers_.push_back(std::move(*buffer));
  }
  // The staging destination obeys the same rules as any pull's.
  if (auto reads = plan_destination(layout, area.destination(0)); !reads.ok()) return reads.status();
  if (options.mode == InstallMode::kCopy) {
    if (Status s = area.plan_copies(layout, *options.live); !s.ok()) return s;
  }
  return area;
}

Destination StagingArea::destination(std::size_t index) const {
  auto* base = static_cast<char*>(buffers_[index].data());
  if (!partial()) return Destination::contiguous(base, static_cast<std::size_t>(total_bytes_), kind_);
  std::vector<TensorSlice> slices = slices_;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    slices[i].dest = base + slice_offsets_[i];
    slices[i].dest_stride = slices[i].length;  // packed
  }
  return Destination::slices(std::move(slices), kind_);
}

Status StagingArea::plan_copies(const WeightLayout& layout, const Destination& live) {
  auto reads = plan_destination(layout, live);
  if (!reads.ok()) {
    return Status(reads.status().code(), "the live destination: " + reads.status().message());
  }
  if (live.is_contiguous()) {
    copies_.push_back(LiveCopy{0, live.data(), total_bytes_});  // one copy, padding included
    return Status();
  }
  // Whole: each tensor from its slot offset. Partial: the reads walk the
  // ranges in the order the staging buffer packs them.
  std::uint64_t packed = 0;
  for (const ReadPiece& piece : reads->pieces) {
    copies_.push_back(LiveCopy{reads->partial ? packed : piece.slot_offset, piece.dest, piece.length});
    packed += piece.length;
  }
  return Status();
}

Status StagingArea::copy_to_live() const {
  const auto* base = static_cast<const char*>(buffers_[0].data());
  if (kind_ == MemoryKind::kHost) {
    for (const LiveCopy& c : copies_) std::memcpy(c.to, base + c.from, c.bytes);
    return Status();
  }
  const DeviceBackend backend = device_backend();
  for (const LiveCopy& c : copies_) {
    if (Status s = backend.copy_within_device(c.to, base + c.from, c.bytes); !s.ok()) {
      return Status(s.code(),
                    "copying the staged version into the live weights failed part-way (they are "
                    "now undefined: pull into them again): " +
                        s.message());
    }
  }
  return Status();
}

}  // namespace weightsync::detail
