#include "zorplex/value_table.h"

#include <utility>

namespace zorplex {

const std::vector<std::string>& words() {
  static const std::vector<std::string> kWords = {
      "apple",  "banana", "cat",      "dog",    "elephant", "fish",  "grape",  "house", "ice",
      "jungle", "kite",   "lemon",    "moon",   "night",    "ocean", "piano",  "queen", "river",
      "sun",    "tree",   "umbrella", "violet", "water",    "xray",  "yellow", "zebra"};
  return kWords;
}

std::optional<std::size_t> word_index(std::string_view word) {
  const std::vector<std::string>& all = words();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i] == word) return i;
  }
  return std::nullopt;
}

ValueTable::ValueTable(std::int64_t seed, std::vector<int> values)
    : seed_(seed), values_(std::move(values)) {}

ValueTable::ValueTable(std::int64_t seed) : ValueTable(seed, {}) {
  PythonRandom rng(seed);
  *this = draw(seed, rng);
}

ValueTable ValueTable::draw(std::int64_t seed, PythonRandom& rng) {
  std::vector<int> values;
  values.reserve(words().size());
  for (std::size_t i = 0; i < words().size(); ++i) values.push_back(static_cast<int>(rng.randint(1, 100)));
  return ValueTable(seed, std::move(values));
}

std::optional<int> ValueTable::value_of(std::string_view word) const {
  std::optional<std::size_t> i = word_index(word);
  if (!i) return std::nullopt;
  return values_[*i];
}

}  // namespace zorplex
