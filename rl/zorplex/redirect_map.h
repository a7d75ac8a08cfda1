// zorplex/redirect_map.h: the LOOKUP table of the recursive kind, where some
// words answer "SEE: <other word>".
//
// Contract
// - RedirectMap::build() is the original's set-up, draw for draw: it shuffles
//   a copy of words() with the task generator, keeps the first 13 as terminals
//   (their table value), and gives each of the other 13 (the redirectors, in
//   shuffled order) a chain of (i % 3) + 1 links ending at a terminal. Entries
//   keep insertion order: terminals first; a re-assigned key keeps its place,
//   a new key goes to the end. It consumes the generator it is given; that is
//   why the recursive task stream differs from the other kinds.
// - After build() the map is immutable: const methods are safe from any
//   number of threads. Plain value type.
// - Redirects never form a cycle (each key's final link is the last chain
//   that wrote it), but chains may concatenate; resolve() gives up after
//   kMaxResolveSteps lookups, as the original does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zorplex/python_random.h"
#include "zorplex/value_table.h"

namespace zorplex {

// The recursive kind's maximum chain depth (redirects per chain).
constexpr int kMaxRedirectDepth = 3;
// Lookups resolve() makes before giving up (the original's max_steps = 10).
constexpr int kMaxResolveSteps = 10;

struct RedirectEntry {
  std::string word;
  bool is_redirect = false;
  int value = 0;       // when !is_redirect
  std::string target;  // when is_redirect: the word after "SEE: "
};

class RedirectMap {
 public:
  static RedirectMap build(const ValueTable& table, PythonRandom& task_rng);

  // Insertion order, as the original's dict.
  const std::vector<RedirectEntry>& entries() const { return entries_; }
  // nullptr for a word not in the map (only possible for non-words).
  const RedirectEntry* find(std::string_view word) const;
  // The keys whose value is a redirect, in map order (the task draws from it).
  std::vector<std::string> redirect_words() const;

  struct Resolution {
    std::vector<std::string> chain;  // word, then each redirect target visited
    std::optional<int> value;        // empty if no terminal within kMaxResolveSteps lookups
  };
  Resolution resolve(std::string_view word) const;

 private:
  void set(const std::string& word, RedirectEntry entry);
  std::vector<RedirectEntry> entries_;
};

}  // namespace zorplex
