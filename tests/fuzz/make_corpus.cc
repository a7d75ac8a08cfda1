// Writes one valid encoding of each message and of a layout into a folder, as
// the seed corpus for wire_fuzzer. Usage: ws_fuzz_corpus DIR
#include <cstdio>
#include <string>

#include "auth/signing.h"
#include "transport/ucx/ucx_offer.h"
#include "transport/verbs/verbs_wire.h"
#include "weightsync/layout.h"
#include "wire/messages.h"

using namespace weightsync;
using namespace weightsync::detail;

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s DIR\n", argv[0]), 2;
  ReadMsg read;
  read.lease_id = 3;
  read.ranges = {{0, 64}, {256, 1024}};
  SlotTableMsg table;
  table.slot_count = 3;
  table.slot_bytes = 1 << 20;
  table.transports = {{"tcp", {}}, {"ucx", {1, 2, 3, 4}}};
  auto layout =
      WeightLayout::build({{"embed", DType::kBFloat16, {512, 64}}, {"head", DType::kFloat32, {64}}});
  UcxOffer ucx;
  ucx.worker_address = std::vector<std::uint8_t>(64, 0x5a);
  ucx.slots = {{4096, 1 << 20, {1, 2, 3}}, {8192, 1 << 20, {4, 5}}};
  ucx.stamps = {65536, 4096, {6}};
  VerbsOffer verbs{{{4096, 1 << 20, 11}, {8192, 1 << 20, 12}}, {65536, 4096, 13}};
  SignatureBlock block;  // unsigned: the decoder checks the shape, the subscriber the signature
  block.version = 5;
  block.payload_bytes = 3 * kMinSignatureChunkBytes + 10;
  block.chunk_bytes = kMinSignatureChunkBytes;
  block.chunks.resize(4);
  DeltaMsg delta;
  delta.element_bytes = 2;
  delta.links = {{3, 4, 99, 1000}, {4, 6, 98, 2000}};
  const std::pair<const char*, std::vector<std::uint8_t>> seeds[] = {
      {"hello", HelloMsg{Role::kData, 9, {}, "gen"}.encode()},
      {"challenge", ChallengeMsg{{}, true}.encode()},
      {"auth", AuthMsg{}.encode()},
      {"welcome", WelcomeMsg{{}, 9}.encode()},
      {"error", ErrorMsg{ErrorCode::kNotReady, "later"}.encode()},
      {"layout_msg", LayoutMsg{layout->serialize()}.encode()},
      {"layout", layout->serialize()},
      {"slot_table", table.encode()},
      {"query", QueryVersionMsg{4, 100}.encode()},
      {"lease", LeaseMsg{1, 4, 2, 8, true, 77}.encode()},
      {"read", read.encode()},
      {"shm_regions", ShmRegionsMsg{3, 1 << 20, 4096}.encode()},
      {"shm_offer", ShmOffer{"3f1c0e4e-7a0b-4d1e-9c53-2d6f0a3b7e11", "weightsync-00112233"}.encode()},
      {"ucx_offer", ucx.encode()},
      {"verbs_offer", verbs.encode()},
      {"verbs_endpoint", VerbsEndpoint{0x1234, 0x42, 3, {}, 5}.encode()},
      {"transport_connect", TransportConnectMsg{"verbs", {1, 2, 3}}.encode()},
      {"fetch_delta", FetchDeltaMsg{3, 6, 1 << 20, 100}.encode()},
      {"delta", delta.encode()},
      {"fetch_signature", FetchSignatureMsg{5}.encode()},
      {"signature_block", block.encode()},
  };
  for (const auto& [name, bytes] : seeds) {
    std::string path = std::string(argv[1]) + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return std::fprintf(stderr, "cannot write %s\n", path.c_str()), 1;
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  return 0;
}
