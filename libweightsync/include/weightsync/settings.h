// weightsync/settings.h: the settings a Publisher and a Subscriber would use.
//
// Contract
// - describe_settings() reports every row of the library's settings table
//   (libweightsync/src/common/settings_table.cc; the same list is in
//   weightsync/options.h), in table order: each setting of PublisherOptions
//   and SubscriberOptions resolved exactly as Publisher::create() and
//   Subscriber::connect() resolve it (option > WEIGHTSYNC_* environment >
//   default, then their cross-checks: e.g. encryption turns integrity on,
//   integrity turns checksums on, "localhost" binds 127.0.0.1), and the
//   variables the transports and the logger read where they use them
//   (WEIGHTSYNC_HOST_ID, WEIGHTSYNC_VERBS_DEVICE,
//   WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA, WEIGHTSYNC_UCX_DIRECT, UCX_TLS,
//   WEIGHTSYNC_LOG_LEVEL), as set or defaulted. A setting of both sides is
//   reported as the publisher resolves it, unless only the subscriber's
//   options set it. The secret's value is never returned, only whether one is
//   set and how long it is.
// - `error` says why Publisher::create() or Subscriber::connect() would fail
//   with these settings, on the row concerned (a malformed variable: its value
//   is then the default; a check between settings such as "encryption needs a
//   secret": on the setting that asks). A problem with an option that has no
//   row (max_connections, staging_chunks, slot_memory) gets a row of its own
//   named "publisher" or "subscriber".
// - Publisher::settings() and Subscriber::settings() report the same way what
//   an instance resolved.
// - Thread-safe (reads the environment, and the key files named by
//   WEIGHTSYNC_SIGNING_KEY / WEIGHTSYNC_TRUSTED_KEY to check them). Catches
//   everything and returns what it has.
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
  std::string error;        // why create()/connect() would fail with this setting; "" if it would not
  std::string description;  // one line: what the setting does
};

std::vector<SettingReport> describe_settings(const PublisherOptions& publisher = {},
                                             const SubscriberOptions& subscriber = {});

}  // namespace weightsync
