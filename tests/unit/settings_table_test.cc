// The settings table (common/settings_table.h) against the code: every
// WEIGHTSYNC_* name the library, its tools and its Python package mention is a
// row, every row is read by the code that is said to read it, and the list in
// weightsync/options.h's header comment is the table's. The sources are read
// from WS_SOURCE_DIR (the repository root, a compile definition).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/host_identity.h"
#include "common/settings_table.h"
#include "publisher/publisher_settings.h"
#include "subscriber/subscriber_settings.h"

using namespace weightsync;
using detail::SettingId;
using detail::SettingParser;
using detail::SettingRow;
using detail::SettingSide;
using detail::SettingSource;

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = WS_SOURCE_DIR;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The sources whose WEIGHTSYNC_* names must be rows: the library, its tools
// and its Python package (bindings and modules). Paths relative to the root.
std::map<std::string, std::string> scanned_sources() {
  std::map<std::string, std::string> out;
  for (const char* dir : {"libweightsync", "tools", "python"}) {
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".in" && ext != ".py") continue;
      out[fs::relative(entry.path(), kRoot).string()] = read_file(entry.path());
    }
  }
  return out;
}

// Names of the build, not of the environment: CMake options and the macros
// of the generated version.h.
bool build_time_name(const std::string& name) {
  for (const char* prefix :
       {"WEIGHTSYNC_WITH_", "WEIGHTSYNC_HAVE_", "WEIGHTSYNC_BUILD_", "WEIGHTSYNC_VERSION_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

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

// A value the row's parser accepts (not necessarily valid as a whole, e.g. a
// key file that does not exist: the report still says where it came from).
std::string accepted_sample(const SettingRow& row) {
  switch (row.parser) {
    case SettingParser::kMillis:
    case SettingParser::kMillisOrZero: return "4321";
    case SettingParser::kBool: return "1";
    case SettingParser::kEnum: {
      const std::string accepted = row.accepted;
      return accepted.substr(0, accepted.find(','));
    }
    default: return row.fallback[0] != '\0' ? row.fallback : "settings-table-test";
  }
}

std::optional<SettingReport> find(const std::vector<SettingReport>& reports, const std::string& name) {
  for (const auto& r : reports) {
    if (r.name == name) return r;
  }
  return std::nullopt;
}

bool on_side(const SettingRow& row, SettingSide side) {
  return row.side == side || (row.side == SettingSide::kBoth && side != SettingSide::kInformational);
}

}  // namespace

TEST_CASE("settings table: every WEIGHTSYNC_* name in the library, tools and Python sources is a row",
          "[settings]") {
  const auto sources = scanned_sources();
  REQUIRE(sources.count("libweightsync/src/common/settings_table.cc") == 1);  // the scan sees the sources
  const std::regex name_pattern("WEIGHTSYNC_[A-Z0-9_]*[A-Z0-9]");
  const std::regex getenv_pattern("getenv\\(\\s*\"([^\"]+)\"");
  std::set<std::string> seen;
  std::set<std::pair<std::string, std::string>> missing;  // name, where
  for (const auto& [path, text] : sources) {
    for (std::sregex_iterator it(text.begin(), text.end(), name_pattern), end; it != end; ++it) {
      const std::string name = it->str();
      if (build_time_name(name)) continue;
      seen.insert(name);
      if (detail::find_setting(name) == nullptr) missing.emplace(name, "mentioned in " + path);
    }
    // Variables read by name (UCX_TLS is UCX's own, read by the ucx transport).
    for (std::sregex_iterator it(text.begin(), text.end(), getenv_pattern), end; it != end; ++it) {
      const std::string name = (*it)[1].str();
      if (detail::find_setting(name) == nullptr) missing.emplace(name, "read with getenv() in " + path);
    }
  }
  for (const auto& [name, where] : missing) {
    FAIL_CHECK(name << " (" << where << ") is not a row of the settings table (common/settings_table.cc)");
  }
  // The scan found the names the library is known to read.
  for (const char* known : {"WEIGHTSYNC_SECRET", "WEIGHTSYNC_UCX_DIRECT", "WEIGHTSYNC_LOG_LEVEL"}) {
    CHECK(seen.count(known) == 1);
  }
}

TEST_CASE("settings table: every row is read by the code that is said to read it", "[settings]") {
  const auto sources = scanned_sources();
  for (const SettingRow& row : detail::setting_table()) {
    INFO(row.environment << " (" << row.name << ", " << detail::to_string(row.side) << ")");
    CleanEnvironment clean;
    for (SettingSide side : {SettingSide::kPublisher, SettingSide::kSubscriber}) {
      if (!on_side(row, side)) continue;
      auto reports = [side] {
        std::vector<detail::SettingProblem> problems;
        return side == SettingSide::kPublisher ? detail::resolve_publisher_settings({}, &problems).reports()
                                               : detail::resolve_subscriber_settings({}, &problems).reports();
      };
      INFO("resolved by the " << detail::to_string(side));
      ::unsetenv(row.environment);
      const auto unset = find(reports(), row.name);
      REQUIRE(unset.has_value());
      CHECK(unset->source == "default");
      const std::string sample = accepted_sample(row);
      ::setenv(row.environment, sample.c_str(), 1);
      const auto set = find(reports(), row.name);
      REQUIRE(set.has_value());
      CHECK(set->source == "environment");
      ::unsetenv(row.environment);
    }
    if (row.side == SettingSide::kInformational) {
      // Read where it is used: by name, outside the table.
      const std::string literal = std::string("\"") + row.environment + "\"";
      bool read = false;
      for (const auto& [path, text] : sources) {
        if (path != "libweightsync/src/common/settings_table.cc" && text.find(literal) != std::string::npos) {
          read = true;
        }
      }
      if (row.id == SettingId::kHostId) {  // host_identity() reads it through the table
        ::setenv(row.environment, "settings-table-test", 1);
        auto id = detail::host_identity();
        read = id.ok() && *id == "settings-table-test";
        ::unsetenv(row.environment);
      }
      CHECK(read);
    }
  }
  // Each side reports its rows and no other.
  std::vector<detail::SettingProblem> problems;
  const auto publisher = detail::resolve_publisher_settings({}, &problems).reports();
  const auto subscriber = detail::resolve_subscriber_settings({}, &problems).reports();
  std::size_t publisher_rows = 0;
  std::size_t subscriber_rows = 0;
  for (const SettingRow& row : detail::setting_table()) {
    publisher_rows += on_side(row, SettingSide::kPublisher) ? 1 : 0;
    subscriber_rows += on_side(row, SettingSide::kSubscriber) ? 1 : 0;
  }
  CHECK(publisher.size() == publisher_rows);
  CHECK(subscriber.size() == subscriber_rows);
}

TEST_CASE("settings table: the list in weightsync/options.h names every row and nothing else", "[settings]") {
  std::istringstream header(read_file(kRoot / "libweightsync/include/weightsync/options.h"));
  // The header comment: the leading lines that start with "//". Entries are
  // indented names (continuation lines start in lower case).
  const std::regex entry("^//\\s{4,}([A-Z][A-Z0-9_]+)\\s");
  std::set<std::string> listed;
  for (std::string line; std::getline(header, line) && line.rfind("//", 0) == 0;) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) listed.insert(m[1].str());
  }
  REQUIRE_FALSE(listed.empty());
  for (const SettingRow& row : detail::setting_table()) {
    INFO(row.environment << " is a row of the settings table");
    CHECK(listed.count(row.environment) == 1);
  }
  for (const std::string& name : listed) {
    INFO(name << " is listed in weightsync/options.h");
    CHECK(detail::find_setting(name) != nullptr);
  }
}

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
