// Internal to the report files: the GPU part of a run (BenchReport::gpu) in
// the text tables (report_table.cc), the target checks (report_targets.cc)
// and the JSON (report_files.cc). A GPU part that was not measured is shown
// as "not measured: <why>" in each of them. Not part of the bench's
// interface; other code includes report.h.
//
// Contract: calling thread only. These can throw (std::bad_alloc,
// fmt::format_error); the entry points of report.h catch everything.
#pragma once

#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "records.h"
#include "report.h"

namespace wsbench {
namespace report_detail {

// The GPU rows and the GPU limits, after the host tables.
void print_gpu_tables(std::FILE* out, const BenchReport& report);

// The three GPU targets (>= 80% of their limit), one check per GPU row of
// 64 MiB or more, or one "not measured" check per target saying why.
void check_gpu(const BenchReport& report, std::vector<TargetCheck>* out);

// The "gpu" object of the JSON.
nlohmann::ordered_json gpu_json(const BenchReport& report);

}  // namespace report_detail
}  // namespace wsbench
