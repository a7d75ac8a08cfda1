// Versions the trainer signs (issue 30; docs/security.md, "Versions the
// trainer signs"), end to end over real sockets: a subscriber holding the
// trainer's public key accepts a version only with the trainer's signature
// for that version and layout and bytes that match it, directly, through a
// relay, and by deltas. The attacks are what a generator that relays for
// others can do with the shared secret: change bytes (finding 4: a relay
// that flips a byte per version, whose leaves verified the relay's own tags
// under integrity), strip the signature, replay another version's, or sign
// with a key of its own.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "auth/signing.h"
#include "peers.h"
#include "publisher/publisher_core.h"

using namespace weightsync;
using namespace wstest;

namespace {

const std::string kSecret = "signature-test-secret";

// A key pair in PEM files, removed at the end of the test.
struct KeyFiles {
  detail::SigningKey key;
  std::string private_path;
  std::string public_path;
  ~KeyFiles() {
    std::remove(private_path.c_str());
    std::remove(public_path.c_str());
  }
};

std::unique_ptr<KeyFiles> make_keys(const std::string& name) {
  auto key = detail::SigningKey::generate();
  REQUIRE(key.ok());
  auto files = std::make_unique<KeyFiles>(KeyFiles{std::move(*key), "", ""});
  const std::string stem = "/tmp/ws-signature-test-" + std::to_string(::getpid()) + "-" + name;
  files->private_path = stem + "-key.pem";
  files->public_path = stem + "-pub.pem";
  std::ofstream(files->private_path) << *files->key.private_pem();
  std::ofstream(files->public_path) << *files->key.public_pem();
  return files;
}

PublisherOptions trainer_options(const KeyFiles* keys, bool integrity = true) {
  PublisherOptions o;
  o.secret = kSecret;
  o.integrity = integrity;
  o.checksum = true;
  o.slots = 3;
  o.io_timeout_ms = 3000;
  o.signing_key = keys ? keys->private_path : "";
  return o;
}

SubscriberOptions leaf_options(const KeyFiles* trusted, const std::string& transport = "tcp",
                               bool integrity = true) {
  SubscriberOptions o = quick_options(3000, transport);
  o.secret = kSecret;
  o.integrity = integrity;
  o.trusted_key = trusted ? trusted->public_path : "";
  return o;
}

std::unique_ptr<Publisher> make_publisher(const WeightLayout& layout, PublisherOptions options) {
  auto p = Publisher::create(layout, std::move(options));
  INFO(p.status().to_string());
  REQUIRE(p.ok());
  return std::move(*p);
}

std::unique_ptr<Subscriber> connect(const std::string& address, SubscriberOptions options) {
  auto s = Subscriber::connect(address, std::move(options));
  INFO(s.status().to_string());
  REQUIRE(s.ok());
  return std::move(*s);
}

std::unique_ptr<Relay> make_relay(const std::string& upstream, RelayOptions options) {
  options.upstreams = {upstream};
  options.publisher.secret = kSecret;
  options.publisher.integrity = true;
  options.publisher.slots = 3;
  options.publisher.io_timeout_ms = 3000;
  options.subscriber.client_name = "relay";
  auto relay = Relay::create(std::move(options));
  INFO(relay.status().to_string());
  REQUIRE(relay.ok());
  return std::move(*relay);
}

void wait_relay(Relay& relay, std::uint64_t version) {
  auto got = relay.wait_for_version(version - 1, std::chrono::seconds(20));
  INFO(got.status().to_string());
  REQUIRE(got.ok());
}

}  // namespace

TEST_CASE("signatures: a subscriber holding the trainer's key verifies every pull, over tcp and shm",
          "[signatures]") {
  auto keys = make_keys("direct");
  const auto layout = bytes_layout(3 * (1 << 20) + 4321, 3);
  auto trainer = make_publisher(layout, trainer_options(keys.get()));
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  for (const std::string transport : {"tcp", "shm"}) {
    INFO(transport);
    auto leaf = connect(trainer->address(), leaf_options(keys.get(), transport));
    for (int i = 0; i < 3; ++i) {
      const std::uint64_t v = trainer->latest_version() + 1;
      publish_pattern(*trainer, v);
      auto pulled = leaf->pull(Destination::contiguous(image->data(), image->size()));
      INFO(pulled.status().to_string());
      REQUIRE(pulled.ok());
      CHECK(pulled->version == v);
      CHECK(pulled->signature_verified);
      CHECK(image_mismatch(layout, image->data(), v) == -1);
    }
    CHECK(leaf->stats().signatures_verified == 3);
    CHECK(leaf->stats().signatures_refused == 0);
    // A scatter destination is digested in layout order too.
    auto scatter = allocate_scatter(layout);
    publish_pattern(*trainer, trainer->latest_version() + 1);
    auto pulled = leaf->pull(Destination::scatter(scatter.entries));
    INFO(pulled.status().to_string());
    REQUIRE(pulled.ok());
    CHECK(pulled->signature_verified);
  }
  CHECK(trainer->stats().versions_signed >= 1);
  // Partial pulls cannot be checked against the whole version's digests: refused, not passed unchecked.
  auto leaf = connect(trainer->address(), leaf_options(keys.get()));
  std::vector<char> part(16);
  auto partial = leaf->pull(Destination::slices({TensorSlice{"t0", 0, part.size(), 1, 0, part.data()}}));
  CHECK(partial.status().code() == ErrorCode::kInvalidArgument);
}

// Finding 4, and the signatures' reason to be: a relay that changes a byte
// of every version it forwards. Under integrity its leaves verified the
// relay's own tags (it holds the secret); with the trainer's key they refuse
// every such pull.
TEST_CASE(
    "signatures: through a relay that flips a byte of every version, no leaf accepts one of 1,000 pulls",
    "[signatures][finding4]") {
  auto keys = make_keys("flip");
  const auto layout = bytes_layout(64 << 10, 2);
  auto trainer = make_publisher(layout, trainer_options(keys.get()));
  RelayOptions options;
  options.pipelined = false;
  options.subscriber = leaf_options(nullptr);  // the relay checks nothing of the signature: it forwards it
  std::atomic<std::uint64_t> flipped{0};
  options.before_commit = [&](std::uint64_t version, void* slot, std::size_t bytes) {
    static_cast<unsigned char*>(slot)[(version * 977) % bytes] ^= 0x01;  // the attacker's change
    ++flipped;
  };
  auto relay = make_relay(trainer->address(), options);
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());

  // Control: a leaf with integrity alone accepts the relay's bytes as verified.
  publish_pattern(*trainer, 1);
  wait_relay(*relay, 1);
  {
    auto unsigned_leaf = connect(relay->address(), leaf_options(nullptr));
    auto pulled = unsigned_leaf->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE(pulled.ok());
    CHECK(pulled->checksum_verified);
    CHECK(image_mismatch(layout, image->data(), 1) >= 0);  // wrong bytes, "verified"
  }

  auto options_signed = leaf_options(keys.get());
  options_signed.max_retries = 0;
  auto leaf = connect(relay->address(), options_signed);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 1000; ++i) {
    if (i % 50 == 49) {  // a new version now and then: each flipped elsewhere
      const std::uint64_t v = trainer->latest_version() + 1;
      publish_pattern(*trainer, v);
      wait_relay(*relay, v);
    }
    PullOptions pull;
    pull.newer_than = 0;
    auto pulled = leaf->pull(Destination::contiguous(image->data(), image->size()), pull);
    if (pulled.ok()) {
      ++accepted;
    } else {
      INFO(pulled.status().to_string());
      CHECK(pulled.status().code() == ErrorCode::kChecksumMismatch);
      CHECK_THAT(pulled.status().message(), Catch::Contains("does not match the trainer's signature"));
      ++refused;
    }
  }
  WARN("byte-flipping relay: " << accepted << " of " << accepted + refused << " pulls accepted, "
                               << flipped.load() << " versions flipped");
  CHECK(accepted == 0);
  CHECK(refused == 1000);
  CHECK(leaf->status().ok());  // refusing is not a broken connection
  CHECK(leaf->stats().signatures_refused == 1000);
}

TEST_CASE("signatures: an honest relay forwards the trainer's signature, and its leaves verify it",
          "[signatures]") {
  auto keys = make_keys("honest");
  const auto layout = bytes_layout(2 << 20, 4);
  auto trainer = make_publisher(layout, trainer_options(keys.get()));
  for (bool pipelined : {false, true}) {
    INFO("pipelined " << pipelined);
    RelayOptions options;
    options.pipelined = pipelined;
    options.chunk_bytes = 256 << 10;
    options.subscriber = leaf_options(keys.get());  // the relay checks what it forwards, too
    options.subscriber.accept_streaming = pipelined;
    auto relay = make_relay(trainer->address(), options);
    auto leaf_opts = leaf_options(keys.get());
    leaf_opts.accept_streaming = pipelined;
    auto leaf = connect(relay->address(), leaf_opts);
    auto image = HostBuffer::allocate(layout.total_bytes());
    REQUIRE(image.ok());
    for (int i = 0; i < 3; ++i) {
      const std::uint64_t v = trainer->latest_version() + 1;
      publish_pattern(*trainer, v);
      wait_relay(*relay, v);
      PullOptions pull;
      pull.newer_than = v - 1;
      auto pulled = leaf->pull(Destination::contiguous(image->data(), image->size()), pull);
      INFO(pulled.status().to_string());
      REQUIRE(pulled.ok());
      CHECK(pulled->signature_verified);
      CHECK(image_mismatch(layout, image->data(), pulled->version) == -1);
    }
  }
}

TEST_CASE("signatures: a stripped, replayed, forged or foreign signature is refused with kAuthFailed",
          "[signatures]") {
  auto keys = make_keys("trainer");
  const auto layout = bytes_layout(1 << 20, 2);
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());

  SECTION("stripped: a publisher that serves no signature") {
    auto bare = make_publisher(layout, trainer_options(nullptr));
    publish_pattern(*bare, 1);
    auto leaf = connect(bare->address(), leaf_options(keys.get()));
    auto pulled = leaf->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE_FALSE(pulled.ok());
    CHECK(pulled.status().code() == ErrorCode::kAuthFailed);
    CHECK_THAT(pulled.status().message(), Catch::Contains("without the trainer's signature"));
    // Told by SLOT_TABLE (no kFeatureSignatures), the leaf never asked: a
    // publisher from before signatures would have closed the connection.
    CHECK(leaf->status().ok());
    CHECK(bare->stats().protocol_errors == 0);
    CHECK_FALSE(leaf->signature_block(1).ok());
  }
  SECTION("foreign: a trainer that signs with another key") {
    auto other = make_keys("other");
    auto trainer = make_publisher(layout, trainer_options(other.get()));
    publish_pattern(*trainer, 1);
    auto leaf = connect(trainer->address(), leaf_options(keys.get()));
    auto pulled = leaf->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE_FALSE(pulled.ok());
    CHECK(pulled.status().code() == ErrorCode::kAuthFailed);
    CHECK_THAT(pulled.status().message(), Catch::Contains("not by the trainer's key"));
  }
  SECTION("replayed and forged: a relay of the attacker's own serving the trainer's real blocks") {
    // What a compromised relay can do: pull from the trainer, publish the
    // same bytes, and serve whichever of the trainer's blocks it likes.
    auto trainer = make_publisher(layout, trainer_options(keys.get()));
    auto upstream = connect(trainer->address(), leaf_options(nullptr));
    auto made = detail::PublisherCore::create(layout, trainer_options(nullptr));  // as a relay's
    REQUIRE(made.ok());
    auto& evil = *made;
    evil->enable_signature_forwarding();
    auto publish_evil = [&](std::uint64_t v) {  // what a relay forwards: the same bytes
      auto writer = evil->begin_forwarding(v);
      REQUIRE(writer.ok());
      for (const auto& t : layout.tensors()) {
        fill_pattern(static_cast<char*>(writer->data()) + t.offset, t.bytes, v, t.offset);
      }
      REQUIRE(writer->commit_as(v, std::nullopt).ok());
    };
    // One version at a time: the signer signs the newest commit, so a
    // version 1 superseded before it was signed would have no block.
    publish_pattern(*trainer, 1);
    auto block1 = upstream->signature_block(1);
    INFO(block1.status().to_string());
    REQUIRE(block1.ok());
    publish_pattern(*trainer, 2);
    auto block2 = upstream->signature_block(2);
    REQUIRE(block2.ok());

    evil->forward_signature(1, *block1);
    publish_evil(1);
    evil->forward_signature(2, *block1);  // version 1's block served as version 2's
    publish_evil(2);
    auto forged = *block2;
    forged[forged.size() - 10] ^= 0x20;  // a bit of the signature
    evil->forward_signature(3, forged);
    publish_evil(3);

    auto leaf = connect(evil->address(), leaf_options(keys.get()));
    PullOptions exact;
    exact.version = 1;
    auto good = leaf->pull(Destination::contiguous(image->data(), image->size()), exact);
    INFO(good.status().to_string());
    REQUIRE(good.ok());  // the genuine version 1 with its genuine block
    CHECK(good->signature_verified);
    exact.version = 2;
    auto replayed = leaf->pull(Destination::contiguous(image->data(), image->size()), exact);
    REQUIRE_FALSE(replayed.ok());
    CHECK(replayed.status().code() == ErrorCode::kAuthFailed);
    CHECK_THAT(replayed.status().message(), Catch::Contains("replayed"));
    exact.version = 3;
    auto bad_sig = leaf->pull(Destination::contiguous(image->data(), image->size()), exact);
    REQUIRE_FALSE(bad_sig.ok());
    CHECK(bad_sig.status().code() == ErrorCode::kAuthFailed);
    CHECK_THAT(bad_sig.status().message(), Catch::Contains("does not verify"));
    CHECK(leaf->stats().signatures_refused == 2);
  }
}

TEST_CASE("signatures: pulls by deltas are verified like full ones", "[signatures][deltas]") {
  auto keys = make_keys("deltas");
  const auto layout = bytes_layout(1 << 20, 2);
  auto options = trainer_options(keys.get());
  options.deltas = true;
  auto trainer = make_publisher(layout, options);
  auto leaf = connect(trainer->address(), leaf_options(keys.get()));
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  publish_pattern(*trainer, 1);
  REQUIRE(leaf->pull(Destination::contiguous(image->data(), image->size())).ok());
  // Version 2: version 1 with a few bytes changed, so a delta is small.
  auto writer = trainer->begin_publish(2);
  REQUIRE(writer.ok());
  std::memcpy(writer->data(), image->data(), layout.total_bytes());
  static_cast<unsigned char*>(writer->data())[1000] ^= 0xff;
  REQUIRE(writer->commit().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (trainer->stats().deltas_computed < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  PullOptions pull;
  pull.delta_base = 1;
  auto pulled = leaf->pull(Destination::contiguous(image->data(), image->size()), pull);
  INFO(pulled.status().to_string());
  REQUIRE(pulled.ok());
  CHECK(pulled->delta);
  CHECK(pulled->signature_verified);
  CHECK(pulled->version == 2);
  CHECK(static_cast<unsigned char*>(image->data())[1000] ==
        (static_cast<unsigned char>(pattern_byte(1, 1000)) ^ 0xff));
}

// The figure in docs/security.md: what a signature costs per version, next
// to the pull it protects, in the same run (WS_SIGNATURE_FIGURE_MIB sets the
// version size; 64 MiB by default). Medians of 5 versions.
TEST_CASE("signatures: signing and verifying cost per version, next to the pull time",
          "[signatures][figure]") {
  const char* mib_env = std::getenv("WS_SIGNATURE_FIGURE_MIB");
  const std::uint64_t mib = mib_env ? std::strtoull(mib_env, nullptr, 10) : 64;
  auto keys = make_keys("figure");
  const auto layout = bytes_layout(mib << 20, 8);
  auto trainer = make_publisher(layout, trainer_options(keys.get(), false));
  auto plain = connect(trainer->address(), leaf_options(nullptr, "shm", false));
  auto checked = connect(trainer->address(), leaf_options(keys.get(), "shm", false));
  auto image = HostBuffer::allocate(layout.total_bytes());
  REQUIRE(image.ok());
  std::vector<double> sign, pull_plain, pull_checked, verify;
  for (std::uint64_t v = 1; v <= 5; ++v) {
    publish_pattern(*trainer, v);
    // Each part measured alone: the signer first (a first pull right after
    // the commit would also wait for it, up to `sign`), then the pulls.
    const auto signed_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (trainer->stats().versions_signed < v && std::chrono::steady_clock::now() < signed_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Alternate which pull goes first (the second finds the slot in cache).
    std::optional<Result<PullResult>> a, b;
    const double verify_before = checked->stats().verify_seconds;
    if (v % 2 == 0) a = plain->pull(Destination::contiguous(image->data(), image->size()));
    b = checked->pull(Destination::contiguous(image->data(), image->size()));
    if (v % 2 == 1) a = plain->pull(Destination::contiguous(image->data(), image->size()));
    REQUIRE(a->ok());
    INFO(b->status().to_string());
    REQUIRE(b->ok());
    REQUIRE((*b)->signature_verified);
    pull_plain.push_back((*a)->seconds);
    pull_checked.push_back((*b)->seconds);
    verify.push_back(checked->stats().verify_seconds - verify_before);
    sign.push_back(trainer->stats().sign_last_seconds);  // this version's: it was signed before the pulls
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  WARN("signatures, " << mib << " MiB versions over shm, medians of 5: sign " << median(sign) * 1e3
                      << " ms on the publisher's signing thread (" << detail::digest_threads()
                      << " digest threads); pull " << median(pull_plain) * 1e3 << " ms unchecked, "
                      << median(pull_checked) * 1e3 << " ms checked, of which fetch + verify "
                      << median(verify) * 1e3 << " ms");
  CHECK(median(sign) > 0);
  CHECK(checked->stats().signatures_verified == 5);
}
