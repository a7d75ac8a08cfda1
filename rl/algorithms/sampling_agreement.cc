// algorithms/sampling_agreement.cc: see sampling_agreement.h.
#include "algorithms/sampling_agreement.h"

#include <sstream>

namespace algorithms {

zorplex::Result<bool> SamplingAgreement::accept(const TrajectoryGroup& group) {
  if (!pinned_) {
    pinned_ = group.temperature;
    return true;
  }
  if (group.temperature == *pinned_) return true;
  ++refused_;
  std::ostringstream why;
  why << "generator " << group.generator << " sampled at temperature " << group.temperature << " but the trainer "
      << (expected_ ? "was started with --temperature " : "trains at ") << *pinned_
      << ": its behaviour log-probs would give wrong importance ratios; start every generator with --temperature "
      << *pinned_ << " (or the trainer with the generators' value)";
  return zorplex::Error{why.str()};
}

}  // namespace algorithms
