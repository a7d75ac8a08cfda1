// SubscriberSettings: every setting Subscriber::connect() uses, resolved from
// SubscriberOptions through the settings table (common/settings_table.h), with
// where each came from, and checked against each other.
//
// Contract
// - resolve_subscriber_settings(options) is the whole of
//   Subscriber::connect()'s configuration step: each subscriber and
//   both-sides row of the table (option > WEIGHTSYNC_* variable > default),
//   then the cross-checks: the trusted key file is loaded, encryption implies
//   integrity, integrity (and so encryption) needs a secret, and the staging
//   ring has at least 2 chunks of at least 64 KiB. The transport's name is
//   checked when it is negotiated (subscriber/negotiation.h).
// - Errors: kInvalidConfig (or the key loader's code) with the message
//   Subscriber::connect() returns. The overload with `problems` never fails:
//   it returns what resolves (a malformed value stays at its default) and
//   lists every problem with the row it concerns, for describe_settings().
// - Thread-safe (reads the environment and the key file).
#pragma once

#include <optional>
#include <vector>

#include "auth/signing.h"
#include "common/settings_table.h"
#include "weightsync/options.h"
#include "weightsync/settings.h"

namespace weightsync::detail {

struct SubscriberSettings {
  Setting<std::string> secret;
  Setting<int> connect_timeout_ms;
  Setting<int> io_timeout_ms;
  Setting<std::string> transport;  // "auto" or a transport's name
  Setting<bool> integrity;         // on with encryption (from encryption's source)
  Setting<bool> encryption;
  Setting<std::string> trusted_key;     // the key file's path; "" none
  std::optional<VerifyKey> verify_key;  // loaded from trusted_key

  // Every subscriber and both-sides row of the table, in table order.
  std::vector<SettingReport> reports() const;
};

Result<SubscriberSettings> resolve_subscriber_settings(const SubscriberOptions& options);
SubscriberSettings resolve_subscriber_settings(const SubscriberOptions& options,
                                               std::vector<SettingProblem>* problems);

}  // namespace weightsync::detail
