// RegistrationCache: the memory registrations of an RDMA-style data channel
// (ucp_mem_map, ibv_reg_mr) on the subscriber side, looked up by address
// range (Subscriber::register_memory / release_memory).
//
// A destination piece uses any registration that covers it whole: one made
// explicitly for a region many tensors live in (add()), or one made for the
// piece itself on first use (covering()). release() drops every
// registration overlapping a range (before that memory is freed, reused or
// unmapped) and bumps generation(), so that callers who ensured spans before
// (prepared pull plans) know to ensure them again.
//
// Ownership: each registration is an opaque handle plus an owner that
// deregisters it when destroyed. Threads: one thread at a time (the channel's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "weightsync/status.h"

namespace weightsync::detail {

class RegistrationCache {
 public:
  // A registration: `handle` (a ucp_mem_h, an ibv_mr*) kept alive by `owner`.
  struct Registration {
    void* handle = nullptr;
    std::shared_ptr<void> owner;
  };
  using Registrar = std::function<Result<Registration>(void* base, std::size_t bytes)>;

  explicit RegistrationCache(Registrar registrar) : registrar_(std::move(registrar)) {}

  // The handle of a registration covering [p, p + n), made now for exactly
  // that span if none does.
  Result<void*> covering(void* p, std::size_t n);
  // Registers [p, p + n) unless one registration covers it already; drops
  // registrations it contains (now redundant).
  Status add(void* p, std::size_t n);
  // Drops every registration overlapping [p, p + n); returns how many.
  std::size_t release(void* p, std::size_t n);
  void clear();

  std::uint64_t registrations() const noexcept { return registrations_; }  // made, ever
  std::uint64_t released() const noexcept { return released_; }            // dropped by release()
  std::uint64_t generation() const noexcept { return generation_; }
  std::size_t live() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    std::uintptr_t end = 0;
    Registration registration;
  };
  // The entry covering [p, p + n), or entries_.end().
  std::map<std::uintptr_t, Entry>::iterator find_covering(std::uintptr_t p, std::uintptr_t end);
  Result<void*> insert(void* p, std::size_t n);

  Registrar registrar_;
  std::map<std::uintptr_t, Entry> entries_;  // by start address
  std::uint64_t registrations_ = 0;
  std::uint64_t released_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace weightsync::detail
