// Registrations by address range.
#include "transport/registration_cache.h"

#include <string>

namespace weightsync::detail {
namespace {

// Registrations checked below the nearest start before giving up: regions
// overlap only when a user registers across earlier ones, which is rare.
constexpr int kLookback = 8;

}  // namespace

std::map<std::uintptr_t, RegistrationCache::Entry>::iterator RegistrationCache::find_covering(std::uintptr_t p,
                                                                                             std::uintptr_t end) {
  auto it = entries_.upper_bound(p);
  for (int i = 0; i < kLookback && it != entries_.begin(); ++i) {
    --it;
    if (it->second.end >= end) return it;
  }
  return entries_.end();
}

Result<void*> RegistrationCache::insert(void* p, std::size_t n) {
  auto made = registrar_(p, n);
  if (!made.ok()) return made.status();
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  // Entries this one contains are redundant; an entry with the same start is replaced.
  for (auto it = entries_.lower_bound(begin); it != entries_.end() && it->first < begin + n;) {
    if (it->second.end <= begin + n) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  entries_[begin] = Entry{begin + n, *made};
  ++registrations_;
  return made->handle;
}

Result<void*> RegistrationCache::covering(void* p, std::size_t n) {
  if (p == nullptr || n == 0) return Status(ErrorCode::kInvalidArgument, "registering an empty destination");
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  auto it = find_covering(begin, begin + n);
  if (it != entries_.end()) return it->second.registration.handle;
  return insert(p, n);
}

Status RegistrationCache::add(void* p, std::size_t n) {
  auto handle = covering(p, n);
  return handle.ok() ? Status() : handle.status();
}

std::size_t RegistrationCache::release(void* p, std::size_t n) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const auto end = begin + n;
  std::size_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first < end && it->second.end > begin) {
      it = entries_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  released_ += dropped;
  ++generation_;
  return dropped;
}

void RegistrationCache::clear() {
  entries_.clear();
  ++generation_;
}

}  // namespace weightsync::detail
