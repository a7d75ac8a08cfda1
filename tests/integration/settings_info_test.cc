// weightsync-info tells the truth: under several environments the real
// weightsync-info executable (WS_INFO_PATH), run as a process, reports every
// setting with the value and source that Publisher::create() resolves in this
// process (Publisher::settings()), and when create() fails, weightsync-info
// exits 1 with create()'s error on the setting concerned.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "child_process.h"
#include "common/settings_table.h"
#include "patterns.h"
#include "weightsync/publisher.h"
#include "weightsync/settings.h"

using namespace weightsync;
using wsutil::ChildProcess;

namespace {

// Every variable of the settings table unset, then `set`; restored afterwards.
class ScenarioEnvironment {
 public:
  explicit ScenarioEnvironment(const std::vector<std::pair<std::string, std::string>>& set) {
    for (const detail::SettingRow& row : detail::setting_table()) {
      if (const char* old = std::getenv(row.environment)) saved_[row.environment] = old;
      ::unsetenv(row.environment);
    }
    for (const auto& [name, value] : set) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScenarioEnvironment() {
    for (const detail::SettingRow& row : detail::setting_table()) {
      auto it = saved_.find(row.environment);
      if (it != saved_.end()) {
        ::setenv(row.environment, it->second.c_str(), 1);
      } else {
        ::unsetenv(row.environment);
      }
    }
  }
  ScenarioEnvironment(const ScenarioEnvironment&) = delete;
  ScenarioEnvironment& operator=(const ScenarioEnvironment&) = delete;

 private:
  std::map<std::string, std::string> saved_;
};

struct InfoRun {
  int exit_code = -1;
  std::map<std::string, SettingReport> settings;  // by name
};

// weightsync-info --json in this process's environment.
InfoRun run_info() {
  auto child = ChildProcess::spawn({WS_INFO_PATH, "--json"});
  std::string out;
  while (auto line = child.read_line(std::chrono::seconds(60))) out += *line;
  InfoRun run;
  run.exit_code = child.wait(std::chrono::seconds(30)).value_or(-1);
  const auto json = nlohmann::json::parse(out);
  for (const auto& s : json.at("settings")) {
    SettingReport r{s.at("name"),   s.at("environment"), s.at("value"),
                    s.at("source"), s.at("error"),       s.at("description")};
    run.settings[r.name] = r;
  }
  return run;
}

struct Scenario {
  const char* title;
  std::vector<std::pair<std::string, std::string>> environment;
  // Expected in both reports: name -> {value, source}.
  std::map<std::string, std::pair<std::string, std::string>> expect;
  const char* failing_row = nullptr;  // create() fails; its error is on this row
};

}  // namespace

TEST_CASE("weightsync-info reports what Publisher::create resolves, under several environments",
          "[settings][info]") {
  const std::vector<Scenario> scenarios = {
      {"nothing set", {}, {{"io_timeout_ms", {"10000 ms", "default"}}, {"checksum", {"off", "default"}}}},
      {"a timeout", {{"WEIGHTSYNC_TIMEOUT_MS", "1234"}}, {{"io_timeout_ms", {"1234 ms", "environment"}}}},
      {"checksums and deltas",
       {{"WEIGHTSYNC_CHECKSUM", "1"}, {"WEIGHTSYNC_DELTAS", "1"}},
       {{"checksum", {"on", "environment"}}, {"deltas", {"on", "environment"}}}},
      {"encryption implies integrity, which turns checksums on",
       {{"WEIGHTSYNC_SECRET", "settings-info-secret"}, {"WEIGHTSYNC_ENCRYPTION", "1"}},
       {{"encryption", {"on", "environment"}},
        {"integrity", {"on", "environment"}},
        {"checksum", {"on", "environment"}},
        {"secret", {"(set, 20 bytes)", "environment"}}}},
      {"localhost binds 127.0.0.1",
       {{"WEIGHTSYNC_BIND", "localhost"},
        {"WEIGHTSYNC_IDLE_TIMEOUT_MS", "0"},
        {"WEIGHTSYNC_SLOT_ALLOCATOR", "memfd"}},
       {{"bind_address", {"127.0.0.1", "environment"}},
        {"idle_timeout_ms", {"0 ms", "environment"}},
        {"slot_allocator", {"memfd", "environment"}}}},
      {"a malformed timeout", {{"WEIGHTSYNC_LEASE_TIMEOUT_MS", "soon"}}, {}, "lease_timeout_ms"},
      {"a malformed allocator", {{"WEIGHTSYNC_SLOT_ALLOCATOR", "pmem"}}, {}, "slot_allocator"},
      {"encryption without a secret", {{"WEIGHTSYNC_ENCRYPTION", "1"}}, {}, "encryption"},
      {"a non-loopback address without a secret", {{"WEIGHTSYNC_BIND", "0.0.0.0"}}, {}, "bind_address"},
      {"a malformed host id", {{"WEIGHTSYNC_HOST_ID", "not a host id"}}, {}, "host_id"},
  };
  for (const Scenario& scenario : scenarios) {
    INFO("scenario: " << scenario.title);
    ScenarioEnvironment environment(scenario.environment);
    const InfoRun info = run_info();
    REQUIRE(info.settings.size() >= detail::kSettingCount);
    for (const detail::SettingRow& row : detail::setting_table()) {
      INFO("weightsync-info reports " << row.name);
      CHECK(info.settings.count(row.name) == 1);
    }
    auto publisher = Publisher::create(wstest::bytes_layout(4096, 1));
    if (scenario.failing_row != nullptr) {
      REQUIRE_FALSE(publisher.ok());
      INFO("create(): " << publisher.status().to_string());
      CHECK(publisher.status().code() == ErrorCode::kInvalidConfig);
      CHECK(info.exit_code == 1);
      REQUIRE(info.settings.count(scenario.failing_row) == 1);
      CHECK(info.settings.at(scenario.failing_row).error == publisher.status().message());
      continue;
    }
    REQUIRE(publisher.ok());
    CHECK(info.exit_code == 0);
    const std::vector<SettingReport> resolved = (*publisher)->settings();
    std::size_t publisher_rows = 0;
    for (const detail::SettingRow& row : detail::setting_table()) {
      publisher_rows += row.side == detail::SettingSide::kPublisher || row.side == detail::SettingSide::kBoth;
    }
    CHECK(resolved.size() == publisher_rows);
    for (const SettingReport& r : resolved) {
      INFO("setting " << r.name << ": create() resolved " << r.value << " from " << r.source);
      REQUIRE(info.settings.count(r.name) == 1);
      const SettingReport& shown = info.settings.at(r.name);
      CHECK(shown.value == r.value);
      CHECK(shown.source == r.source);
      CHECK(shown.environment == r.environment);
      CHECK(shown.error.empty());
    }
    for (const auto& [name, expected] : scenario.expect) {
      INFO("setting " << name);
      REQUIRE(info.settings.count(name) == 1);
      CHECK(info.settings.at(name).value == expected.first);
      CHECK(info.settings.at(name).source == expected.second);
    }
  }
}
