// weightsync-bench's own logic: statistics, size formatting, the image marks
// readers check, the target verdicts, and the JSON/CSV it writes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "records.h"
#include "report.h"
#include "roles.h"
#include "stats.h"

using namespace wsbench;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

CellRecord row(const std::string& transport, const std::string& detail, std::uint64_t size, double gbps) {
  CellRecord r;
  r.transport = transport;
  r.detail = detail;
  r.size_bytes = size;
  r.readers = 1;
  r.repetitions = 10;
  r.gbps_median = gbps;
  r.gbps_p99 = gbps * 0.9;
  r.latency_s_median = static_cast<double>(size) / (gbps * 1e9);
  r.publish_s_median = static_cast<double>(size) / 10e9;  // as fast as memcpy below
  return r;
}

BaselineFigure figure(double gbps) {
  BaselineFigure f;
  f.gbps = gbps;
  f.repetitions = 10;
  return f;
}

const TargetCheck* find_check(const std::vector<TargetCheck>& checks, const std::string& name,
                              const std::string& measured_contains = "") {
  for (const auto& c : checks) {
    if (c.name == name && c.measured.find(measured_contains) != std::string::npos) return &c;
  }
  return nullptr;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("bench: percentiles are nearest-rank, the median of an even count averages", "[bench]") {
  CHECK(std::isnan(median({})));
  CHECK(median({3.0}) == 3.0);
  CHECK(median({4.0, 1.0, 3.0}) == 3.0);
  CHECK(median({1.0, 2.0, 3.0, 10.0}) == 2.5);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  CHECK(percentile(hundred, 99) == 99.0);
  CHECK(percentile(hundred, 100) == 100.0);
  CHECK(percentile({5.0, 1.0}, 99) == 5.0);
}

TEST_CASE("bench: sizes print in binary units", "[bench]") {
  CHECK(format_size(1000) == "1000 B");
  CHECK(format_size(4096) == "4 KiB");
  CHECK(format_size(64 * kMiB) == "64 MiB");
  CHECK(format_size(kGiB) == "1 GiB");
  CHECK(format_size(kMiB + kMiB / 2) == "1.5 MiB");
}

TEST_CASE("bench: a reader tells the version it got from the image marks", "[bench]") {
  std::vector<unsigned char> image(4096, 0xab);
  mark_image(image.data(), image.size(), 7);
  CHECK(image_has_marks(image.data(), image.size(), 7));
  CHECK_FALSE(image_has_marks(image.data(), image.size(), 8));
  image[image.size() - 1] ^= 1;  // a torn tail
  CHECK_FALSE(image_has_marks(image.data(), image.size(), 7));
}

TEST_CASE("bench: targets are met, missed or not measured, from the figures", "[bench]") {
  BenchReport report;
  report.reference_size = 64 * kMiB;
  Baselines& b = report.baselines;
  b.memcpy_1t[64 * kMiB] = figure(10.0);
  b.memcpy_1t[kGiB] = figure(10.0);
  b.tcp_raw[64 * kMiB] = figure(3.0);
  b.iperf3 = figure(2.0);
  b.file[kGiB] = figure(2.0);
  report.records.push_back(row("tcp", "", 64 * kMiB, 2.7));  // 90% of raw: met
  auto shm = row("shm", "", 64 * kMiB, 8.0);                 // 80% of its paired memcpy: missed
  shm.limit_name = "memcpy paired";
  shm.limit_gbps = 10.0;
  report.records.push_back(shm);
  report.records.push_back(row("shm", "", kGiB, 11.0));                // 5.5x the checkpoint file: met
  report.records.push_back(row("ucx", "posix,self", 64 * kMiB, 9.0));  // no ucx_perftest figure
  auto failed = row("tcp", "", 64 * kMiB, NAN);
  failed.readers = 2;  // not a target row (2 readers), and failed
  failed.error = "reader 1 did not answer";
  report.records.push_back(failed);

  const auto checks = evaluate_targets(report);
  const TargetCheck* tcp = find_check(checks, "tcp vs raw TCP stream");
  REQUIRE(tcp != nullptr);
  CHECK(tcp->verdict == "met");
  CHECK_THAT(tcp->measured, Catch::StartsWith("90%"));
  const TargetCheck* shm64 = find_check(checks, "shm vs memcpy (1 thread)", "64 MiB");
  REQUIRE(shm64 != nullptr);
  CHECK(shm64->verdict == "MISSED");
  CHECK_THAT(shm64->measured, Catch::Contains("8.00 vs 10.00"));  // the row's own (paired) limit
  const TargetCheck* ucx = find_check(checks, "ucx posix,self vs ucx_perftest");
  REQUIRE(ucx != nullptr);
  CHECK(ucx->verdict == "not measured");
  const TargetCheck* file = find_check(checks, "fastest transport vs checkpoint file, 1 GiB");
  REQUIRE(file != nullptr);
  CHECK(file->verdict == "met");
  CHECK_THAT(file->measured, Catch::StartsWith("5.5x"));
  const TargetCheck* publish = find_check(checks, "publish vs memcpy", "64 MiB");
  REQUIRE(publish != nullptr);
  CHECK(publish->verdict == "met");
}

TEST_CASE("bench: JSON and CSV carry every record and the baselines", "[bench]") {
  BenchReport report;
  report.host = "test-host";
  report.reference_size = 64 * kMiB;
  report.baselines.memcpy_1t[64 * kMiB] = figure(10.0);
  report.baselines.ucx_perftest["posix,self"][64 * kMiB] = figure(9.5);
  report.baselines.iperf3.note = "iperf3 not installed (apt-get install iperf3)";
  report.records.push_back(row("tcp", "", 64 * kMiB, 3.0));
  auto bad = row("ucx", "tcp,self", 64 * kMiB, NAN);
  bad.error = "publisher: no answer";
  report.records.push_back(bad);

  char dir_template[] = "/tmp/ws-bench-test-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  std::string error;
  REQUIRE(write_json(dir + "/out.json", report, evaluate_targets(report), &error));
  const auto json = nlohmann::json::parse(slurp(dir + "/out.json"));
  REQUIRE(json["records"].size() == 2);
  CHECK(json["records"][0]["transport"].is_string());
  CHECK(json["records"][0]["size_bytes"] == 64 * kMiB);
  bool saw_error = false, saw_figure = false;
  for (const auto& r : json["records"]) {
    if (r.contains("error")) saw_error = r["gbps_median"].is_null();
    if (r["transport"] == "tcp") saw_figure = r["gbps_median"].get<double>() == Approx(3.0);
  }
  CHECK(saw_error);
  CHECK(saw_figure);
  CHECK(json["baselines"]["memcpy_1t_gbps"].get<double>() == Approx(10.0));
  CHECK(json["baselines"]["ucx_perftest_gbps"]["posix,self"].get<double>() == Approx(9.5));
  CHECK(json["baselines"]["iperf3_gbps"].is_null());
  CHECK(json["targets"].is_array());

  REQUIRE(write_csv(dir + "/out.csv", report, &error));
  std::istringstream csv(slurp(dir + "/out.csv"));
  std::string header, line;
  std::getline(csv, header);
  CHECK_THAT(header, Catch::StartsWith("transport,detail,size_bytes,readers"));
  int rows = 0;
  while (std::getline(csv, line)) rows += line.empty() ? 0 : 1;
  CHECK(rows == 2);

  CHECK_FALSE(write_json(dir + "/missing-dir/out.json", report, {}, &error));
  CHECK_FALSE(error.empty());
  std::remove((dir + "/out.json").c_str());
  std::remove((dir + "/out.csv").c_str());
  ::rmdir(dir.c_str());
}
