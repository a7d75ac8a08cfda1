// The publisher's signature blocks: signed on its own thread, or forwarded.
#include "publisher/version_signer.h"

#include <exception>

#include "common/log.h"
#include "common/tsan.h"

namespace weightsync::detail {

VersionSigner::VersionSigner(const WeightLayout& layout, std::shared_ptr<const SigningKey> key, std::size_t keep)
    : layout_(layout), layout_digest_(layout_digest(layout)), key_(std::move(key)), keep_(keep < 2 ? 2 : keep) {}

VersionSigner::~VersionSigner() {
  watcher_.stop();
}

void VersionSigner::start(const SlotRing* ring) {
  if (ring == nullptr || !key_) return;
  watcher_.start([this, ring](std::uint32_t slot, std::uint64_t stamp) { sign(*ring, slot, stamp); });
}

void VersionSigner::committed(std::uint32_t slot, std::uint64_t stamp) {
  watcher_.committed(slot, stamp);  // a newer commit before the thread takes this one: never signed
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
  Counters out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = counters_;
  }
  out.superseded += watcher_.counters().skipped;
  return out;
}

void VersionSigner::sign(const SlotRing& ring, std::uint32_t slot, std::uint64_t stamp) {
  const std::uint64_t version = stamp >> 1;
  const auto start = std::chrono::steady_clock::now();
  Block block;
  try {
    // Seqlock read of the committed slot: the digests count only if the
    // slot still holds this version after they were taken.
    std::vector<Sha256Digest> chunks;
    if (ring.stamp_before(slot) == stamp) {
      SeqlockReadScope racy_by_design;
      chunks = digest_payload(layout_, ring.slot_data(slot));
    }
    if (!chunks.empty() || layout_.payload_bytes() == 0) {
      if (ring.stamp_after(slot) == stamp) {
        auto signed_block =
            sign_version(*key_, version, layout_digest_, layout_.payload_bytes(), std::move(chunks));
        if (signed_block.ok()) {
          block = std::make_shared<const std::vector<std::uint8_t>>(signed_block->encode());
        } else {
          WS_ERROR("publisher: version {} left unsigned: {}", version, signed_block.status().to_string());
        }
      }
    }
  } catch (const std::exception& e) {
    WS_ERROR("publisher: version {} left unsigned: {}", version, e.what());
  } catch (...) {
    WS_ERROR("publisher: version {} left unsigned: an unknown exception", version);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  if (block) {
    store_locked(version, std::move(block));
    ++counters_.signed_versions;
    counters_.last_sign_seconds = seconds;
    counters_.total_sign_seconds += seconds;
  } else {
    ++counters_.superseded;  // its slot was taken back while it was hashed
    if (version > newest_done_) newest_done_ = version;
  }
}

}  // namespace weightsync::detail
