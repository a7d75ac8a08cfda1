// weightsync-slowlink summarize: one table from the generator's JSON files.
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "roles.h"

namespace slowlink {

int run_summarize(const std::vector<std::string>& files) {
  try {
    std::printf(
        "| link | path | median s/sync | min-max s | wire bytes (median) | syncs | checkpoint / path |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|\n");
    std::vector<std::string> verdicts;
    for (const auto& file : files) {
      std::ifstream in(file);
      if (!in) throw std::runtime_error("cannot open " + file);
      const nlohmann::json j = nlohmann::json::parse(in);
      const std::string label = j.value("label", file);
      const auto& paths = j.at("paths");
      const double ckpt = paths.at("checkpoint-file").at("median_seconds").get<double>();
      for (const auto& name : path_names()) {
        const auto& p = paths.at(name);
        const double median = p.at("median_seconds").get<double>();
        std::printf("| %s | %s | %.4f | %.4f-%.4f | %.0f | %llu | %.1fx |\n", label.c_str(), name.c_str(),
                    median, p.at("min_seconds").get<double>(), p.at("max_seconds").get<double>(),
                    p.at("median_wire_bytes").get<double>(),
                    static_cast<unsigned long long>(p.at("n").get<std::uint64_t>()),
                    median > 0 ? ckpt / median : 0.0);
      }
      const double speedup = j.at("speedup_delta_vs_checkpoint").get<double>();
      char line[320];
      std::snprintf(
          line, sizeof(line),
          "%s: bf16 delta %.1fx faster than the checkpoint file (>= 10x: %s); deltas %llu of %llu syncs "
          "(fallbacks %llu), every byte checked: %s",
          label.c_str(), speedup, speedup >= 10.0 ? "yes" : "no",
          static_cast<unsigned long long>(j.at("delta_pulls").get<std::uint64_t>()),
          static_cast<unsigned long long>(j.at("syncs").get<std::uint64_t>()),
          static_cast<unsigned long long>(j.at("delta_fallbacks").get<std::uint64_t>()),
          j.at("all_exact").get<bool>() ? "all exact" : "MISMATCHES");
      verdicts.push_back(line);
    }
    std::printf("\n");
    for (const auto& v : verdicts) std::printf("%s\n", v.c_str());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "summarize: %s\n", e.what());
    return 1;
  }
}

}  // namespace slowlink
