// Main of the conformance suite: ws_conformance --transport NAME [catch args].
// Exits 77 (ctest's SKIP_RETURN_CODE) with the reason when NAME is not built
// into the library or not viable on this machine, so ctest counts it skipped.
//
// The peer publishers of the suite run where WS_PEER_PREFIX says, bound to
// WS_PEER_BIND (tests/integration/peers.h; tests/testbed/ runs them in another
// host of scripts/testbed.sh). The hidden case "[auto-negotiation]" (run only
// when named) checks what a subscriber asking for "auto" gets from such a peer:
//   ws_conformance --transport EXPECTED "[auto-negotiation]"
// passes when that is EXPECTED, and, when EXPECTED is not shm, when asking
// for shm is refused because the publisher runs on another host.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "conformance.h"
#include "peers.h"
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

TEST_CASE("a subscriber asking for auto gets the expected transport from the peer publisher",
          "[.][auto-negotiation]") {
  using namespace weightsync;
  const std::string expected = wstest::conformance_transport();
  auto peer = wstest::start_peer_publisher({"--size", std::to_string(1 << 20), "--tensors", "2", "--versions", "1"},
                                           wstest::peer_host_from_env());
  REQUIRE(peer.process.wait_for("PUBLISHED 1", std::chrono::seconds(20)));
  auto sub = Subscriber::connect(peer.address, wstest::quick_options(5000, "auto"));
  INFO(sub.status().to_string());
  REQUIRE(sub.ok());
  WARN("auto negotiated " << (*sub)->transport() << " with the publisher at " << peer.address);
  CHECK((*sub)->transport() == expected);
  auto image = HostBuffer::allocate((*sub)->layout().total_bytes());
  REQUIRE(image.ok());
  auto pulled = (*sub)->pull(Destination::contiguous(image->data(), image->size()));
  REQUIRE(pulled.ok());
  CHECK(wstest::image_mismatch((*sub)->layout(), image->data(), pulled->version) == -1);
  if (expected != "shm") {
    // The publisher offers shm (its slots are memfds); this subscriber must
    // see from the host identities that it cannot use it, not try and fail.
    auto shm = Subscriber::connect(peer.address, wstest::quick_options(5000, "shm"));
    REQUIRE_FALSE(shm.ok());
    INFO(shm.status().to_string());
    CHECK(shm.status().code() == ErrorCode::kInvalidConfig);
    CHECK(shm.status().message().find("another host") != std::string::npos);
  }
}

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
  if (const char* prefix = std::getenv("WS_PEER_PREFIX"); prefix != nullptr && *prefix != '\0') {
    const char* bind = std::getenv("WS_PEER_BIND");
    std::printf("conformance: peer publishers run under '%s', bound to %s\n", prefix,
                bind != nullptr && *bind != '\0' ? bind : "loopback");
  }
  return Catch::Session().run(static_cast<int>(rest.size()), rest.data());
}
