// The helpers the report files share (report_common.h), and format_size.
#include "report_common.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report.h"

namespace wsbench {
namespace report_detail {
namespace {

int transport_rank(const std::string& transport) {
  static const char* const kOrder[] = {"verbs", "ucx", "shm", "tcp"};
  for (int i = 0; i < 4; ++i) {
    if (transport == kOrder[i]) return i;
  }
  return 4;
}

bool record_less(const CellRecord& a, const CellRecord& b) {
  const int ra = transport_rank(a.transport), rb = transport_rank(b.transport);
  if (ra != rb) return ra < rb;
  if (a.transport != b.transport) return a.transport < b.transport;
  if (a.detail != b.detail) return a.detail < b.detail;
  if (a.size_bytes != b.size_bytes) return a.size_bytes < b.size_bytes;
  return a.readers < b.readers;
}

}  // namespace

// ---------------------------------------------------------------------------
// Small text helpers.

bool finite(double v) {
  return std::isfinite(v);
}

std::string one_line(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return out;
}

std::string truncate(const std::string& s, std::size_t max) {
  if (s.size() <= max) return s;
  if (max <= 3) return s.substr(0, max);
  std::size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

std::string num(double v, const char* spec) {
  if (!finite(v)) return "-";
  return fmt::format(fmt::runtime(spec), v);
}

std::string gbps_text(double gbps) {
  return num(gbps, "{:.2f}");
}

std::string ms_text(double seconds) {
  if (!finite(seconds)) return "-";
  const double ms = seconds * 1e3;
  if (std::fabs(ms) >= 100.0) return fmt::format("{:.1f}", ms);
  if (std::fabs(ms) >= 1.0) return fmt::format("{:.2f}", ms);
  return fmt::format("{:.3f}", ms);
}

std::string percent_text(double fraction) {
  if (!finite(fraction)) return "-";
  return fmt::format("{:.0f}%", fraction * 100.0);
}

// ---------------------------------------------------------------------------
// Records and baselines.

std::vector<const CellRecord*> sorted_records(const BenchReport& report) {
  std::vector<const CellRecord*> rows;
  rows.reserve(report.records.size());
  for (const CellRecord& r : report.records) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const CellRecord* a, const CellRecord* b) { return record_less(*a, *b); });
  return rows;
}

std::string label(const CellRecord& r) {
  return r.detail.empty() ? r.transport : r.transport + " " + r.detail;
}

std::vector<NamedSeries> baseline_series(const Baselines& b) {
  std::vector<NamedSeries> out;
  out.push_back({"memcpy_1t", "memcpy 1 thread", "", &b.memcpy_1t});
  out.push_back({"memcpy_2t", "memcpy 2 threads", "", &b.memcpy_2t});
  out.push_back({"tcp_raw", "tcp raw (own sender/receiver)", "", &b.tcp_raw});
  for (const auto& [tls, figures] : b.ucx_perftest) {
    out.push_back({"ucx_perftest " + tls, "ucx_perftest ucp_get " + tls, tls, &figures});
  }
  out.push_back({"file", "checkpoint file (page cache)", "", &b.file});
  out.push_back({"file_fsync", "checkpoint file (fsync + read from disk)", "", &b.file_fsync});
  return out;
}

const BaselineFigure* figure_at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size) {
  const auto it = figures.find(size);
  return it == figures.end() ? nullptr : &it->second;
}

double gbps_at(const std::map<std::uint64_t, BaselineFigure>& figures, std::uint64_t size) {
  const BaselineFigure* f = figure_at(figures, size);
  return f ? f->gbps : kNaN;
}

// ---------------------------------------------------------------------------
// Files.

std::string errno_text(int err) {
  return std::strerror(err);
}

bool write_text_file(const std::string& path, const std::string& text, std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    const int err = errno;
    if (error)
      *error = fmt::format("cannot create {}: {} (check that the directory exists and is writable)", path,
                           errno_text(err));
    return false;
  }
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    if (error)
      *error = fmt::format("cannot write {}: {} (disk full?)", path, errno_text(wrote ? errno : write_err));
    return false;
  }
  return true;
}

}  // namespace report_detail

using report_detail::kGiB;
using report_detail::kKiB;
using report_detail::kMiB;

// ---------------------------------------------------------------------------

std::string format_size(std::uint64_t bytes) {
  try {
    static const struct {
      std::uint64_t unit;
      const char* name;
    } kUnits[] = {{kGiB * 1024, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
    for (const auto& u : kUnits) {
      if (bytes < u.unit) continue;
      if (bytes % u.unit == 0) return fmt::format("{} {}", bytes / u.unit, u.name);
      return fmt::format("{:.1f} {}", static_cast<double>(bytes) / static_cast<double>(u.unit), u.name);
    }
    return fmt::format("{} B", bytes);
  } catch (...) {
    return std::to_string(bytes) + " B";
  }
}

}  // namespace wsbench
