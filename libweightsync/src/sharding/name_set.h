// NameSet: a set of names (views into strings the caller keeps alive) whose
// nodes come from one arena, so that checking tens of thousands of tensor
// names for duplicates allocates once, not once per name.
//
// Contract
// - insert() returns false when the name was already in the set.
// - The viewed strings must outlive the set. Not thread-safe; not copyable.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <string_view>
#include <unordered_set>

namespace weightsync::detail {

class NameSet {
 public:
  explicit NameSet(std::size_t expected) : names_(&arena_) { names_.reserve(expected); }
  NameSet(const NameSet&) = delete;
  NameSet& operator=(const NameSet&) = delete;

  bool insert(std::string_view name) { return names_.insert(name).second; }

 private:
  std::pmr::monotonic_buffer_resource arena_;
  std::pmr::unordered_set<std::string_view> names_;
};

}  // namespace weightsync::detail
