// The fanout bench's relay role when this tree has no weightsync::Relay
// (weightsync/relay.h): tree and chain topologies are reported as not built.
#include "fanout.h"
#include "line_stream.h"
#include "role_loop.h"

namespace wsbench {

bool fanout_relays_built(std::string* why) {
  *why = "relays not built: this tree has no weightsync/relay.h";
  return false;
}

int run_fanout_relay(const std::string&, const std::string&, const std::string&, bool, std::uint64_t) {
  wsutil::LineStream io(0, 1);
  std::string why;
  fanout_relays_built(&why);
  return startup_error(io, why);
}

}  // namespace wsbench
