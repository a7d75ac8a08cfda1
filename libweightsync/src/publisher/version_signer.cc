// The publisher's signature blocks: signed on its own thread, or forwarded.
#include "publisher/version_signer.h"

#include <exception>

#include "common/log.h"
#include "common/tsan.h"

namespace weightsync::detail {

VersionSigner::VersionSigner(const WeightLayout& layout, std::shared_ptr<const SigningKey> key, std::size_t keep)
    : layout_(layout), layout_digest_(layout_digest(layout)), key_(std::move(key)), keep_(keep < 2 ? 2 : keep) {}

VersionSigner::~VersionSigner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void VersionSigner::start(const SlotRing* ring) {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || ring == nullptr || !key_) return;
  ring_ = ring;
  thread_ = std::thread([this] { sign_loop(); });
}

void VersionSigner::committed(std::uint32_t slot, std::uint64_t stamp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ring_ == nullptr) return;
    if (job_) ++counters_.superseded;  // never signed: a newer commit came first
    job_ = true;
    job_slot_ = slot;
    job_stamp_ = stamp;
  }
  cv_.notify_all();
}

void VersionSigner::store_locked(std::uint64_t version, Block block) {
  blocks_[version] = std::move(block);
  while (blocks_.size() > keep_) blocks_.erase(blocks_.begin());
  if (version > newest_done_) newest_done_ = version;
}

void VersionSigner::attach(std::uint64_t version, std::vector<std::uint8_t> block) {
  std::lock_guard<std::mutex> lock(mu_);
  forwarded_ = true;
  store_locked(version, std::make_shared<const std::vector<std::uint8_t>>(std::move(block)));
}

void VersionSigner::give_up(std::uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (version > newest_done_) newest_done_ = version;
}

bool VersionSigner::serving() const {
  std::lock_guard<std::mutex> lock(mu_);
  return key_ != nullptr || forwarded_;
}

Result<VersionSigner::Block> VersionSigner::lookup(std::uint64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!key_ && !forwarded_) {
    return Status(ErrorCode::kInvalidConfig,
                  "this publisher serves no signatures (its trainer runs without WEIGHTSYNC_SIGNING_KEY, or a "
                  "relay on the way got none from its upstream)");
  }
  auto it = blocks_.find(version);
  if (it != blocks_.end()) return it->second;
  if (version > newest_done_) {
    return Status(ErrorCode::kNotReady, "version " + std::to_string(version) + " is not signed yet; ask again");
  }
  return Status(ErrorCode::kVersionRevoked, "version " + std::to_string(version) +
                                                " has no signature here (superseded before it was signed, or "
                                                "no longer kept); pull a newer version");
}

VersionSigner::Counters VersionSigner::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void VersionSigner::sign_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || job_; });
    if (stopping_) return;
    job_ = false;
    const std::uint32_t slot = job_slot_;
    const std::uint64_t stamp = job_stamp_;
    const std::uint64_t version = stamp >> 1;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    Block block;
    try {
      // Seqlock read of the committed slot: the digests count only if the
      // slot still holds this version after they were taken.
      std::vector<Sha256Digest> chunks;
      if (ring_->stamp_before(slot) == stamp) {
        SeqlockReadScope racy_by_design;
        chunks = digest_payload(layout_, ring_->slot_data(slot));
      }
      if (!chunks.empty() || layout_.payload_bytes() == 0) {
        if (ring_->stamp_after(slot) == stamp) {
          auto signed_block = sign_version(*key_, version, layout_digest_, layout_.payload_bytes(), std::move(chunks));
          if (signed_block.ok()) {
            block = std::make_shared<const std::vector<std::uint8_t>>(signed_block->encode());
          } else {
            WS_ERROR("publisher: version {} left unsigned: {}", version, signed_block.status().to_string());
          }
        }
      }
    } catch (const std::exception& e) {
      WS_ERROR("publisher: version {} left unsigned: {}", version, e.what());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    lock.lock();
    if (block) {
      store_locked(version, std::move(block));
      ++counters_.signed_versions;
      counters_.last_sign_seconds = seconds;
      counters_.total_sign_seconds += seconds;
    } else {
      ++counters_.superseded;  // its slot was taken back while it was hashed
      if (version > newest_done_) newest_done_ = version;
    }
    cv_.notify_all();
  }
}

}  // namespace weightsync::detail
