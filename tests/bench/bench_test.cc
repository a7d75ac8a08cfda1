// weightsync-bench's own logic: statistics, size formatting, the image marks
// readers check, the target verdicts, the JSON/CSV it writes, and the GPU
// rows (--gpu, which rows, their limits, their targets and JSON), and the
// pause mode's summaries, targets and JSON.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "gpu_rows.h"
#include "pause_bench.h"
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

namespace {

CellRecord gpu_row(const std::string& mode, const std::string& transport, std::uint64_t size, double gbps) {
  CellRecord r = row(transport, "", size, gbps);
  r.gpu_mode = mode;
  return r;
}

}  // namespace

TEST_CASE("bench: --gpu auto|on|off decides whether the GPU rows run, and why not", "[bench][gpu]") {
  GpuFlag flag = GpuFlag::kOff;
  CHECK(parse_gpu_flag("on", &flag));
  CHECK(flag == GpuFlag::kOn);
  CHECK(parse_gpu_flag("auto", &flag));
  CHECK(flag == GpuFlag::kAuto);
  CHECK_FALSE(parse_gpu_flag("yes", &flag));
  CHECK(std::string(gpu_flag_name(GpuFlag::kOff)) == "off");

  const auto usable = decide_gpu(GpuFlag::kAuto, true, "", true, false);
  CHECK(usable.measure);
  CHECK(usable.not_measured.empty());
  const auto no_device = decide_gpu(GpuFlag::kAuto, false, "no CUDA driver", true, false);
  CHECK_FALSE(no_device.measure);
  CHECK_FALSE(no_device.fatal);
  CHECK(no_device.not_measured == "no CUDA driver");
  const auto required = decide_gpu(GpuFlag::kOn, false, "no CUDA device", true, false);
  CHECK(required.fatal);
  CHECK(required.not_measured == "no CUDA device");
  const auto off = decide_gpu(GpuFlag::kOff, false, "", false, false);
  CHECK_FALSE(off.measure);
  CHECK_FALSE(off.fatal);
  CHECK_THAT(off.not_measured, Catch::Contains("--gpu off"));
  CHECK_THAT(decide_gpu(GpuFlag::kOn, true, "", true, true).not_measured, Catch::Contains("client mode"));
  CHECK(decide_gpu(GpuFlag::kOn, true, "", true, true).fatal);
  CHECK_THAT(decide_gpu(GpuFlag::kAuto, true, "", false, false).not_measured,
             Catch::Contains("built without CUDA"));
}

TEST_CASE("bench: the GPU rows of a run: publish, a staged pull per transport, cuda_ipc", "[bench][gpu]") {
  const std::vector<TransportSpec> transports = {{"ucx", "posix,self"}, {"shm", ""}, {"tcp", ""}};
  const auto cells = plan_gpu_cells(transports, {64 * kMiB, kGiB});
  REQUIRE(cells.size() == 10);
  CHECK(cells[0].gpu == GpuRow::kPublishFromDevice);
  CHECK(cells[0].transport.transport == "shm");  // the publish row's reader checks the bytes over shm
  CHECK(cells[1].size == kGiB);
  int staged = 0, ipc = 0;
  for (const CellSpec& c : cells) {
    CHECK(c.readers == 1);
    CHECK(c.compute_rounds == 0);
    staged += c.gpu == GpuRow::kStagedPull ? 1 : 0;
    if (c.gpu == GpuRow::kCudaIpc) {
      ++ipc;
      CHECK(c.transport.transport == "cuda_ipc");
    }
  }
  CHECK(staged == 6);
  CHECK(ipc == 2);
  CHECK(cells[2].transport.detail == "posix,self");
  CHECK(plan_gpu_cells({{"tcp", ""}}, {kMiB})[0].transport.transport == "tcp");
  CHECK(plan_gpu_cells({}, {kMiB}).empty());
  CHECK(std::string(gpu_row_name(GpuRow::kStagedPull)) == "staged");
}

TEST_CASE("bench: each GPU row's limit: D2H, the slower of host pull and H2D, D2D", "[bench][gpu]") {
  BenchReport report;
  report.records.push_back(row("tcp", "", 64 * kMiB, 3.0));  // the tcp host-destination pull
  report.baselines.memcpy_1t[64 * kMiB] = figure(10.0);
  report.gpu.d2h_pinned[64 * kMiB] = figure(50.0);
  report.gpu.h2d_pinned[64 * kMiB] = figure(20.0);
  report.gpu.d2d[64 * kMiB] = figure(1000.0);
  report.gpu.records.push_back(gpu_row("publish_from_device", "shm", 64 * kMiB, 45.0));
  report.gpu.records.push_back(gpu_row("staged", "tcp", 64 * kMiB, 2.7));
  report.gpu.records.push_back(gpu_row("staged", "shm", 64 * kMiB, 7.0));  // no shm host row: memcpy 1 thread
  report.gpu.records.push_back(gpu_row("cuda_ipc", "cuda_ipc", 64 * kMiB, 700.0));
  report.gpu.records.push_back(gpu_row("staged", "tcp", kGiB, 2.0));  // no H2D figure at 1 GiB

  attach_gpu_limits(&report);
  const auto& rows = report.gpu.records;
  CHECK(rows[0].limit_name == "D2H pinned");
  CHECK(rows[0].ratio_to_limit == Approx(0.9));
  CHECK(rows[1].limit_name == "tcp host pull");
  CHECK(rows[1].limit_gbps == Approx(3.0));
  CHECK(rows[2].limit_name == "memcpy 1 thread");
  CHECK(rows[2].limit_gbps == Approx(10.0));
  CHECK(rows[3].limit_name == "D2D");
  CHECK(rows[3].ratio_to_limit == Approx(0.7));
  CHECK(std::isnan(rows[4].limit_gbps));
  CHECK_THAT(gpu_limit_for(report, rows[1]).note, Catch::Contains("tcp host pull 3.00"));

  report.gpu.h2d_pinned[64 * kMiB] = figure(2.5);  // H2D slower than the transport: it sets the limit
  CHECK(gpu_limit_for(report, rows[1]).name == "H2D pinned");
  CHECK(gpu_limit_for(report, rows[1]).gbps == Approx(2.5));

  const auto checks = evaluate_targets(report);
  const TargetCheck* publish = find_check(checks, "gpu: publish_from_device vs pinned D2H");
  REQUIRE(publish != nullptr);
  CHECK(publish->verdict == "met");
  CHECK_THAT(publish->measured, Catch::StartsWith("90% (45.00 vs 50.00 GB/s"));
  const TargetCheck* ipc = find_check(checks, "gpu: cuda_ipc pull into cuda vs D2D");
  REQUIRE(ipc != nullptr);
  CHECK(ipc->verdict == "MISSED");
  CHECK_THAT(ipc->measured, Catch::StartsWith("70%"));
  const TargetCheck* tcp =
      find_check(checks, "gpu: tcp staged pull into cuda vs min(host pull, pinned H2D)", "1 GiB");
  REQUIRE(tcp == nullptr);  // no H2D figure at 1 GiB: not measured, and says why
  bool saw_missing_h2d = false;
  for (const auto& c : checks) {
    if (c.verdict == "not measured" && c.note.find("H2D pinned") != std::string::npos) saw_missing_h2d = true;
  }
  CHECK(saw_missing_h2d);
}

TEST_CASE("bench: GPU rows not measured say why, in the targets and the JSON", "[bench][gpu]") {
  BenchReport report;
  report.reference_size = kMiB;
  report.records.push_back(row("tcp", "", kMiB, 2.0));
  report.gpu.mode = "auto";
  report.gpu.not_measured = "no CUDA driver";
  CellRecord skipped = gpu_row("staged", "tcp", kMiB, NAN);
  skipped.not_measured = "no CUDA driver";
  report.gpu.records.push_back(skipped);
  BaselineFigure none;
  none.note = "not measured: no CUDA driver";
  report.gpu.d2h_pinned[kMiB] = report.gpu.h2d_pinned[kMiB] = report.gpu.d2d[kMiB] = none;

  const auto checks = evaluate_targets(report);
  int gpu_checks = 0;
  for (const auto& c : checks) {
    if (c.name.rfind("gpu: ", 0) != 0) continue;
    ++gpu_checks;
    CHECK(c.verdict == "not measured");
    CHECK(c.note == "no CUDA driver");
  }
  CHECK(gpu_checks == 3);

  char dir_template[] = "/tmp/ws-bench-gpu-test-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  std::string error;
  REQUIRE(write_json(dir + "/out.json", report, checks, &error));
  const auto json = nlohmann::json::parse(slurp(dir + "/out.json"));
  REQUIRE(json.contains("gpu"));
  const auto& gpu = json["gpu"];
  CHECK(gpu["mode"] == "auto");
  CHECK(gpu["measured"] == false);
  CHECK(gpu["not_measured"] == "no CUDA driver");
  REQUIRE(gpu["records"].size() == 1);
  CHECK(gpu["records"][0]["gpu_mode"] == "staged");
  CHECK(gpu["records"][0]["gbps_median"].is_null());
  CHECK(gpu["records"][0]["not_measured"] == "no CUDA driver");
  REQUIRE(gpu["limits"]["by_size"].size() == 1);
  CHECK(gpu["limits"]["by_size"][0]["d2h_pinned_gbps"].is_null());
  CHECK(gpu["limits"]["notes"]["h2d_pinned"] == "not measured: no CUDA driver");
  CHECK(json["records"].size() == 1);  // the host rows stay apart
  std::remove((dir + "/out.json").c_str());
  ::rmdir(dir.c_str());
}

namespace {

// A pause row of `n` updates, each blocked `blocked_s`, pulling `bytes` in `pull_s`.
PauseRow pause_row(const std::string& name, int n, double blocked_s, std::uint64_t bytes, double pull_s,
                   double reader_gbps) {
  PauseRow r;
  r.name = name;
  for (int i = 0; i < n; ++i) {
    PauseSample s;
    s.version = static_cast<std::uint64_t>(i + 10);
    s.blocked_s = blocked_s * (i == n - 1 ? 3.0 : 1.0);  // one slow update: the max and p99
    s.call_s = std::max(s.blocked_s, 1e-3);
    s.pull_s = pull_s;
    s.pull_bytes = bytes;
    s.marks_ok = true;
    r.samples.push_back(s);
  }
  r.window_s = 2.0;
  r.reader_bytes = static_cast<std::uint64_t>(reader_gbps * 1e9 * r.window_s);
  r.process_cpu_s = 3.0;  // 1.5 cores over the window
  r.machine_cpu_s = 3.5;
  r.summarize();
  return r;
}

}  // namespace

TEST_CASE("bench: pause rows, their targets and JSON, from the figures", "[bench][pause]") {
  PauseReport report;
  report.config.reps = 10;
  PauseGroup g;
  g.transport = "shm";
  g.size_bytes = 256 * kMiB;
  g.memcpy_median_s = 0.040;
  g.memcpy_gbps = 6.7;
  g.reader_idle_gbps = 10.0;
  const std::uint64_t bytes = 256 * kMiB;
  g.rows.push_back(pause_row("foreground", 10, 0.050, bytes, 0.050, 3.0));
  g.rows.push_back(
      pause_row("swap", 10, 20e-6, bytes, 0.080, 6.0));  // 0.04% of 50 ms; 0.625x pull; 0.6x reader
  g.rows.push_back(pause_row("copy", 10, 0.060, bytes, 0.050, 5.0));  // 1.5x memcpy
  report.groups.push_back(g);
  PauseGroup skipped;
  skipped.transport = "ucx";
  skipped.size_bytes = 256 * kMiB;
  skipped.skipped = "not built";
  report.groups.push_back(skipped);

  const PauseRow& swap = report.groups[0].rows[1];
  CHECK(swap.blocked_median_s == Approx(20e-6));
  CHECK(swap.blocked_p99_s == Approx(60e-6));  // nearest rank: the largest of 10
  CHECK(swap.blocked_max_s == Approx(60e-6));
  CHECK(swap.pull_gbps_median == Approx(static_cast<double>(bytes) / 1e9 / 0.080));
  CHECK(swap.reader_gbps == Approx(6.0));
  CHECK(swap.pull_busy == Approx(10 * 0.080 / 2.0));
  CHECK(swap.process_cores == Approx(1.5));
  CHECK(swap.machine_cores == Approx(1.75));

  const auto checks = evaluate_pause_targets(report);
  REQUIRE(checks.size() == 6);  // the skipped group has none
  auto verdict = [&](const std::string& name) {
    for (const auto& c : checks)
      if (c.name == name) return c.verdict;
    return std::string("absent");
  };
  CHECK(verdict("swap pause") == "PASS");
  CHECK(verdict("copy pause") == "FAIL");
  CHECK(verdict("swap pause, install() wall") == "FAIL");  // the call took 1 ms: 2% of 50 ms
  CHECK(verdict("copy pause, install() wall") == "FAIL");
  CHECK(verdict("background pull") == "FAIL");
  CHECK(verdict("reader during updates") == "FAIL");

  report.groups[0].rows[2].error = "install: broken";
  const auto without_copy = evaluate_pause_targets(report);
  REQUIRE(without_copy[1].name == "copy pause");
  CHECK(without_copy[1].verdict == "not measured");
  CHECK_THAT(without_copy[1].measured, Catch::Contains("install: broken"));

  char dir_template[] = "/tmp/ws-bench-pause-test-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  std::string error;
  REQUIRE(write_pause_json(dir + "/pause.json", report, checks, &error));
  const auto json = nlohmann::json::parse(slurp(dir + "/pause.json"));
  CHECK(json["bench"] == "pause");
  REQUIRE(json["groups"].size() == 2);
  CHECK(json["groups"][1]["skipped"] == "not built");
  const auto& rows = json["groups"][0]["rows"];
  REQUIRE(rows.size() == 3);
  CHECK(rows[1]["name"] == "swap");
  CHECK(rows[1]["updates"] == 10);
  CHECK(rows[1]["samples"].size() == 10);
  CHECK(rows[1]["reader_of_idle"].get<double>() == Approx(0.6));
  CHECK(rows[1]["call_s_median"].get<double>() == Approx(1e-3));
  CHECK(rows[1]["process_cores"].get<double>() == Approx(1.5));
  CHECK(rows[1]["machine_cores"].get<double>() == Approx(1.75));
  CHECK(json["targets"].size() == 6);
  CHECK(json["targets_passed"] == 1);
  CHECK(json["targets_failed"] == 5);
  std::remove((dir + "/pause.json").c_str());
  ::rmdir(dir.c_str());
}
