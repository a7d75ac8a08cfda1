// weightsync/settings.h: the settings a Publisher and a Subscriber would use.
//
// Contract
// - describe_settings() resolves every setting exactly as Publisher::create()
//   and Subscriber::connect() do (option > WEIGHTSYNC_* environment >
//   default) and says where each value came from. The secret's value is never
//   returned, only whether one is set and how long it is.
// - A malformed environment variable is reported in `error` (the value is
//   then the default); creating a Publisher/Subscriber would fail with it.
// - Thread-safe (reads the environment).
#pragma once

#include <string>
#include <vector>

#include "weightsync/options.h"

namespace weightsync {

struct SettingReport {
  std::string name;         // e.g. "io_timeout_ms"
  std::string environment;  // e.g. "WEIGHTSYNC_TIMEOUT_MS"
  std::string value;        // rendered; "(none)" / "(set, 12 bytes)" for the secret
  std::string source;       // "default", "environment" or "option"
  std::string error;        // non-empty when the environment value is malformed
};

std::vector<SettingReport> describe_settings(const PublisherOptions& publisher = {},
                                             const SubscriberOptions& subscriber = {});

}  // namespace weightsync
