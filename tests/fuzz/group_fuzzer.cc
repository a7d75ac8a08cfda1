// libFuzzer harness for the trajectory channel's decoder (rl/channel,
// decode_group): the bytes an authenticated generator sends the trainer. It
// must never crash, never recurse without bound, and accept only groups
// within its documented limits. Build and run: scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "channel/group_codec.h"

namespace {
void require(bool condition) {
  if (!condition) std::abort();  // a broken invariant is a finding
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto decoded = channel::decode_group(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!decoded.ok()) return 0;
  const algorithms::TrajectoryGroup& group = decoded.value();
  require(group.trajectories.size() <= channel::kMaxTrajectories);
  for (const auto& t : group.trajectories) {
    require(t.tokens.size() >= 2 && t.tokens.size() <= channel::kMaxTokens);
    require(t.generated.size() == t.tokens.size() && t.log_probs.size() == t.tokens.size());
  }
  // What was accepted encodes and decodes to the same group size again.
  auto again = channel::decode_group(channel::encode_group(group));
  require(again.ok() && again.value().trajectories.size() == group.trajectories.size());
  return 0;
}
