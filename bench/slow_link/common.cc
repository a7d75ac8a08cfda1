#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace slowlink {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}


nlohmann::json VersionSource::to_json() const {
  nlohmann::json j;
  j["dir"] = dir;
  j["synthetic"] = synthetic;
  j["elements"] = elements;
  j["seed"] = seed;
  return j;
}

VersionSource VersionSource::from_json(const nlohmann::json& j) {
  VersionSource s;
  s.dir = j.at("dir").get<std::string>();
  s.synthetic = j.at("synthetic").get<bool>();
  s.elements = j.at("elements").get<std::uint64_t>();
  s.seed = j.at("seed").get<std::uint64_t>();
  return s;
}

namespace {

std::vector<float> read_version_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open version file " + path + " (--versions DIR, or --synthetic)");
  const std::streamoff size = in.tellg();
  if (size <= 0 || size % 4 != 0) {
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, not a packed float32 image");
  }
  std::vector<float> image(static_cast<std::size_t>(size) / 4);
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(image.data()), size)) throw std::runtime_error("cannot read " + path);
  return image;
}

// A random walk: version 1 ~ N(0, 0.02); each step adds N(0, 3e-5) to every
// element, about a quarter of a bf16 ulp at that scale, so most bf16 elements
// stay unchanged from one version to the next (as in the recorded RL run).
std::vector<std::vector<float>> synthetic_versions(std::uint64_t elements, std::uint64_t seed,
                                                   std::uint64_t count) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> init(0.0f, 0.02f);
  std::normal_distribution<float> step(0.0f, 3e-5f);
  std::vector<std::vector<float>> out;
  out.reserve(count);
  std::vector<float> v(elements);
  for (auto& x : v) x = init(rng);
  out.push_back(v);
  for (std::uint64_t k = 1; k < count; ++k) {
    for (auto& x : v) x += step(rng);
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::vector<std::vector<float>> load_versions(const VersionSource& source, std::uint64_t count) {
  if (source.synthetic) return synthetic_versions(source.elements, source.seed, count);
  std::vector<std::vector<float>> out;
  out.reserve(count);
  for (std::uint64_t v = 1; v <= count; ++v) {
    char name[32];
    std::snprintf(name, sizeof(name), "/v%04llu.bin", static_cast<unsigned long long>(v));
    out.push_back(read_version_file(source.dir + name));
    if (out.back().size() != out.front().size()) {
      throw std::runtime_error(source.dir + name + ": " + std::to_string(out.back().size()) +
                               " elements, version 1 has " + std::to_string(out.front().size()));
    }
  }
  return out;
}

std::vector<std::uint16_t> to_bf16(const std::vector<float>& fp32) {
  std::vector<std::uint16_t> out(fp32.size());
  weightsync::narrow_to_bfloat16(fp32.data(), out.data(), fp32.size());
  return out;
}

weightsync::WeightLayout fp32_layout(std::uint64_t elements) {
  weightsync::TensorSpec spec;
  spec.name = kTensorName;
  spec.dtype = weightsync::DType::kFloat32;
  spec.shape = {static_cast<std::int64_t>(elements)};
  return take(weightsync::WeightLayout::build({spec}), "building the float32 layout");
}

void check(const weightsync::Status& status, const std::string& what) {
  if (!status.ok()) throw std::runtime_error(what + ": " + status.to_string());
}

void write_json_atomic(const std::string& path, const nlohmann::json& value) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << value.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json wait_for_json(const std::string& path, double timeout_s, const std::string& what,
                             const std::string& abort_path) {
  const auto start = Clock::now();
  for (;;) {
    if (::access(path.c_str(), F_OK) == 0) return nlohmann::json::parse(read_text(path));
    if (!abort_path.empty() && ::access(abort_path.c_str(), F_OK) == 0) {
      throw std::runtime_error("gave up waiting for " + what +
                               ": the other side failed: " + read_text(abort_path));
    }
    if (seconds_since(start) > timeout_s) {
      throw std::runtime_error("timed out after " + std::to_string(timeout_s) + " s waiting for " + what +
                               " (" + path + "): is the other role running, on the same --dir?");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void make_dirs(const std::string& path) {
  std::string partial;
  std::stringstream ss(path);
  std::string piece;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(ss, piece, '/')) {
    if (piece.empty()) continue;
    partial += piece + "/";
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw std::runtime_error("cannot create " + partial + ": " + std::strerror(errno));
    }
  }
}

Summary summarize(std::vector<double> values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  s.median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  s.min = values.front();
  s.max = values.back();
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(n);
  return s;
}

void split_address(const std::string& address, std::string* host, std::uint16_t* port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    throw std::runtime_error("malformed address '" + address + "' (expected host:port)");
  }
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  const unsigned long p = std::stoul(address.substr(colon + 1));
  if (p == 0 || p > 65535) throw std::runtime_error("bad port in '" + address + "'");
  *port = static_cast<std::uint16_t>(p);
}

}  // namespace slowlink
