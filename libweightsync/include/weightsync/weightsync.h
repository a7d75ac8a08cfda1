// weightsync/weightsync.h: the umbrella header of libweightsync.
//
// libweightsync moves model weights from a trainer (Publisher) to generators
// (Subscriber): a versioned ring of pre-allocated slots on the trainer, pulled
// by the generators straight into their own memory, never torn, always
// authenticated. Start with docs/ in the source tree, or README.md.
#pragma once

#include "weightsync/adapter_publisher.h"
#include "weightsync/cancel.h"
#include "weightsync/cuda.h"
#include "weightsync/fp8.h"
#include "weightsync/layout.h"
#include "weightsync/log.h"
#include "weightsync/memory.h"
#include "weightsync/metrics.h"
#include "weightsync/narrow.h"
#include "weightsync/options.h"
#include "weightsync/publisher.h"
#include "weightsync/rank_puller.h"
#include "weightsync/relay.h"
#include "weightsync/settings.h"
#include "weightsync/sharding.h"
#include "weightsync/staged_updates.h"
#include "weightsync/status.h"
#include "weightsync/subscriber.h"
#include "weightsync/subscriber_group.h"
#include "weightsync/transports.h"
#include "weightsync/version.h"
