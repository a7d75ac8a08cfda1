// tests/rl/tiny_policy.h: the smallest policy the generator and trainer tests
// run (1 layer, d_model 32, context 256), so a rollout takes milliseconds.
// Tests that need another shape (loop_test, training_test) keep their own.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>

#include "policy/transformer.h"

namespace rltest {

inline policy::ModelConfig tiny_config() {
  policy::ModelConfig c;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.d_ff = 64;
  c.max_seq_len = 256;
  return c;
}

// A tiny policy with weights drawn from `seed` (REQUIREs that it builds).
inline policy::Transformer model_with_seed(std::uint64_t seed) {
  auto model = policy::Transformer::create(tiny_config(), seed);
  REQUIRE(model);
  return std::move(model).value();
}

}  // namespace rltest
