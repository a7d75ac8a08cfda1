// HandshakeBudget: admission and eviction of unauthenticated connections.
#include "publisher/handshake_budget.h"

namespace weightsync::detail {

std::optional<std::uint64_t> HandshakeBudget::admit(std::uint64_t id, const std::string& address,
                                                    Clock::time_point now) {
  entries_[id] = Entry{address, now};
  by_age_.insert({now, id});
  if (!address.empty()) {
    auto& same = by_address_[address];
    same.insert({now, id});
    if (same.size() > max_per_address_) return same.begin()->second;
  }
  if (entries_.size() > max_total_) return by_age_.begin()->second;
  return std::nullopt;
}

void HandshakeBudget::touch(std::uint64_t id, Clock::time_point now) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const Key old{it->second.since, id};
  by_age_.erase(old);
  by_age_.insert({now, id});
  if (!it->second.address.empty()) {
    auto& same = by_address_[it->second.address];
    same.erase(old);
    same.insert({now, id});
  }
  it->second.since = now;
}

void HandshakeBudget::remove(std::uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const Key key{it->second.since, id};
  by_age_.erase(key);
  if (!it->second.address.empty()) {
    auto same = by_address_.find(it->second.address);
    same->second.erase(key);
    if (same->second.empty()) by_address_.erase(same);
  }
  entries_.erase(it);
}

}  // namespace weightsync::detail
