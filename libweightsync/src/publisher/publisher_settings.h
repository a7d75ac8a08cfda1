// PublisherSettings: every setting Publisher::create() uses, resolved from
// PublisherOptions through the settings table (common/settings_table.h), with
// where each came from, and checked against each other.
//
// Contract
// - resolve_publisher_settings(options) is the whole of Publisher::create()'s
//   configuration step: each publisher and both-sides row of the table
//   (option > WEIGHTSYNC_* variable > default), then the cross-checks:
//   the slot memory kind (kCuda needs a usable device), encryption needs a
//   secret and implies integrity, integrity needs a secret and host slots and
//   turns checksums on, checksums and signatures need host slots, the slot
//   allocator is one of the accepted values, max_connections,
//   max_handshakes and max_handshakes_per_address are at least 1, a
//   non-loopback bind address needs a secret ("localhost" becomes
//   127.0.0.1), and the signing key file is loaded.
// - Errors: kInvalidConfig (or the key loader's code) with the message
//   Publisher::create() returns. The overload with `problems` never fails:
//   it returns what resolves (a malformed value stays at its default) and
//   lists every problem with the row it concerns, for describe_settings().
// - Thread-safe (reads the environment and the key file).
#pragma once

#include <memory>
#include <vector>

#include "auth/signing.h"
#include "common/settings_table.h"
#include "weightsync/options.h"
#include "weightsync/settings.h"

namespace weightsync::detail {

struct PublisherSettings {
  Setting<std::string> secret;
  Setting<std::string> bind_address;  // "localhost" already 127.0.0.1
  Setting<int> io_timeout_ms;
  Setting<int> handshake_timeout_ms;
  Setting<int> idle_timeout_ms;
  Setting<int> lease_timeout_ms;
  Setting<bool> checksum;  // on with integrity (from integrity's source)
  Setting<bool> deltas;
  Setting<bool> integrity;  // on with encryption (from encryption's source)
  Setting<bool> encryption;
  Setting<std::string> signing_key;              // the key file's path; "" none
  Setting<std::string> slot_allocator;           // auto, memfd or ucx, as asked
  bool cuda_slots = false;                       // PublisherOptions::slot_memory == kCuda
  std::shared_ptr<const SigningKey> signer_key;  // loaded from signing_key; null without one

  // Every publisher and both-sides row of the table, in table order.
  std::vector<SettingReport> reports() const;
};

Result<PublisherSettings> resolve_publisher_settings(const PublisherOptions& options);
PublisherSettings resolve_publisher_settings(const PublisherOptions& options,
                                             std::vector<SettingProblem>* problems);

}  // namespace weightsync::detail
