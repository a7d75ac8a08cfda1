#include "zorplex/redirect_map.h"

#include <algorithm>
#include <utility>

namespace zorplex {

RedirectMap RedirectMap::build(const ValueTable& table, PythonRandom& task_rng) {
  std::vector<std::string> shuffled = words();
  task_rng.shuffle(shuffled);
  const std::size_t half = shuffled.size() / 2;
  const std::vector<std::string> terminals(shuffled.begin(), shuffled.begin() + half);
  const std::vector<std::string> redirectors(shuffled.begin() + half, shuffled.end());

  RedirectMap map;
  for (const std::string& word : terminals) {
    RedirectEntry entry;
    entry.word = word;
    entry.value = *table.value_of(word);
    map.set(word, std::move(entry));
  }
  for (std::size_t i = 0; i < redirectors.size(); ++i) {
    const std::string& word = redirectors[i];
    const int depth = static_cast<int>(i % kMaxRedirectDepth) + 1;
    std::vector<std::string> chain = {word};
    std::vector<std::string> candidates;
    for (const std::string& other : redirectors) {
      if (other != word) candidates.push_back(other);
    }
    for (int d = 0; d < depth - 1 && !candidates.empty(); ++d) {
      const std::size_t pick = task_rng.choice_index(candidates.size());
      chain.push_back(candidates[pick]);
      candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    chain.push_back(task_rng.choice(terminals));
    for (std::size_t j = 0; j + 1 < chain.size(); ++j) {
      RedirectEntry entry;
      entry.word = chain[j];
      entry.is_redirect = true;
      entry.target = chain[j + 1];
      map.set(chain[j], std::move(entry));
    }
  }
  return map;
}

void RedirectMap::set(const std::string& word, RedirectEntry entry) {
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const RedirectEntry& e) { return e.word == word; });
  if (it != entries_.end()) {
    *it = std::move(entry);
  } else {
    entries_.push_back(std::move(entry));
  }
}

const RedirectEntry* RedirectMap::find(std::string_view word) const {
  for (const RedirectEntry& entry : entries_) {
    if (entry.word == word) return &entry;
  }
  return nullptr;
}

std::vector<std::string> RedirectMap::redirect_words() const {
  std::vector<std::string> out;
  for (const RedirectEntry& entry : entries_) {
    if (entry.is_redirect) out.push_back(entry.word);
  }
  return out;
}

RedirectMap::Resolution RedirectMap::resolve(std::string_view word) const {
  Resolution resolution;
  resolution.chain.emplace_back(word);
  std::string current(word);
  for (int step = 0; step < kMaxResolveSteps; ++step) {
    const RedirectEntry* entry = find(current);
    if (entry == nullptr) return resolution;
    if (!entry->is_redirect) {
      resolution.value = entry->value;
      return resolution;
    }
    current = entry->target;
    resolution.chain.push_back(current);
  }
  return resolution;
}

}  // namespace zorplex
