// MT19937 with CPython's seeding (Modules/_randommodule.c) and the draw
// patterns of Lib/random.py.
#include "zorplex/python_random.h"

#include <cmath>
#include <unordered_set>
#include <utility>

namespace zorplex {
namespace {

constexpr int kM = 397;
constexpr std::uint32_t kMatrixA = 0x9908b0dfU;
constexpr std::uint32_t kUpperMask = 0x80000000U;
constexpr std::uint32_t kLowerMask = 0x7fffffffU;

int bit_length(std::uint64_t n) {
  int bits = 0;
  while (n != 0) {
    ++bits;
    n >>= 1;
  }
  return bits;
}

}  // namespace

PythonRandom::PythonRandom(std::int64_t seed) {
  // |seed| without overflow for INT64_MIN.
  std::uint64_t magnitude =
      seed < 0 ? static_cast<std::uint64_t>(-(seed + 1)) + 1 : static_cast<std::uint64_t>(seed);
  std::vector<std::uint32_t> key;
  while (magnitude != 0) {
    key.push_back(static_cast<std::uint32_t>(magnitude & 0xffffffffU));
    magnitude >>= 32;
  }
  if (key.empty()) key.push_back(0);
  init_by_array(key);
}

void PythonRandom::init_genrand(std::uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
  }
  index_ = kN;
}

void PythonRandom::init_by_array(const std::vector<std::uint32_t>& key) {
  init_genrand(19650218U);
  int i = 1;
  std::size_t j = 0;
  const std::size_t key_length = key.size();
  for (std::size_t k = (static_cast<std::size_t>(kN) > key_length ? kN : key_length); k != 0; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<std::uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (int k = kN - 1; k != 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<std::uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;
  index_ = kN;
}

void PythonRandom::twist() {
  for (int kk = 0; kk < kN; ++kk) {
    std::uint32_t y = (mt_[kk] & kUpperMask) | (mt_[(kk + 1) % kN] & kLowerMask);
    mt_[kk] = mt_[(kk + kM) % kN] ^ (y >> 1) ^ ((y & 1U) != 0 ? kMatrixA : 0U);
  }
  index_ = 0;
}

std::uint32_t PythonRandom::next_u32() {
  if (index_ >= kN) twist();
  std::uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

std::uint32_t PythonRandom::getrandbits(int k) {
  if (k < 1) k = 1;
  if (k > 32) k = 32;
  return next_u32() >> (32 - k);
}

std::uint64_t PythonRandom::randbelow(std::uint64_t n) {
  if (n == 0) return 0;
  const int k = bit_length(n);
  if (k > 32) {
    // CPython concatenates 32-bit words, least significant first, and drops
    // the surplus high bits of the last word.
    while (true) {
      std::uint64_t low = next_u32();
      std::uint64_t high = next_u32() >> (64 - k);
      std::uint64_t r = low | (high << 32);
      if (r < n) return r;
    }
  }
  std::uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::int64_t PythonRandom::randint(std::int64_t a, std::int64_t b) {
  if (b < a) return a;
  const std::uint64_t width = static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(a) + 1U;
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + randbelow(width));
}

std::size_t PythonRandom::choice_index(std::size_t size) {
  return static_cast<std::size_t>(randbelow(size));
}

std::vector<std::size_t> PythonRandom::sample_indices(std::size_t population_size, std::size_t k) {
  std::vector<std::size_t> result;
  if (k > population_size) return result;
  result.reserve(k);
  // Lib/random.py: a list of the population is cheaper than a set of the picks
  // unless the population is large compared with k.
  std::size_t setsize = 21;
  if (k > 5) {
    setsize += static_cast<std::size_t>(
        std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  }
  if (population_size <= setsize) {
    std::vector<std::size_t> pool(population_size);
    for (std::size_t i = 0; i < population_size; ++i) pool[i] = i;
    for (std::size_t i = 0; i < k; ++i) {
      std::size_t j = static_cast<std::size_t>(randbelow(population_size - i));
      result.push_back(pool[j]);
      pool[j] = pool[population_size - i - 1];
    }
    return result;
  }
  std::unordered_set<std::size_t> selected;
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t j = static_cast<std::size_t>(randbelow(population_size));
    while (selected.count(j) != 0) j = static_cast<std::size_t>(randbelow(population_size));
    selected.insert(j);
    result.push_back(j);
  }
  return result;
}

}  // namespace zorplex
