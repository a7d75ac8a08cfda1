// weightsync-slowlink (docs/perf/slow_link_sync.md): what the trainer and
// generator roles share: the versions, the layout, the file handshake in the
// sync folder, timing and summaries.
//
// Contract
// - The tool is a benchmark, not library code: helpers throw
//   std::runtime_error with a message that says what to fix; main() catches
//   it, prints it and exits 1.
// - Every wait is bounded (a timeout in seconds) and says what it waited for.
// - The layout is one float32 tensor named kTensorName of `elements` elements
//   (the packed image of the RL policy: 892,288 elements for the recorded
//   versions); the bf16 layout is weightsync::narrowed_layout() of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/narrow.h"
#include "weightsync/weightsync.h"

namespace slowlink {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

inline constexpr const char* kTensorName = "policy";
inline constexpr std::uint64_t kRecordedElements = 892288;

// Where the versions come from: a folder of packed float32 images
// (v0001.bin, v0002.bin, ...) or a synthetic random walk.
struct VersionSource {
  std::string dir;  // recorded versions; empty: synthetic
  bool synthetic = false;
  std::uint64_t elements = kRecordedElements;  // synthetic only; recorded: from the file size
  std::uint64_t seed = 18;
  nlohmann::json to_json() const;
  static VersionSource from_json(const nlohmann::json& j);
};

// Versions 1..`count` as float32 images (index 0 is version 1). Throws when a
// file is missing, has a size that is not a multiple of 4, or differs in size.
std::vector<std::vector<float>> load_versions(const VersionSource& source, std::uint64_t count);

// bf16 image (round to nearest even) of a float32 image.
std::vector<std::uint16_t> to_bf16(const std::vector<float>& fp32);

weightsync::WeightLayout fp32_layout(std::uint64_t elements);

// Throws std::runtime_error("<what>: <status>") when !status.ok().
void check(const weightsync::Status& status, const std::string& what);
template <typename T>
T take(weightsync::Result<T> result, const std::string& what) {
  check(result.status(), what);
  return std::move(result).value();
}

// The sync folder: small JSON files written atomically (tmp + rename).
void write_json_atomic(const std::string& path, const nlohmann::json& value);
// Waits until `path` exists and parses it; throws after `timeout_s`, or at
// once when `abort_path` (when not empty) appears, quoting its contents.
nlohmann::json wait_for_json(const std::string& path, double timeout_s, const std::string& what,
                             const std::string& abort_path = "");
std::string read_text(const std::string& path);
void make_dirs(const std::string& path);

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Summary {
  std::size_t n = 0;
  double median = 0, min = 0, max = 0, mean = 0;
};
Summary summarize(std::vector<double> values);

// Splits "host:port"; throws on a malformed address.
void split_address(const std::string& address, std::string* host, std::uint16_t* port);

}  // namespace slowlink
