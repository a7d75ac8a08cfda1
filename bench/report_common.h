// Internal to the report files (report_table.cc, report_targets.cc,
// report_files.cc, report_plot.cc): the helpers more than one of them uses.
// Not part of the bench's interface; other code includes report.h.
//
// Contract: calling thread only. The text helpers can throw (std::bad_alloc,
// fmt::format_error); the entry points of report.h catch everything.
// write_text_file returns false and sets *error (with what to do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "records.h"

namespace wsbench {
namespace report_detail {

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

// ---------------------------------------------------------------------------
// Small text helpers. "-" stands for a figure that is not finite.

bool finite(double v);
// One line of text: control characters become spaces.
std::string one_line(const std::string& s);
// At most `max` bytes, "..." marking a cut (never inside a UTF-8 sequence).
std::string truncate(const std::string& s, std::size_t max);
// `v` formatted with the fmt format string `spec`, e.g. "{:.3f}".
std::string num(double v, const char* spec);
// GB/s with two decimals.
std::string gbps_text(double gbps);
// Seconds shown as milliseconds with about three significant digits.
std::string ms_text(double seconds);
// A fraction as a whole percentage: 0.97 -> "97%".
std::string percent_text(double fraction);

// ---------------------------------------------------------------------------
// Records.

// Pointers into report.records, in the order every output uses: transport
// (verbs, ucx, shm, tcp, then others by name), detail, size, readers.
std::vector<const CellRecord*> sorted_records(const BenchReport& report);
// "tcp", "ucx posix,self".
std::string label(const CellRecord& r);

// ---------------------------------------------------------------------------
// Baselines as a flat list of named series.

struct NamedSeries {
  std::string key;   // JSON / notes key: "memcpy_1t", "ucx_perftest posix,self", ...
  std::string name;  // display name
  std::string tls;   // ucx_perftest only
  const std::map<std::uint64_t, BaselineFigure>* figures;
};

// Points into `b`, which must outlive the result.
std::vector<NamedSeries> baseline_series(const Baselines& b);
// The figure at `size`, else nullptr.
const BaselineFigure* figure_at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size);
// Its GB/s, else NaN.
double gbps_at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size);

// ---------------------------------------------------------------------------
// Files.

std::string errno_text(int err);
// Writes `text` to `path` (replacing it).
bool write_text_file(const std::string& path, const std::string& text, std::string* error);

}  // namespace report_detail
}  // namespace wsbench
