// Main of the conformance suite: ws_conformance --transport NAME [catch args].
// Exits 77 (ctest's SKIP_RETURN_CODE) with the reason when NAME is not built
// into the library or not viable on this machine, so ctest counts it skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "conformance.h"
#include "weightsync/cuda.h"
#include "weightsync/transports.h"

namespace wstest {
namespace {
std::string g_transport;
}
const std::string& conformance_transport() {
  return g_transport;
}
}  // namespace wstest

int main(int argc, char** argv) {
  std::vector<char*> rest;
  bool require_cuda = false;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--require-cuda") {
      require_cuda = true;
    } else if (std::string(argv[i]) == "--transport" && i + 1 < argc) {
      wstest::g_transport = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (wstest::g_transport.empty()) {
    std::fprintf(stderr, "usage: %s --transport NAME [Catch2 arguments]\n", argv[0]);
    return 2;
  }
  bool built = false;
  for (const auto& t : weightsync::available_transports()) {
    if (t.name != wstest::g_transport) continue;
    built = true;
    if (!t.viable) {
      std::printf("SKIPPED: transport '%s' is not viable on this machine: %s\n", t.name.c_str(),
                  t.reason.c_str());
      return 77;
    }
  }
  if (!built) {
    std::printf("SKIPPED: transport '%s' is not built into this library\n", wstest::g_transport.c_str());
    return 77;
  }
  if (require_cuda) {
    const weightsync::CudaInfo cuda = weightsync::cuda_info();
    if (!cuda.usable) {
      std::printf("SKIPPED: this case pulls into CUDA memory and no CUDA device can be used here: %s\n",
                  cuda.reason.c_str());
      return 77;
    }
    std::printf("conformance: CUDA device %s\n", cuda.device_name.c_str());
  }
  std::printf("conformance: transport %s\n", wstest::g_transport.c_str());
  return Catch::Session().run(static_cast<int>(rest.size()), rest.data());
}
