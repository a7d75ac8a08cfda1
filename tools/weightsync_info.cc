// weightsync-info: what this build of libweightsync can do on this machine,
// like ucx_info: the library version, every data transport built in (in
// negotiation order) and whether it is viable here (and if not, why), and
// every setting in force with where it came from: describe_settings(), one
// line per row of the library's settings table, resolved as
// Publisher::create() and Subscriber::connect() resolve it. Exits 1 when one
// of them would fail with these settings (a malformed variable, or settings
// that contradict each other).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "weightsync/cuda.h"
#include "weightsync/settings.h"
#include "weightsync/transports.h"
#include "weightsync/version.h"

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Show the weightsync version, which data transports are built in and viable on this machine, "
      "and the settings in force (WEIGHTSYNC_* environment variables)."};
  bool json = false;
  app.add_flag("--json", json, "Print JSON instead of a table");
  CLI11_PARSE(app, argc, argv);

  const auto transports = weightsync::available_transports();
  const auto settings = weightsync::describe_settings();
  bool any_error = false;
  for (const auto& s : settings) any_error = any_error || !s.error.empty();

  if (json) {
    std::printf("{\"version\": \"%s\", \"transports\": [", weightsync::version());
    for (std::size_t i = 0; i < transports.size(); ++i) {
      const auto& t = transports[i];
      std::printf(
          "%s{\"name\": \"%s\", \"viable\": %s, \"reason\": \"%s\", \"description\": \"%s\", "
          "\"reads_cuda_slots\": %s, \"writes_cuda_memory\": %s}",
          i ? ", " : "", json_escape(t.name).c_str(), t.viable ? "true" : "false",
          json_escape(t.reason).c_str(), json_escape(t.description).c_str(),
          t.reads_cuda_slots ? "true" : "false", t.writes_cuda_memory ? "true" : "false");
    }
    const weightsync::CudaInfo cuda = weightsync::cuda_info();
    std::printf(
        "], \"cuda\": {\"built\": %s, \"usable\": %s, \"reason\": \"%s\", \"devices\": %d, \"device\": "
        "\"%s\"}",
        cuda.built ? "true" : "false", cuda.usable ? "true" : "false", json_escape(cuda.reason).c_str(),
        cuda.device_count, json_escape(cuda.device_name).c_str());
    std::printf(", \"settings\": [");
    for (std::size_t i = 0; i < settings.size(); ++i) {
      const auto& s = settings[i];
      std::printf(
          "%s{\"name\": \"%s\", \"environment\": \"%s\", \"value\": \"%s\", \"source\": \"%s\", "
          "\"error\": \"%s\", \"description\": \"%s\"}",
          i ? ", " : "", json_escape(s.name).c_str(), json_escape(s.environment).c_str(),
          json_escape(s.value).c_str(), json_escape(s.source).c_str(), json_escape(s.error).c_str(),
          json_escape(s.description).c_str());
    }
    std::printf("]}\n");
    return any_error ? 1 : 0;
  }

  std::printf("# weightsync %s\n#\n# Data transports (negotiation order: best first)\n",
              weightsync::version());
  for (const auto& t : transports) {
    std::printf("#   %-8s %-10s %s\n", t.name.c_str(), t.viable ? "viable" : "NOT VIABLE",
                t.description.c_str());
    if (!t.viable) std::printf("#            why: %s\n", t.reason.c_str());
    std::printf("#            memory: %s slots; CUDA destinations %s\n", t.reads_cuda_slots ? "CUDA" : "host",
                t.writes_cuda_memory ? "written directly" : "staged through page-locked host chunks");
  }
  const weightsync::CudaInfo cuda = weightsync::cuda_info();
  std::printf("#\n# CUDA memory (slots, destinations, device publishes)\n");
  if (cuda.usable) {
    std::printf("#   usable: %d device(s), current: %s (runtime %d, driver %d)\n", cuda.device_count,
                cuda.device_name.c_str(), cuda.runtime_version, cuda.driver_version);
  } else {
    std::printf("#   NOT USABLE (%s): %s\n", cuda.built ? "built with CUDA" : "built without CUDA",
                cuda.reason.c_str());
  }
  std::printf("#\n# Settings (option > environment > default)\n");
  for (const auto& s : settings) {
    std::printf("#   %-20s = %-45s from %-11s (%s)\n", s.name.c_str(), s.value.c_str(), s.source.c_str(),
                s.environment.c_str());
    if (!s.error.empty()) std::printf("#   ERROR: %s\n", s.error.c_str());
  }
  return any_error ? 1 : 0;
}
