// The publisher's delta thread and the kept chain of deltas.
#include "delta/delta_store.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "common/log.h"
#include "common/tsan.h"
#include "delta/delta_codec.h"
#include "wire/messages.h"

namespace weightsync::detail {

Result<std::unique_ptr<DeltaStore>> DeltaStore::create(const WeightLayout& layout, const SlotRing& ring,
                                                       std::size_t history, int level,
                                                       std::shared_ptr<const VersionKey> key) try {
  if (history < 1 || history > 1024) {
    return Status(ErrorCode::kInvalidConfig, "delta_history must be 1..1024 (got " + std::to_string(history) + ")");
  }
  if (level < 1 || level > 19) {
    return Status(ErrorCode::kInvalidConfig, "delta_level must be a zstd level 1..19 (got " + std::to_string(level) + ")");
  }
  if (ring.slot_memory_kind() != MemoryKind::kHost) {
    return Status(ErrorCode::kInvalidConfig, "deltas need host slots: the publisher encodes them on the CPU");
  }
  std::unique_ptr<DeltaStore> store(new DeltaStore(layout, ring, history, level, std::move(key)));
  store->watcher_.start(
      [s = store.get()](std::uint32_t slot, std::uint64_t stamp) { s->absorb(slot, stamp); });
  return store;
} catch (const std::exception& e) {
  return Status(ErrorCode::kInternal, std::string("delta store: ") + e.what());
}

DeltaStore::DeltaStore(const WeightLayout& layout, const SlotRing& ring, std::size_t history, int level,
                       std::shared_ptr<const VersionKey> key)
    : layout_(layout),
      ring_(ring),
      history_(history),
      level_(level),
      element_bytes_(delta_element_bytes(layout)),
      image_bytes_(layout.total_bytes()),
      key_(std::move(key)),
      previous_(layout.total_bytes()),
      newest_(layout.total_bytes()) {}

DeltaStore::~DeltaStore() {
  stop();
}

void DeltaStore::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  watcher_.stop();
}

void DeltaStore::committed(std::uint32_t slot, std::uint64_t stamp) {
  watcher_.committed(slot, stamp);  // only the newest commit matters
}

DeltaStoreStats DeltaStore::stats() const {
  const std::uint64_t skipped = watcher_.counters().skipped;
  std::lock_guard<std::mutex> lock(mu_);
  DeltaStoreStats out = stats_;
  out.skipped = skipped;
  return out;
}

void DeltaStore::absorb(std::uint32_t slot, std::uint64_t stamp) {
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t version = stamp >> 1;
  // Seqlock read: the copy counts only if the slot held `stamp` throughout.
  if (ring_.stamp_before(slot) != stamp) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.dropped;
    return;
  }
  {
    SeqlockReadScope racy_by_design;
    std::memcpy(newest_.data(), ring_.slot_data(slot), image_bytes_);
  }
  if (ring_.stamp_after(slot) != stamp) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.dropped;
    return;
  }
  const std::uint64_t checksum = version_checksum(layout_, newest_.data(), key_);
  std::shared_ptr<std::vector<std::uint8_t>> compressed;
  bool smaller = false;
  if (previous_version_ != 0) {
    Status s = encode_delta(previous_.data(), newest_.data(), image_bytes_, element_bytes_, level_, scratch_,
                            encoded_);
    if (!s.ok()) {
      WS_WARN("publisher: delta {} -> {}: {}", previous_version_, version, s.to_string());
    } else if (encoded_.size() < layout_.payload_bytes()) {
      smaller = true;
      compressed = std::make_shared<std::vector<std::uint8_t>>(encoded_);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::uint64_t from = previous_version_;
  std::swap(previous_, newest_);
  previous_version_ = version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absorbed_ = version;
    if (listener_) listener_();
    if (from == 0) return;
    ++stats_.computed;
    stats_.last_seconds = seconds;
    stats_.last_bytes = encoded_.size();
    if (!smaller) {
      // No chain can reach the newest version through this step.
      ++stats_.not_smaller;
      links_.clear();
    } else {
      links_.push_back(DeltaLink{from, version, checksum, std::move(compressed)});
      while (links_.size() > history_) links_.pop_front();
    }
  }
  cv_.notify_all();
  WS_DEBUG("publisher: delta {} -> {}: {} bytes in {:.1f} ms", from, version, encoded_.size(), seconds * 1e3);
}

DeltaReadiness DeltaStore::readiness(std::uint64_t have, std::uint64_t at_least) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || absorbed_ >= at_least) return DeltaReadiness::kNow;
  // The next link starts at the newest version absorbed: a chain from `have`
  // can still come only through a kept link, that version, or a version the
  // thread has not reached yet.
  if (have >= absorbed_) return DeltaReadiness::kLater;
  for (const auto& link : links_) {
    if (link.from == have) return DeltaReadiness::kLater;
  }
  return DeltaReadiness::kNever;
}

std::chrono::milliseconds DeltaStore::refusal_hold(std::uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = refusals_.find(session);
  if (it == refusals_.end() || it->second.count < kFreeRefusals) return std::chrono::milliseconds(0);
  const auto ends = it->second.start + std::chrono::seconds(1);
  const auto now = std::chrono::steady_clock::now();
  if (now >= ends) {
    refusals_.erase(it);
    return std::chrono::milliseconds(0);
  }
  return std::chrono::ceil<std::chrono::milliseconds>(ends - now);
}

void DeltaStore::note_refusal(std::uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  RefusalWindow& w = refusals_[session];
  if (w.count == 0 || now - w.start >= std::chrono::seconds(1)) w = RefusalWindow{now, 0};
  ++w.count;
}

void DeltaStore::release_session(std::uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  refusals_.erase(session);
}

void DeltaStore::set_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
}

bool DeltaStore::try_begin_send() {
  std::lock_guard<std::mutex> lock(mu_);
  if (sending_ >= send_cap_) return false;
  ++sending_;
  return true;
}

void DeltaStore::end_send() {
  std::lock_guard<std::mutex> lock(mu_);
  if (sending_ > 0) --sending_;
}

void DeltaStore::set_send_cap(std::size_t cap) {
  std::lock_guard<std::mutex> lock(mu_);
  send_cap_ = std::max<std::size_t>(cap, 1);
}

Result<std::vector<DeltaLink>> DeltaStore::chain(std::uint64_t have, std::uint64_t at_least,
                                                 std::uint64_t max_bytes, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto reaches = [&] { return stopping_ || (!links_.empty() && links_.back().to >= at_least); };
  cv_.wait_for(lock, wait, reaches);
  if (links_.empty() || links_.back().to < at_least) {
    return Status(ErrorCode::kNotReady, "no delta reaches version " + std::to_string(at_least) + " yet");
  }
  std::size_t first = 0;
  while (first < links_.size() && links_[first].from != have) ++first;
  if (first == links_.size()) {
    return Status(ErrorCode::kNotReady, "no delta starts at version " + std::to_string(have) +
                                            " (too old, or never published here)");
  }
  if (links_.size() - first > kMaxDeltaChainApplied) {
    return Status(ErrorCode::kNotReady, "the chain from version " + std::to_string(have) + " has " +
                                            std::to_string(links_.size() - first) + " deltas; a subscriber applies at most " +
                                            std::to_string(kMaxDeltaChainApplied));
  }
  std::vector<DeltaLink> out(links_.begin() + static_cast<std::ptrdiff_t>(first), links_.end());
  std::uint64_t bytes = 0;
  for (const auto& link : out) bytes += link.compressed->size();
  if (bytes >= max_bytes) {
    return Status(ErrorCode::kNotReady, "the deltas from version " + std::to_string(have) + " (" +
                                            std::to_string(bytes) + " bytes) are not smaller than the version");
  }
  ++stats_.served;
  return out;
}

}  // namespace weightsync::detail
