// Pull plans: destinations checked against the layout and expanded into
// reads, partial ones registered with the publisher as views.
#include "subscriber/subscriber_impl.h"

#include <algorithm>

#include "common/checksum.h"
#include "cuda/device_backend.h"

namespace weightsync {

// ---- Destination ----

Destination Destination::contiguous(void* data, std::size_t bytes, MemoryKind kind) {
  Destination d;
  d.shape_ = Shape::kContiguous;
  d.kind_ = kind;
  d.data_ = data;
  d.bytes_ = bytes;
  return d;
}

Destination Destination::scatter(std::vector<ScatterEntry> entries, MemoryKind kind) {
  Destination d;
  d.shape_ = Shape::kScatter;
  d.kind_ = kind;
  d.entries_ = std::move(entries);
  return d;
}

Destination Destination::slices(std::vector<TensorSlice> slices, MemoryKind kind) {
  Destination d;
  d.shape_ = Shape::kSlices;
  d.kind_ = kind;
  d.slices_ = std::move(slices);
  return d;
}

// ---- PullPlan ----

std::uint64_t PullPlan::bytes() const noexcept {
  return state_ ? state_->bytes : 0;
}
std::size_t PullPlan::pieces() const noexcept {
  return state_ ? state_->pieces.size() : 0;
}
bool PullPlan::partial() const noexcept {
  return state_ && state_->partial;
}

// ---- Subscriber::Impl: plans ----

Status Subscriber::Impl::check_device_destination(const Destination& dst) const {
  const detail::DeviceBackend backend = detail::device_backend();
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

Result<std::vector<detail::ReadPiece>> Subscriber::Impl::whole_plan_for(const Destination& dst) const {
  if (dst.memory_kind() != MemoryKind::kHost && dst.memory_kind() != MemoryKind::kCuda) {
    return Status(ErrorCode::kInvalidArgument,
                  "unknown destination memory kind " + std::to_string(static_cast<int>(dst.memory_kind())));
  }
  std::vector<detail::ReadPiece> plan;
  const auto& tensors = layout.tensors();
  if (dst.is_contiguous()) {
    if (dst.data() == nullptr || dst.bytes() < layout.total_bytes()) {
      return Status(ErrorCode::kInvalidArgument, "contiguous destination has " + std::to_string(dst.bytes()) +
                                                     " bytes; the layout needs " +
                                                     std::to_string(layout.total_bytes()));
    }
    if (dst.memory_kind() == MemoryKind::kCuda) {
      if (Status s = check_device_destination(dst); !s.ok()) return s;
    }
    auto* base = static_cast<char*>(dst.data());
    for (const auto& t : tensors) {
      // Coalesce tensors with no padding between them into one piece.
      if (!plan.empty() && plan.back().slot_offset + plan.back().length == t.offset) {
        plan.back().length += t.bytes;
      } else {
        plan.push_back(detail::ReadPiece{t.offset, t.bytes, base + t.offset});
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
    if (Status s = check_device_destination(dst); !s.ok()) return s;
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (by_index[i] == nullptr) {
      return Status(ErrorCode::kInvalidArgument, "scatter destination is missing tensor '" +
                                                     tensors[i].spec.name +
                                                     "' (every tensor must be given once)");
    }
    plan.push_back(detail::ReadPiece{tensors[i].offset, tensors[i].bytes, by_index[i]});
  }
  return plan;
}

Status Subscriber::Impl::slices_plan(const Destination& dst, PullPlan::State& out) const {
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
      out.pieces.push_back(detail::ReadPiece{offset, bytes, dest});
      out.view.push_back(detail::ViewEntry{offset, bytes, 1, 0});
    } else {
      for (std::uint64_t i = 0; i < slice.count; ++i) {
        out.pieces.push_back(
            detail::ReadPiece{offset + i * slice.stride, slice.length, dest + i * dest_stride});
      }
      out.view.push_back(detail::ViewEntry{offset, slice.length, slice.count, slice.stride});
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

void Subscriber::Impl::merge_spans(std::vector<std::pair<void*, std::size_t>>& spans) {
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

Result<std::shared_ptr<PullPlan::State>> Subscriber::Impl::plan_for(const Destination& dst) {
  auto state = std::make_shared<PullPlan::State>();
  state->owner = this;
  state->kind = dst.memory_kind();
  if (!dst.is_partial()) {
    auto whole = whole_plan_for(dst);
    if (!whole.ok()) return whole.status();
    state->pieces = std::move(*whole);
    state->bytes = layout.payload_bytes();
    return state;
  }
  if (dst.memory_kind() != MemoryKind::kHost && dst.memory_kind() != MemoryKind::kCuda) {
    return Status(ErrorCode::kInvalidArgument,
                  "unknown destination memory kind " + std::to_string(static_cast<int>(dst.memory_kind())));
  }
  state->partial = true;
  if (Status s = slices_plan(dst, *state); !s.ok()) return s;
  if (dst.memory_kind() == MemoryKind::kCuda) {
    const detail::DeviceBackend backend = detail::device_backend();
    for (const auto& [p, n] : state->spans) {
      if (Status s = backend.check_device_memory(p, n, "a slice destination"); !s.ok()) return s;
    }
  }
  if (checksums && options.verify_checksum) {
    auto id = view_id_for(state->view);
    if (!id.ok()) return id.status();
    state->view_id = *id;
  }
  return state;
}

Result<std::uint32_t> Subscriber::Impl::view_id_for(const std::vector<detail::ViewEntry>& view) {
  detail::StreamHasher h;
  h.update(view.data(), view.size() * sizeof(detail::ViewEntry));
  const std::uint64_t key = h.digest();
  for (const auto& known : views[key]) {
    if (known.first.size() == view.size() &&
        std::equal(view.begin(), view.end(), known.first.begin(), [](const auto& a, const auto& b) {
          return a.offset == b.offset && a.length == b.length && a.count == b.count && a.stride == b.stride;
        })) {
      return known.second;
    }
  }
  auto id = note(control.register_view(view));
  if (!id.ok()) {
    if (id.status().code() == ErrorCode::kProtocolError && sticky.code() == ErrorCode::kProtocolError) {
      return Status(ErrorCode::kProtocolError,
                    id.status().message() + " (a publisher older than partial pulls? upgrade it)");
    }
    return id.status();
  }
  views[key].emplace_back(view, *id);
  ++stats.views;
  return *id;
}

Status Subscriber::Impl::ensure_registered(PullPlan::State& state) {
  const std::uint64_t generation = channel->registration_generation();
  if (state.ensured_generation == generation) return Status();
  for (const auto& [p, n] : state.spans) {
    if (Status s = channel->register_region(p, n); !s.ok()) return s;
  }
  state.ensured_generation = channel->registration_generation();
  return Status();
}

}  // namespace weightsync
