// The settings table (common/settings_table.h): its rows are well formed,
// and resolution is explicit option > environment > default, with malformed
// values refused naming the variable.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/settings_table.h"

using namespace weightsync;
using detail::SettingId;
using detail::SettingParser;
using detail::SettingRow;
using detail::SettingSource;

namespace {

// Every variable of the table unset for one scope, then restored.
class CleanEnvironment {
 public:
  CleanEnvironment() {
    for (const SettingRow& row : detail::setting_table()) {
      if (const char* old = std::getenv(row.environment)) saved_[row.environment] = old;
      ::unsetenv(row.environment);
    }
  }
  ~CleanEnvironment() {
    for (const SettingRow& row : detail::setting_table()) {
      auto it = saved_.find(row.environment);
      if (it != saved_.end()) {
        ::setenv(row.environment, it->second.c_str(), 1);
      } else {
        ::unsetenv(row.environment);
      }
    }
  }
  CleanEnvironment(const CleanEnvironment&) = delete;
  CleanEnvironment& operator=(const CleanEnvironment&) = delete;

 private:
  std::map<std::string, std::string> saved_;
};

}  // namespace

TEST_CASE("settings table: rows are well formed and their defaults parse", "[settings]") {
  CleanEnvironment clean;
  std::set<std::string> names;
  std::set<std::string> variables;
  for (const SettingRow& row : detail::setting_table()) {
    INFO(row.environment);
    CHECK(names.insert(row.name).second);
    CHECK(variables.insert(row.environment).second);
    CHECK(std::string(row.description).find('\n') == std::string::npos);
    CHECK_FALSE(std::string(row.description).empty());
    CHECK((row.parser == SettingParser::kEnum) == (row.accepted != nullptr));
    switch (row.parser) {
      case SettingParser::kMillis:
      case SettingParser::kMillisOrZero: {
        auto d = detail::resolve_setting<int>(row.id, std::nullopt);
        REQUIRE(d.ok());
        CHECK(std::to_string(d->value) == row.fallback);
        break;
      }
      case SettingParser::kBool: {
        auto d = detail::resolve_setting<bool>(row.id, std::nullopt);
        REQUIRE(d.ok());
        CHECK((d->value ? "1" : "0") == std::string(row.fallback));
        break;
      }
      default: {
        auto d = detail::resolve_setting<std::string>(row.id, std::nullopt);
        REQUIRE(d.ok());
        CHECK(d->value == row.fallback);
        if (row.parser == SettingParser::kEnum) {
          CHECK(detail::resolve_setting<std::string>(row.id, std::string(row.fallback)).ok());
        }
      }
    }
  }
}

TEST_CASE(
    "settings table: explicit option > environment > default, malformed values are errors naming the "
    "variable",
    "[settings]") {
  CleanEnvironment clean;
  auto d = detail::resolve_setting<int>(SettingId::kIoTimeout, std::nullopt);
  REQUIRE(d.ok());
  CHECK(d->value == 10000);
  CHECK(d->source == SettingSource::kDefault);

  ::setenv("WEIGHTSYNC_TIMEOUT_MS", "250", 1);
  auto e = detail::resolve_setting<int>(SettingId::kIoTimeout, std::nullopt);
  REQUIRE(e.ok());
  CHECK(e->value == 250);
  CHECK(e->source == SettingSource::kEnvironment);

  auto o = detail::resolve_setting<int>(SettingId::kIoTimeout, 99);
  REQUIRE(o.ok());
  CHECK(o->value == 99);
  CHECK(o->source == SettingSource::kOption);
  auto bad_option = detail::resolve_setting<int>(SettingId::kIoTimeout, 0);
  REQUIRE_FALSE(bad_option.ok());
  CHECK_THAT(bad_option.status().message(), Catch::Contains("WEIGHTSYNC_TIMEOUT_MS"));

  for (const char* bad : {"abc", "-5", "0", "12ms", "99999999999"}) {
    ::setenv("WEIGHTSYNC_TIMEOUT_MS", bad, 1);
    auto r = detail::resolve_setting<int>(SettingId::kIoTimeout, std::nullopt);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kInvalidConfig);
    CHECK_THAT(r.status().message(), Catch::Contains("WEIGHTSYNC_TIMEOUT_MS"));
  }
  ::setenv("WEIGHTSYNC_IDLE_TIMEOUT_MS", "0", 1);  // 0 is "never" here
  CHECK(detail::resolve_setting<int>(SettingId::kIdleTimeout, std::nullopt)->value == 0);

  ::setenv("WEIGHTSYNC_CHECKSUM", "maybe", 1);
  auto maybe = detail::resolve_setting<bool>(SettingId::kChecksum, std::nullopt);
  REQUIRE_FALSE(maybe.ok());
  CHECK_THAT(maybe.status().message(), Catch::Contains("WEIGHTSYNC_CHECKSUM='maybe'"));
  ::setenv("WEIGHTSYNC_CHECKSUM", "1", 1);
  CHECK(detail::resolve_setting<bool>(SettingId::kChecksum, std::nullopt)->value);
  ::setenv("WEIGHTSYNC_CHECKSUM", "", 1);  // empty is unset
  CHECK(detail::resolve_setting<bool>(SettingId::kChecksum, std::nullopt)->source == SettingSource::kDefault);

  ::setenv("WEIGHTSYNC_SLOT_ALLOCATOR", "pmem", 1);
  auto pmem = detail::resolve_setting<std::string>(SettingId::kSlotAllocator, std::nullopt);
  REQUIRE_FALSE(pmem.ok());
  CHECK(pmem.status().code() == ErrorCode::kInvalidConfig);
  CHECK_THAT(pmem.status().message(),
             Catch::Contains("WEIGHTSYNC_SLOT_ALLOCATOR='pmem'") && Catch::Contains("auto, memfd, ucx"));
  auto pmem_option = detail::resolve_setting<std::string>(SettingId::kSlotAllocator, std::string("pmem"));
  REQUIRE_FALSE(pmem_option.ok());
  CHECK_THAT(pmem_option.status().message(), Catch::Contains("auto, memfd, ucx"));

  // The wrong type for a row is a bug, not a configuration.
  CHECK(detail::resolve_setting<bool>(SettingId::kIoTimeout, std::nullopt).status().code() ==
        ErrorCode::kInternal);
}
