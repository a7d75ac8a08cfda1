// Pull plans: destinations checked against the layout and expanded into
// reads, partial ones registered with the publisher as views.
#include "subscriber/subscriber_impl.h"

#include <algorithm>

#include "common/checksum.h"
#include "subscriber/destination_plan.h"

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

Result<std::shared_ptr<PullPlan::State>> Subscriber::Impl::plan_for(const Destination& dst) {
  auto reads = detail::plan_destination(layout, dst);
  if (!reads.ok()) return reads.status();
  auto state = std::make_shared<PullPlan::State>();
  state->owner = this;
  state->kind = dst.memory_kind();
  state->partial = reads->partial;
  state->bytes = reads->bytes;
  state->pieces = std::move(reads->pieces);
  state->view = std::move(reads->view);
  state->spans = std::move(reads->spans);
  if (state->partial && checksums && options.verify_checksum) {
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
