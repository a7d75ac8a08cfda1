// zorplex/value_table.h: the 26 words and their seeded "zorplex values".
//
// Contract
// - words() is the fixed list apple .. zebra in the order the spec gives; it
//   is the order every draw over "the words" uses.
// - ValueTable(seed) draws, with a fresh PythonRandom(seed), randint(1, 100)
//   for each word in list order (make_zorplex_table in the original);
//   ValueTable::draw(seed, rng) makes the same draws from a generator the
//   caller owns (the task generator keeps it, as the original does).
// - A ValueTable is immutable after construction: const methods are safe to
//   call from any number of threads. Plain value type.
// - value_of() of a word outside the list is std::nullopt (the caller turns
//   that into UNKNOWN / UNKNOWN_WORD); lookups are exact (already lower-case).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zorplex/python_random.h"

namespace zorplex {

// The 26 words, apple .. zebra.
const std::vector<std::string>& words();

// Index of word in words(), or std::nullopt.
std::optional<std::size_t> word_index(std::string_view word);

class ValueTable {
 public:
  explicit ValueTable(std::int64_t seed);
  // seed is recorded (multi_step keys use it); the values come from rng.
  static ValueTable draw(std::int64_t seed, PythonRandom& rng);

  std::int64_t seed() const { return seed_; }
  // The value of words()[i]; i must be < words().size().
  int value_at(std::size_t i) const { return values_[i]; }
  std::optional<int> value_of(std::string_view word) const;

 private:
  ValueTable(std::int64_t seed, std::vector<int> values);

  std::int64_t seed_;
  std::vector<int> values_;
};

}  // namespace zorplex
