#include "trainer/warm_start.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "training/sft.h"

namespace trainer {

zorplex::Result<bool> ensure_warm_start(const std::string& dir, int steps, const std::atomic<bool>& stop) {
  std::error_code ec;
  std::unique_ptr<training::SftTrainer> sft;
  if (std::filesystem::exists(training::policy_file(dir), ec)) {
    auto resumed = training::SftTrainer::resume(dir);
    if (!resumed) return resumed.error();
    sft = std::move(resumed).value();
    if (sft->completed_steps() >= sft->options().steps) return true;
    std::printf("trainer: resuming the SFT warm start in %s at step %d/%d\n", dir.c_str(),
                sft->completed_steps(), sft->options().steps);
  } else {
    training::SftOptions options = training::recommended_warm_start();  // zorplex-sft's defaults
    options.steps = steps;
    auto created = training::SftTrainer::create(options);
    if (!created) return created.error();
    sft = std::move(created).value();
    std::printf("trainer: no starting checkpoint in %s; running the SFT warm start (%d steps)\n", dir.c_str(),
                steps);
  }
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  while (sft->completed_steps() < sft->options().steps) {
    if (stop.load()) {
      (void)sft->save(dir);
      return zorplex::Error{"interrupted during the SFT warm start (saved; run again to continue)"};
    }
    auto report = sft->step();
    if (!report) return zorplex::Error{"SFT warm start: " + report.error().message};
    const int done = sft->completed_steps();
    if (done % 50 == 0 || done == sft->options().steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("trainer: SFT step %d/%d  loss %.4f  elapsed %.0fs\n", done, sft->options().steps,
                  report.value().loss, elapsed);
      std::fflush(stdout);
    }
    if (done % 100 == 0) {
      auto saved = sft->save(dir);
      if (!saved) return saved.error();
    }
  }
  auto saved = sft->save(dir);
  if (!saved) return saved.error();
  return true;
}

}  // namespace trainer
