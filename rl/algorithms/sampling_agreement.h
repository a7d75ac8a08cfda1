// algorithms/sampling_agreement.h: the trainer's check that every group it
// trains on was sampled with the parameters its behaviour log-probs depend
// on (the temperature; top_p is carried for the record, as the recorded
// log-probs are the untruncated temperature-scaled ones, policy/sampling.h).
//
// Contract
// - With an expected temperature (the trainer's --temperature), a group
//   sampled at any other is refused. Without one, the first group accepted
//   pins the temperature and later groups must match it: the trainer uses
//   what the generators sampled at, and never mixes two in one batch.
// - accept(group) returns the Error that says why a group is refused (both
//   temperatures and the generator), or true; refusals are counted.
// - pinned() is the temperature every accepted group shares (nullopt until
//   the first is accepted, when none was expected).
// - One thread (the trainer's). Temperatures compare exactly: both sides
//   parse the same decimal text into a double, and the group carries the
//   generator's double bit for bit.
#pragma once

#include <cstdint>
#include <optional>

#include "algorithms/replay_buffer.h"
#include "zorplex/result.h"

namespace algorithms {

class SamplingAgreement {
 public:
  explicit SamplingAgreement(std::optional<double> expected_temperature = std::nullopt)
      : pinned_(expected_temperature), expected_(expected_temperature.has_value()) {}

  zorplex::Result<bool> accept(const TrajectoryGroup& group);
  std::optional<double> pinned() const { return pinned_; }
  std::uint64_t refused() const { return refused_; }

 private:
  std::optional<double> pinned_;
  bool expected_ = false;
  std::uint64_t refused_ = 0;
};

}  // namespace algorithms
