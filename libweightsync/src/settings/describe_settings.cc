// describe_settings(): every row of the settings table as Publisher::create()
// and Subscriber::connect() resolve it (publisher/publisher_settings.h,
// subscriber/subscriber_settings.h), and the rows the transports and the
// logger read themselves, reported.
#include <string>

#include "common/host_identity.h"
#include "common/settings_table.h"
#include "publisher/publisher_settings.h"
#include "subscriber/subscriber_settings.h"
#include "weightsync/log.h"
#include "weightsync/settings.h"

namespace weightsync {
namespace {

using detail::SettingId;
using detail::SettingRow;
using detail::SettingSide;

// The report of `row` in a side's reports (every row of that side is there;
// tests/unit/settings_table_test.cc checks).
SettingReport find_report(const std::vector<SettingReport>& reports, const SettingRow& row) {
  for (const SettingReport& r : reports) {
    if (r.name == row.name) return r;
  }
  return SettingReport{
      row.name, row.environment, row.fallback, "default", "not resolved (a library bug)", row.description};
}

// A row read where it is used: its variable as set, else its default.
SettingReport informational(const SettingRow& row) {
  const char* raw = detail::environment_value(row.id);
  SettingReport r{row.name, row.environment, "", raw != nullptr ? "environment" : "default",
                  "",       row.description};
  if (row.id == SettingId::kHostId) {
    auto host = detail::host_identity();
    if (!host.ok()) {
      r.value = row.unset;
      r.source = "default";
      r.error = host.status().message();
    } else {
      r.value = host->empty() ? "(unknown: procfs unreadable, so no peer counts as same-host)" : *host;
    }
  } else if (row.id == SettingId::kLogLevel) {
    r.value = to_string(log_level());  // set_log_level() may have changed it since
    if (raw != nullptr && !detail::parse_log_level(raw)) {
      r.source = "default";
      r.error = std::string(row.environment) + "='" + raw + "' is not one of " + row.accepted;
    }
  } else {
    r.value =
        raw != nullptr ? raw : (row.fallback[0] == '\0' && row.unset != nullptr ? row.unset : row.fallback);
  }
  return r;
}

// Puts each problem on the row it concerns (the first one there wins); a
// problem with no row (an option such as max_connections) gets a line of its own.
void attach(std::vector<SettingReport>& out, const std::vector<detail::SettingProblem>& problems,
            const char* side) {
  for (const detail::SettingProblem& p : problems) {
    SettingReport* target = nullptr;
    if (p.row) {
      const SettingRow& row = detail::setting_row(*p.row);
      for (SettingReport& r : out) {
        if (r.name == row.name) target = &r;
      }
    }
    if (target == nullptr) {
      out.push_back(SettingReport{side, std::string("(") + side + " options)", "", "option", "",
                                  std::string("a ") + side + " option without a variable"});
      target = &out.back();
    }
    if (target->error.empty()) target->error = p.status.message();
  }
}

}  // namespace

std::vector<SettingReport> describe_settings(const PublisherOptions& p, const SubscriberOptions& s) {
  std::vector<SettingReport> out;
  try {
    std::vector<detail::SettingProblem> publisher_problems;
    std::vector<detail::SettingProblem> subscriber_problems;
    const std::vector<SettingReport> publisher =
        detail::resolve_publisher_settings(p, &publisher_problems).reports();
    const std::vector<SettingReport> subscriber =
        detail::resolve_subscriber_settings(s, &subscriber_problems).reports();
    for (const SettingRow& row : detail::setting_table()) {
      switch (row.side) {
        case SettingSide::kPublisher: out.push_back(find_report(publisher, row)); break;
        case SettingSide::kSubscriber: out.push_back(find_report(subscriber, row)); break;
        case SettingSide::kBoth: {
          // The publisher's, unless only the subscriber's options set it.
          SettingReport from_publisher = find_report(publisher, row);
          SettingReport from_subscriber = find_report(subscriber, row);
          const bool subscriber_only =
              from_subscriber.source == "option" && from_publisher.source != "option";
          out.push_back(subscriber_only ? std::move(from_subscriber) : std::move(from_publisher));
          break;
        }
        case SettingSide::kInformational: out.push_back(informational(row)); break;
      }
    }
    attach(out, publisher_problems, "publisher");
    attach(out, subscriber_problems, "subscriber");
  } catch (...) {
  }
  return out;
}

}  // namespace weightsync
