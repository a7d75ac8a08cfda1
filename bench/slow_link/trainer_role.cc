// weightsync-slowlink trainer: the publishers and the checkpoint-file server.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#include "file_channel.h"
#include "roles.h"
#include "safetensors_file.h"

namespace slowlink {

namespace {

std::string version_path(const std::string& dir, const char* what, std::uint64_t v) {
  return dir + "/" + what + "-" + std::to_string(v);
}

int trainer_body(const TrainerConfig& config) {
  make_dirs(config.dir);
  const std::string local = config.dir + "/trainer-disk";
  make_dirs(local);
  // Leftovers of an earlier run in the same folder would satisfy our waits.
  for (std::uint64_t v = 1; v <= config.count + 1; ++v) {
    ::unlink(version_path(config.dir, "published", v).c_str());
    ::unlink(version_path(config.dir, "pulled", v).c_str());
  }
  for (const char* f : {"/addresses.json", "/trainer-failed", "/generator-failed", "/trainer-done"}) {
    ::unlink((config.dir + f).c_str());
  }

  std::fprintf(stderr, "trainer: loading %llu versions (%s)\n",
               static_cast<unsigned long long>(config.count + 1),
               config.source.synthetic ? "synthetic" : config.source.dir.c_str());
  const auto versions = load_versions(config.source, config.count + 1);
  const std::uint64_t elements = versions.front().size();
  const weightsync::WeightLayout layout = fp32_layout(elements);

  weightsync::PublisherOptions fp32_options;
  fp32_options.bind_address = config.bind;
  fp32_options.deltas = false;
  auto fp32 = take(weightsync::Publisher::create(layout, fp32_options), "creating the fp32 publisher");

  weightsync::PublisherOptions bf16_options;
  bf16_options.bind_address = config.bind;
  bf16_options.deltas = true;
  bf16_options.delta_level = config.delta_level;
  auto bf16 = take(weightsync::NarrowingPublisher::create(layout, weightsync::DType::kBFloat16, bf16_options),
                   "creating the bf16 narrowing publisher");

  FileMaker maker = [&](std::uint64_t v) {
    if (v == 0 || v > versions.size() || v > fp32->latest_version()) {
      throw std::runtime_error("version " + std::to_string(v) + " is not published");
    }
    MadeFile made;
    made.path = local + "/policy-" + std::to_string(v) + ".safetensors";
    const auto start = Clock::now();
    write_safetensors(made.path, kTensorName, versions[v - 1].data(), elements, v);
    made.write_seconds = seconds_since(start);
    return made;
  };
  FileServer files(config.bind, maker, config.timeout_s);

  nlohmann::json addresses;
  addresses["fp32"] = fp32->address();
  addresses["bf16"] = bf16->publisher().address();
  addresses["file"] = files.address();
  addresses["source"] = config.source.to_json();
  addresses["count"] = config.count;
  addresses["elements"] = elements;
  addresses["layout"] = {{"tensors", 1}, {"name", kTensorName}, {"dtype", "float32"}, {"elements", elements}};
  addresses["delta_level"] = config.delta_level;
  write_json_atomic(config.dir + "/addresses.json", addresses);
  std::fprintf(stderr, "trainer: fp32 %s, bf16 %s, checkpoint file %s; %llu elements\n",
               fp32->address().c_str(), bf16->publisher().address().c_str(), files.address().c_str(),
               static_cast<unsigned long long>(elements));

  const std::string abort_path = config.dir + "/generator-failed";
  std::vector<std::uint8_t> padded(layout.total_bytes(), 0);
  for (std::uint64_t v = 1; v <= config.count + 1; ++v) {
    // The image padded to the layout's region (its size rounded up to the alignment).
    std::memcpy(padded.data(), versions[v - 1].data(), elements * sizeof(float));
    auto published =
        take(fp32->publish(v, padded.data(), padded.size()), "fp32 publish of version " + std::to_string(v));
    check(bf16->publish(v, padded.data(), padded.size()).status(),
          "bf16 publish of version " + std::to_string(v));
    auto narrowed =
        take(bf16->flush(std::chrono::milliseconds(static_cast<long long>(config.timeout_s * 1e3))),
             "bf16 conversion of version " + std::to_string(v));
    if (narrowed.version != v) {
      throw std::runtime_error("bf16 publisher committed version " + std::to_string(narrowed.version) +
                               ", expected " + std::to_string(v));
    }
    // Its delta (from v - 1) computed before the generator is told: pulls then
    // time the transfer only.
    const auto start = Clock::now();
    weightsync::PublisherStats stats = bf16->publisher().stats();
    while (v >= 2 && stats.deltas_computed < v - 1) {
      if (seconds_since(start) > config.timeout_s) {
        throw std::runtime_error("timed out waiting for the delta of version " + std::to_string(v) +
                                 " (deltas computed: " + std::to_string(stats.deltas_computed) + ")");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      stats = bf16->publisher().stats();
    }
    nlohmann::json note;
    note["version"] = v;
    note["fp32_publish_seconds"] = published.copy_seconds;
    note["bf16_conversion_seconds"] = bf16->stats().last_conversion_seconds;
    note["deltas_computed"] = stats.deltas_computed;
    note["delta_bytes"] = v >= 2 ? stats.delta_last_bytes : 0;
    note["delta_seconds"] = v >= 2 ? stats.delta_last_seconds : 0.0;
    write_json_atomic(version_path(config.dir, "published", v), note);
    wait_for_json(version_path(config.dir, "pulled", v), config.timeout_s,
                  "the generator's acknowledgement of version " + std::to_string(v), abort_path);
  }
  const auto stats = bf16->publisher().stats();
  nlohmann::json done;
  done["deltas_computed"] = stats.deltas_computed;
  done["deltas_served"] = stats.deltas_served;
  done["files_served"] = files.served();
  done["file_server_error"] = files.last_error();
  write_json_atomic(config.dir + "/trainer-done", done);
  std::fprintf(
      stderr, "trainer: done: %llu versions, %llu deltas computed, %llu served, %llu checkpoint files\n",
      static_cast<unsigned long long>(config.count + 1),
      static_cast<unsigned long long>(stats.deltas_computed),
      static_cast<unsigned long long>(stats.deltas_served), static_cast<unsigned long long>(files.served()));
  return 0;
}

}  // namespace

int run_trainer(const TrainerConfig& config) {
  try {
    return trainer_body(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: error: %s\n", e.what());
    try {
      write_json_atomic(config.dir + "/trainer-failed", nlohmann::json(e.what()));
    } catch (...) {
    }
    return 1;
  }
}

}  // namespace slowlink
