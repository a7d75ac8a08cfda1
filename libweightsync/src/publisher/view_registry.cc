// Views of partial pulls and their per-version checksums.
#include "publisher/view_registry.h"

#include <algorithm>
#include <string>

#include "common/checksum.h"
#include "common/tsan.h"

namespace weightsync::detail {
namespace {

Status refuse(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, why);
}

// The bytes of one entry if all its ranges lie in a slot of `slot_bytes`.
Result<std::uint64_t> entry_bytes(const ViewEntry& e, std::uint64_t slot_bytes) {
  if (e.count > 1 && e.stride < e.length) return refuse("a view entry's ranges overlap (stride < length)");
  std::uint64_t last = 0, end = 0, bytes = 0;
  if (__builtin_mul_overflow(e.count - 1, e.stride, &last) || __builtin_add_overflow(last, e.offset, &last) ||
      __builtin_add_overflow(last, e.length, &end) || end > slot_bytes ||
      __builtin_mul_overflow(e.count, e.length, &bytes)) {
    return refuse("a view entry lies outside the " + std::to_string(slot_bytes) + "-byte slot");
  }
  return bytes;
}

}  // namespace

Result<ViewMsg> ViewRegistry::add(std::uint64_t session, const RegisterViewMsg& request) {
  std::uint64_t added = 0, added_ranges = 0;
  for (const auto& e : request.entries) {
    auto bytes = entry_bytes(e, slot_bytes_);
    if (!bytes.ok()) return bytes.status();
    if (__builtin_add_overflow(added, *bytes, &added) || added > slot_bytes_)
      return refuse("a view covers more bytes than the slot holds; name each byte once");
    if (__builtin_add_overflow(added_ranges, e.count, &added_ranges)) added_ranges = ~0ull;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Session& s = sessions_[session];
  if (s.entries + request.entries.size() > kMaxEntriesPerSession) {
    return refuse("views of this session would exceed " + std::to_string(kMaxEntriesPerSession) + " entries");
  }
  const std::uint64_t max_ranges = max_ranges_per_session(slot_bytes_);
  if (added_ranges > max_ranges || s.ranges + added_ranges > max_ranges) {
    return refuse("views of this session would describe more than " + std::to_string(max_ranges) +
                  " ranges (one per 64 bytes of the slot); merge adjacent ranges into longer ones");
  }
  std::shared_ptr<View> view;
  std::uint32_t id = request.view_id;
  if (id == 0) {
    if (s.views.size() >= kMaxViewsPerSession) {
      return refuse("this session already has " + std::to_string(kMaxViewsPerSession) + " views");
    }
    id = s.next_id++;
    view = std::make_shared<View>();
    s.views.emplace(id, view);
  } else {
    auto it = s.views.find(id);
    if (it == s.views.end()) return refuse("REGISTER_VIEW names view " + std::to_string(id) + ", not one of this session's");
    view = it->second;
  }
  if (view->bytes + added > slot_bytes_)
    return refuse("a view covers more bytes than the slot holds; name each byte once");
  // A new list: a hash running now keeps reading the old one (finding 1).
  auto entries = std::make_shared<std::vector<ViewEntry>>();
  entries->reserve(view->entries->size() + request.entries.size());
  entries->insert(entries->end(), view->entries->begin(), view->entries->end());
  entries->insert(entries->end(), request.entries.begin(), request.entries.end());
  view->entries = std::move(entries);
  view->bytes += added;
  view->ranges += added_ranges;
  view->stamp = 0;  // a changed view has no cached checksum
  s.entries += request.entries.size();
  s.ranges += added_ranges;
  return ViewMsg{id, view->entries->size()};
}

Result<std::uint64_t> ViewRegistry::hash_view(const std::vector<ViewEntry>& entries, const SlotRing& ring,
                                               std::uint32_t slot, std::uint64_t stamp) const {
  // Seqlock read: the bytes count only if the slot still holds `stamp` after.
  if (ring.stamp_before(slot) != stamp) {
    return Status(ErrorCode::kVersionRevoked, "the leased version was replaced before its view was hashed");
  }
  StreamHasher hasher(key_);
  const auto* base = static_cast<const std::uint8_t*>(ring.slot_data(slot));
  {
    SeqlockReadScope racy_by_design;
    for (const auto& e : entries) {
      for (std::uint64_t i = 0; i < e.count; ++i) hasher.update(base + e.offset + i * e.stride, e.length);
    }
  }
  if (ring.stamp_after(slot) != stamp) {
    return Status(ErrorCode::kVersionRevoked, "the leased version was replaced while its view was hashed");
  }
  return hasher.digest();
}

Result<std::uint64_t> ViewRegistry::checksum(std::uint64_t session, std::uint32_t view_id, const SlotRing& ring,
                                             std::uint32_t slot, std::uint64_t stamp) {
  std::shared_ptr<View> view;
  Entries entries;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto s = sessions_.find(session);
    if (s != sessions_.end()) {
      auto it = s->second.views.find(view_id);
      if (it != s->second.views.end()) view = it->second;
    }
    if (!view) return refuse("ACQUIRE_VIEW names view " + std::to_string(view_id) + ", not one of this session's");
    view->last_leased_version = std::max(view->last_leased_version, stamp >> 1);
    // Being pre-hashed for this very version: wait for it (it is already running).
    cv_.wait(lock, [&] { return view->hashing_stamp != stamp; });
    if (view->stamp == stamp && view->slot == slot && stamp != 0) return view->checksum;
    entries = view->entries;
  }
  auto sum = hash_view(*entries, ring, slot, stamp);
  if (!sum.ok()) return sum;
  std::lock_guard<std::mutex> lock(mu_);
  if (view->entries == entries) {  // not changed meanwhile: cache it
    view->slot = slot;
    view->stamp = stamp;
    view->checksum = *sum;
  }
  ++counters_.hashed_on_lease;
  return sum;
}

ViewRegistry::Counters ViewRegistry::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void ViewRegistry::start_prehashing(const SlotRing* ring) {
  if (ring == nullptr) return;
  prehasher_.start([this, ring](std::uint32_t slot, std::uint64_t stamp) { prehash(*ring, slot, stamp); });
}

void ViewRegistry::committed(std::uint32_t slot, std::uint64_t stamp) {
  prehasher_.committed(slot, stamp);  // only the newest commit matters
}

void ViewRegistry::prehash(const SlotRing& ring, std::uint32_t slot, std::uint64_t stamp) {
  const std::uint64_t version = stamp >> 1;
  std::unique_lock<std::mutex> lock(mu_);
  // Hot views: leased at the previous version or this one.
  std::vector<std::shared_ptr<View>> hot;
  for (auto& [id, session] : sessions_) {
    for (auto& [view_id, view] : session.views) {
      if (view->last_leased_version + 1 >= version && !(view->stamp == stamp && view->slot == slot)) {
        hot.push_back(view);
      }
    }
  }
  for (auto& view : hot) {
    if (prehasher_.interrupted()) break;  // stopping, or a newer commit: hash for that one instead
    view->hashing_stamp = stamp;
    const Entries entries = view->entries;  // kept alive and unchanged while hashed
    lock.unlock();
    Result<std::uint64_t> sum = std::uint64_t{0};
    try {
      sum = hash_view(*entries, ring, slot, stamp);
    } catch (...) {
      // A lease waiting for this hash must not wait forever; the watcher logs it.
      lock.lock();
      view->hashing_stamp = 0;
      cv_.notify_all();
      throw;
    }
    lock.lock();
    view->hashing_stamp = 0;
    if (sum.ok() && view->entries == entries) {  // the view did not change meanwhile
      view->slot = slot;
      view->stamp = stamp;
      view->checksum = *sum;
      ++counters_.prehashed;
    }
    cv_.notify_all();
    if (!sum.ok()) break;  // the slot was taken back already: nothing left to hash for it
  }
}

ViewRegistry::~ViewRegistry() {
  prehasher_.stop();
}

void ViewRegistry::release_session(std::uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(session);
}

}  // namespace weightsync::detail
