// zorplex/python_random.h: CPython's random.Random, draw for draw.
//
// Contract
// - PythonRandom(seed) is random.Random(seed) for an integer seed: MT19937
//   seeded by init_by_array with the 32-bit little-endian words of |seed|
//   (the key is [0] for seed 0). Every method consumes exactly the 32-bit
//   outputs that the CPython method of the same name consumes, so a sequence
//   of calls gives the same results as the same sequence in Python.
// - Only the parts Zorplex needs: next_u32 (genrand_uint32), getrandbits(k)
//   for 1 <= k <= 32, randbelow, randint, choice, sample, shuffle.
// - Preconditions are the caller's (Python raises where they fail):
//   randbelow(n) needs n >= 1 (0 gives 0 and draws nothing), randint(a, b)
//   needs a <= b (else it returns a), sample_indices needs k <= size (else it
//   returns an empty list), choice_index(0) returns 0. choice(seq) needs a
//   non-empty seq: it returns a reference into seq, and there is none to give
//   for an empty one (the library calls it only on fixed non-empty lists).
// - Not thread-safe: one generator per thread, or external locking. Plain
//   value type; copying a generator copies its state (both copies then
//   produce the same stream).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace zorplex {

class PythonRandom {
 public:
  explicit PythonRandom(std::int64_t seed);

  // The next raw 32-bit MT19937 output (CPython's genrand_uint32).
  std::uint32_t next_u32();

  // getrandbits(k) for 1 <= k <= 32: the next output shifted right by 32 - k.
  // k outside 1..32 is clamped into it.
  std::uint32_t getrandbits(int k);

  // _randbelow(n): k = bit_length(n); draw getrandbits(k) until it is < n.
  // Returns 0 (consuming nothing) for n == 0.
  std::uint64_t randbelow(std::uint64_t n);

  // randint(a, b) = a + randbelow(b - a + 1). Returns a when b < a.
  std::int64_t randint(std::int64_t a, std::int64_t b);

  // choice(seq) = seq[randbelow(len(seq))]; one or more draws even for a
  // one-element list. Returns the index, so it works for any element type.
  std::size_t choice_index(std::size_t size);

  template <typename T>
  const T& choice(const std::vector<T>& seq) {
    return seq[choice_index(seq.size())];
  }

  // sample(range(population_size), k) as CPython 3.11 does it (both its
  // pool-based and its set-based branch): the indices of the k picks, in pick
  // order. Empty when k > population_size.
  std::vector<std::size_t> sample_indices(std::size_t population_size, std::size_t k);

  // shuffle(x): for i from len-1 down to 1, j = randbelow(i + 1), swap.
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (std::size_t i = x.size(); i-- > 1;) {
      std::size_t j = static_cast<std::size_t>(randbelow(i + 1));
      std::swap(x[i], x[j]);
    }
  }

 private:
  static constexpr int kN = 624;
  void init_genrand(std::uint32_t s);
  void init_by_array(const std::vector<std::uint32_t>& key);
  void twist();

  std::array<std::uint32_t, kN> mt_{};
  int index_ = kN + 1;
};

}  // namespace zorplex
