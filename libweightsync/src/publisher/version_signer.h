// VersionSigner: the signature blocks a publisher serves (FETCH_SIGNATURE;
// auth/signing.h, docs/security.md "Versions the trainer signs").
//
// Two ways to fill it:
// - signing (the trainer: a SigningKey): committed() hands each commit to the
//   signer's own thread (a CommitWatcher, ring/commit_watcher.h), which
//   digests the version's payload straight from its slot (a seqlock read: a
//   slot taken back meanwhile yields no block) and signs it. The publishing
//   thread never waits; when versions come faster than they can be signed,
//   only the newest waiting one is signed (the others are superseded: nobody
//   can lease them any more anyway).
// - forwarding (a relay: no key): attach() stores the block its upstream
//   served, unchanged.
// It keeps the blocks of the newest `keep` versions.
//
// lookup(v): the encoded block; kNotReady while v is newer than every
// version signed or attached so far (its block is on its way: ask again);
// kVersionRevoked when v will never have one here (superseded before it was
// signed, no longer kept, its slot was rewritten while it was hashed, or a
// relay's upstream served none for it); kInvalidConfig when this publisher
// serves no signatures (no key, and nothing forwarded).
//
// Threads: committed() from the publishing thread; attach() and lookup()
// from any thread. The destructor stops and joins the thread; the ring must
// outlive the signer. Never throws past its thread: an OpenSSL failure (any
// exception) leaves the version unsigned and is logged at error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "auth/signing.h"
#include "ring/commit_watcher.h"
#include "ring/slot_ring.h"
#include "weightsync/layout.h"

namespace weightsync::detail {

class VersionSigner {
 public:
  using Block = std::shared_ptr<const std::vector<std::uint8_t>>;

  // key: the trainer's (signing); null: forwarding only.
  VersionSigner(const WeightLayout& layout, std::shared_ptr<const SigningKey> key, std::size_t keep);
  ~VersionSigner();
  VersionSigner(const VersionSigner&) = delete;
  VersionSigner& operator=(const VersionSigner&) = delete;

  // Starts the signing thread over `ring` (with a key), once.
  void start(const SlotRing* ring);
  // `slot` now holds committed version `stamp >> 1`. Nothing before start().
  void committed(std::uint32_t slot, std::uint64_t stamp);
  // A relay's forwarded block for `version` (kept as is, never checked here:
  // the subscribers check it against the trainer's key).
  void attach(std::uint64_t version, std::vector<std::uint8_t> block);
  // A relay got no block for `version` from its upstream: it never will.
  void give_up(std::uint64_t version);
  // Whether this publisher serves signatures at all: it signs, or it has
  // forwarded at least one block. If not, lookup() says so (kInvalidConfig).
  bool serving() const;
  // A relay's publisher: it may forward blocks (set before serving starts).
  void enable_forwarding() { forwarding_.store(true); }
  // Whether SLOT_TABLE offers FETCH_SIGNATURE (kFeatureSignatures): it signs
  // or may forward. Immutable once the server runs.
  bool offered() const noexcept { return key_ != nullptr || forwarding_.load(); }
  Result<Block> lookup(std::uint64_t version) const;

  struct Counters {
    std::uint64_t signed_versions = 0;
    std::uint64_t superseded = 0;       // committed but never signed (skipped, or its slot taken back)
    double last_sign_seconds = 0;       // digest + signature of the last version signed
    double total_sign_seconds = 0;
  };
  Counters counters() const;
  bool signing() const noexcept { return key_ != nullptr; }

 private:
  // The signing thread's work for one commit.
  void sign(const SlotRing& ring, std::uint32_t slot, std::uint64_t stamp);
  void store_locked(std::uint64_t version, Block block);

  const WeightLayout& layout_;
  const Sha256Digest layout_digest_;
  std::shared_ptr<const SigningKey> key_;
  const std::size_t keep_;

  mutable std::mutex mu_;
  std::map<std::uint64_t, Block> blocks_;
  std::uint64_t newest_done_ = 0;  // newest version signed, attached or given up
  bool forwarded_ = false;         // attach() was called at least once
  std::atomic<bool> forwarding_{false};  // a relay's: set right after the publisher is made
  Counters counters_;  // superseded: those whose slot was taken back; counters() adds the skipped ones
  // Last: stopped (and its thread joined) before the blocks go.
  CommitWatcher watcher_{"publisher: signing"};
};

}  // namespace weightsync::detail
