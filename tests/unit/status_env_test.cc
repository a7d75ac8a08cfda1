// Status/Action table, Result, and describe_settings() (the resolution itself:
// settings_table_test.cc).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "weightsync/status.h"

using namespace weightsync;

TEST_CASE("status: every error code has a name and the documented action", "[status]") {
  CHECK(action_for(ErrorCode::kOk) == Action::kNone);
  CHECK(action_for(ErrorCode::kTimeout) == Action::kRetry);
  CHECK(action_for(ErrorCode::kNotReady) == Action::kRetry);
  CHECK(action_for(ErrorCode::kVersionRevoked) == Action::kTakeNewerVersion);
  CHECK(action_for(ErrorCode::kChecksumMismatch) == Action::kRetry);
  CHECK(action_for(ErrorCode::kBusy) == Action::kRetry);
  CHECK(action_for(ErrorCode::kConnectionLost) == Action::kReconnect);
  CHECK(action_for(ErrorCode::kProtocolError) == Action::kReconnect);
  CHECK(action_for(ErrorCode::kAuthFailed) == Action::kFixConfiguration);
  CHECK(action_for(ErrorCode::kInvalidConfig) == Action::kFixConfiguration);
  CHECK(action_for(ErrorCode::kInvalidArgument) == Action::kFixCall);
  CHECK(action_for(ErrorCode::kCancelled) == Action::kRetry);
  for (int c = 0; c <= static_cast<int>(ErrorCode::kCancelled); ++c) {
    CHECK(std::string(to_string(static_cast<ErrorCode>(c))) != "unknown");
  }
  Status s(ErrorCode::kAuthFailed, "bad secret");
  CHECK_FALSE(s.ok());
  CHECK(s.to_string() == "auth_failed: bad secret");
  CHECK(Status().ok());

  Result<int> good(7);
  REQUIRE(good.ok());
  CHECK(*good == 7);
  Result<int> bad(Status(ErrorCode::kTimeout, "slow"));
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().code() == ErrorCode::kTimeout);
  Result<int> misuse{Status()};  // an OK status without a value is a bug, not success
  CHECK_FALSE(misuse.ok());
  CHECK(misuse.status().code() == ErrorCode::kInternal);
}

#include "weightsync/settings.h"

TEST_CASE("settings: every setting is reported with its source, and the secret never is", "[env]") {
  ::setenv("WEIGHTSYNC_SECRET", "hunter2-hunter2", 1);
  ::setenv("WEIGHTSYNC_CONNECT_TIMEOUT_MS", "oops", 1);
  ::unsetenv("WEIGHTSYNC_TIMEOUT_MS");
  PublisherOptions p;
  p.checksum = true;
  auto reports = describe_settings(p, {});
  auto find = [&](const std::string& name) {
    for (const auto& r : reports) {
      if (r.name == name) return r;
    }
    FAIL("no setting " << name);
    return SettingReport{};
  };
  const auto secret = find("secret");
  CHECK(secret.source == "environment");
  CHECK(secret.value.find("hunter2") == std::string::npos);
  CHECK_THAT(secret.value, Catch::Contains("15 bytes"));
  CHECK(find("checksum").source == "option");
  CHECK(find("checksum").value == "on");
  CHECK(find("io_timeout_ms").source == "default");
  CHECK(find("io_timeout_ms").value == "10000 ms");
  const auto broken = find("connect_timeout_ms");
  CHECK_THAT(broken.error, Catch::Contains("WEIGHTSYNC_CONNECT_TIMEOUT_MS"));
  for (const auto& r : reports) CHECK_FALSE(r.environment.empty());
  ::unsetenv("WEIGHTSYNC_SECRET");
  ::unsetenv("WEIGHTSYNC_CONNECT_TIMEOUT_MS");
}
