// weightsync-slowlink generator: the four paths, one after the other, per version.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "file_channel.h"
#include "roles.h"
#include "safetensors_file.h"

namespace slowlink {

namespace {

using weightsync::Destination;
using weightsync::PullOptions;
using weightsync::PullResult;
using weightsync::Subscriber;

std::unique_ptr<Subscriber> connect(const std::string& address, const std::string& name, double timeout_s) {
  weightsync::SubscriberOptions options;
  options.transport = "tcp";
  options.client_name = "slowlink-" + name;
  options.connect_timeout_ms = static_cast<int>(timeout_s * 1e3);
  options.io_timeout_ms = static_cast<int>(timeout_s * 1e3);
  return take(Subscriber::connect(address, options), "connecting the " + name + " subscriber to " + address);
}

struct Pulled {
  PullResult result;
  double seconds = 0;  // wall: the pull call
};

Pulled timed_pull(Subscriber& sub, void* dest, std::size_t bytes, std::uint64_t version,
                  std::optional<std::uint64_t> delta_base, double timeout_s, const std::string& what) {
  PullOptions options;
  options.wait = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1e3));
  options.delta_base = delta_base;
  const auto start = Clock::now();
  auto result = sub.pull(Destination::contiguous(dest, bytes), options);
  Pulled out;
  out.seconds = seconds_since(start);
  out.result = take(std::move(result), what + " pull of version " + std::to_string(version));
  if (out.result.version != version) {
    throw std::runtime_error(what + " pull delivered version " + std::to_string(out.result.version) +
                             ", expected " + std::to_string(version));
  }
  return out;
}

std::string human_bytes(double b) {
  char s[32];
  if (b >= 1e6) {
    std::snprintf(s, sizeof(s), "%.2f MB", b / 1e6);
  } else {
    std::snprintf(s, sizeof(s), "%.1f KB", b / 1e3);
  }
  return s;
}

int generator_body(const GeneratorConfig& config) {
  const std::string abort_path = config.dir + "/trainer-failed";
  const nlohmann::json addresses =
      wait_for_json(config.dir + "/addresses.json", config.timeout_s, "the trainer's addresses", abort_path);
  const std::uint64_t trainer_count = addresses.at("count").get<std::uint64_t>();
  const std::uint64_t count = config.count == 0 ? trainer_count : config.count;
  if (count != trainer_count) {
    throw std::runtime_error("--count " + std::to_string(count) + " but the trainer publishes " +
                             std::to_string(trainer_count) + " syncs: pass the same --count, or 0");
  }
  const VersionSource source = VersionSource::from_json(addresses.at("source"));
  const std::uint64_t elements = addresses.at("elements").get<std::uint64_t>();

  std::fprintf(stderr, "generator: loading %llu versions to check against\n",
               static_cast<unsigned long long>(count + 1));
  const auto expected = load_versions(source, count + 1);
  if (expected.front().size() != elements) throw std::runtime_error("the versions differ from the trainer's");
  std::vector<std::vector<std::uint16_t>> expected_bf16;
  for (const auto& e : expected) expected_bf16.push_back(to_bf16(e));

  auto fp32 = connect(addresses.at("fp32").get<std::string>(), "fp32", config.timeout_s);
  auto bf16_full = connect(addresses.at("bf16").get<std::string>(), "bf16-full", config.timeout_s);
  auto bf16_delta = connect(addresses.at("bf16").get<std::string>(), "bf16-delta", config.timeout_s);
  if (!bf16_delta->publisher_deltas()) throw std::runtime_error("the bf16 publisher does not offer deltas");
  const std::size_t fp32_total = fp32->layout().total_bytes();
  const std::size_t bf16_total = bf16_full->layout().total_bytes();
  const std::size_t fp32_payload = elements * sizeof(float);
  const std::size_t bf16_payload = elements * sizeof(std::uint16_t);
  if (fp32->layout() != fp32_layout(elements)) throw std::runtime_error("unexpected fp32 layout");
  if (bf16_full->layout().payload_bytes() != bf16_payload ||
      bf16_full->layout().tensors().front().spec.dtype != weightsync::DType::kBFloat16) {
    throw std::runtime_error("the bf16 publisher's layout is not one bf16 tensor of " +
                             std::to_string(elements));
  }
  const bool encrypted = fp32->encrypted() && bf16_full->encrypted() && bf16_delta->encrypted();
  std::fprintf(stderr, "generator: transports %s/%s/%s%s; fp32 %zu B, bf16 %zu B per version\n",
               fp32->transport().c_str(), bf16_full->transport().c_str(), bf16_delta->transport().c_str(),
               encrypted ? " (encrypted)" : "", fp32_payload, bf16_payload);

  std::vector<std::uint8_t> fp32_params(fp32_total), bf16_params(bf16_total), delta_params(bf16_total);
  std::vector<float> ckpt_params(elements);
  const std::string local = config.dir + "/generator-disk";
  make_dirs(local);

  nlohmann::json samples = nlohmann::json::array();
  nlohmann::json published = nlohmann::json::array();
  std::map<std::string, std::vector<double>> seconds, wire;
  bool all_exact = true, all_deltas = true;
  std::uint64_t inexact = 0;

  for (std::uint64_t v = 1; v <= count + 1; ++v) {
    const nlohmann::json note =
        wait_for_json(config.dir + "/published-" + std::to_string(v), config.timeout_s,
                      "version " + std::to_string(v) + " to be published", abort_path);
    published.push_back(note);
    const bool warmup = v == 1;
    const auto& want32 = expected[v - 1];
    const auto& want16 = expected_bf16[v - 1];
    std::map<std::string, double> line;
    auto record = [&](const std::string& path, double s, std::uint64_t wire_bytes, bool exact,
                      nlohmann::json extra) {
      extra["version"] = v;
      extra["warmup"] = warmup;
      extra["path"] = path;
      extra["seconds"] = s;
      extra["wire_bytes"] = wire_bytes;
      extra["exact"] = exact;
      samples.push_back(extra);
      line[path] = s;
      if (!exact) {
        all_exact = false;
        ++inexact;
        std::fprintf(stderr, "generator: version %llu, %s: bytes differ from the expected image\n",
                     static_cast<unsigned long long>(v), path.c_str());
      }
      if (!warmup) {
        seconds[path].push_back(s);
        wire[path].push_back(static_cast<double>(wire_bytes));
      }
    };

    // 1. fp32 full pull.
    Pulled a = timed_pull(*fp32, fp32_params.data(), fp32_total, v, std::nullopt, config.timeout_s, "fp32");
    record("fp32-full", a.seconds, a.result.wire_bytes,
           std::memcmp(fp32_params.data(), want32.data(), fp32_payload) == 0,
           {{"pull_seconds", a.result.seconds}, {"delta", a.result.delta}});
    // 2. bf16 full pull.
    Pulled b =
        timed_pull(*bf16_full, bf16_params.data(), bf16_total, v, std::nullopt, config.timeout_s, "bf16");
    record("bf16-full", b.seconds, b.result.wire_bytes,
           std::memcmp(bf16_params.data(), want16.data(), bf16_payload) == 0,
           {{"pull_seconds", b.result.seconds}, {"delta", b.result.delta}});
    // 3. bf16 delta pull from the version the destination holds.
    std::optional<std::uint64_t> base;
    if (v >= 2) base = bf16_delta->held_version();
    Pulled c =
        timed_pull(*bf16_delta, delta_params.data(), bf16_total, v, base, config.timeout_s, "bf16 delta");
    const bool delta_exact = std::memcmp(delta_params.data(), want16.data(), bf16_payload) == 0 &&
                             std::memcmp(delta_params.data(), bf16_params.data(), bf16_payload) == 0;
    if (!warmup && !c.result.delta) {
      all_deltas = false;
      std::fprintf(stderr, "generator: version %llu: the delta pull fell back to a full pull\n",
                   static_cast<unsigned long long>(v));
    }
    record("bf16-delta", c.seconds, c.result.wire_bytes, delta_exact,
           {{"pull_seconds", c.result.seconds},
            {"delta", c.result.delta},
            {"delta_base", base ? nlohmann::json(*base) : nlohmann::json(nullptr)}});
    // 4. The checkpoint file: trainer writes it, it crosses the link into a
    // file here (fsync), then is loaded into the fp32 parameters.
    const std::string file = local + "/policy-" + std::to_string(v) + ".safetensors";
    std::memset(ckpt_params.data(), 0, fp32_payload);
    const auto start = Clock::now();
    const FetchResult fetched =
        fetch_file(addresses.at("file").get<std::string>(), v, file, config.timeout_s);
    const double fetched_at = seconds_since(start);
    load_safetensors(file, kTensorName, ckpt_params.data(), elements);
    const double total = seconds_since(start);
    record("checkpoint-file", total, fetched.bytes,
           std::memcmp(ckpt_params.data(), want32.data(), fp32_payload) == 0,
           {{"write_seconds", fetched.write_seconds},
            {"copy_seconds", fetched_at - fetched.write_seconds},
            {"load_seconds", total - fetched_at},
            {"file_bytes", fetched.bytes}});
    ::unlink(file.c_str());

    std::fprintf(stderr,
                 "generator: %s version %llu%s: fp32 %.4f s, bf16 %.4f s, bf16 delta %.4f s (%s%s), "
                 "checkpoint %.4f s\n",
                 config.label.c_str(), static_cast<unsigned long long>(v), warmup ? " (warm-up)" : "",
                 line["fp32-full"], line["bf16-full"], line["bf16-delta"],
                 human_bytes(c.result.wire_bytes).c_str(), c.result.delta ? "" : ", full",
                 line["checkpoint-file"]);
    nlohmann::json ack;
    ack["version"] = v;
    write_json_atomic(config.dir + "/pulled-" + std::to_string(v), ack);
  }

  const auto delta_stats = bf16_delta->stats();
  nlohmann::json out;
  out["tool"] = "weightsync-slowlink";
  out["label"] = config.label;
  out["encrypted"] = encrypted;
  out["syncs"] = count;
  out["elements"] = elements;
  out["fp32_bytes"] = fp32_payload;
  out["bf16_bytes"] = bf16_payload;
  out["source"] = source.to_json();
  out["layout"] = addresses.at("layout");
  out["delta_level"] = addresses.at("delta_level");
  out["transport"] = fp32->transport();
  out["checksums"] = fp32->publisher_checksums();
  out["samples"] = samples;
  out["published"] = published;
  out["delta_pulls"] = delta_stats.delta_pulls;
  out["delta_fallbacks"] = delta_stats.delta_fallbacks;
  out["all_exact"] = all_exact;
  out["all_deltas"] = all_deltas;
  nlohmann::json paths;
  for (const auto& name : path_names()) {
    const Summary s = summarize(seconds[name]);
    const Summary w = summarize(wire[name]);
    paths[name] = {{"n", s.n},
                   {"median_seconds", s.median},
                   {"min_seconds", s.min},
                   {"max_seconds", s.max},
                   {"mean_seconds", s.mean},
                   {"median_wire_bytes", w.median},
                   {"min_wire_bytes", w.min},
                   {"max_wire_bytes", w.max}};
  }
  out["paths"] = paths;
  const double ckpt = paths["checkpoint-file"]["median_seconds"].get<double>();
  const double delta = paths["bf16-delta"]["median_seconds"].get<double>();
  out["speedup_delta_vs_checkpoint"] = delta > 0 ? ckpt / delta : 0.0;
  {
    std::ofstream f(config.out, std::ios::trunc);
    f << out.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + config.out);
  }
  std::fprintf(stderr, "generator: wrote %s\n", config.out.c_str());
  run_summarize({config.out});
  if (!all_exact) {
    std::fprintf(stderr, "generator: %llu pulls or loads did not match the expected bytes\n",
                 static_cast<unsigned long long>(inexact));
    return 1;
  }
  return 0;
}

}  // namespace

int run_generator(const GeneratorConfig& config) {
  try {
    return generator_body(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generator: error: %s\n", e.what());
    try {
      write_json_atomic(config.dir + "/generator-failed", nlohmann::json(e.what()));
    } catch (...) {
    }
    return 1;
  }
}

}  // namespace slowlink
