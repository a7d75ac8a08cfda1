// The TCP data transport's factory (the only header the registry includes):
// the fallback every publisher with host slots offers. Publisher side: READ
// requests on authenticated data connections, answered from slot memory
// (tcp_data_server.h); its offer advertises the streaming extension
// (docs/protocol.md, "Streaming"). Subscriber side: a second authenticated
// connection, received straight into the destination (tcp_data_channel.h),
// encrypted when ChannelParams::encryption is set.
#pragma once

#include "transport/transport.h"

namespace weightsync::detail {

const TransportFactory& tcp_transport_factory();

}  // namespace weightsync::detail
