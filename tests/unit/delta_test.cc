// The delta codec (XOR, byte transposition, zstd) and the FETCH_DELTA/DELTA
// messages: round trips bit-exact at every element width, hostile frames
// refused, the chain rules enforced by decode.
#include <catch2/catch.hpp>

#include <zstd.h>

#include <random>

#include "delta/delta_apply.h"
#include "delta/delta_codec.h"
#include "wire/messages.h"

using namespace weightsync;
using namespace weightsync::detail;

namespace {

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// `target` = `base` with about one element in `every` changed in its low byte.
std::vector<std::uint8_t> nudged(const std::vector<std::uint8_t>& base, std::size_t width, std::size_t every,
                                 std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto out = base;
  for (std::size_t i = 0; i + width <= out.size(); i += width) {
    if (rng() % every == 0) out[i] ^= static_cast<std::uint8_t>(1 + rng() % 255);
  }
  return out;
}

}  // namespace

TEST_CASE("delta codec: decode(encode(base, target)) XOR base == target, every width, with a tail", "[delta]") {
  const std::size_t width = GENERATE(1, 2, 4, 8);
  const std::size_t bytes = GENERATE(1, 7, 4096 + 3, (1u << 20) + 5);
  INFO("width " << width << ", " << bytes << " bytes");
  const auto base = random_bytes(bytes, 1);
  const auto target = nudged(base, width, 10, 2);
  std::vector<std::uint8_t> scratch, encoded;
  REQUIRE(encode_delta(base.data(), target.data(), bytes, width, kDefaultDeltaLevel, scratch, encoded).ok());
  std::vector<std::uint8_t> xor_image(bytes);
  REQUIRE(decode_delta(encoded.data(), encoded.size(), bytes, width, scratch, xor_image.data()).ok());
  auto rebuilt = base;
  xor_into(rebuilt.data(), xor_image.data(), bytes);
  CHECK(rebuilt == target);
  if (bytes > 4096) CHECK(encoded.size() < bytes / 2);  // one element in ten changed: it compresses
}

TEST_CASE("delta codec: a frame of the wrong size, a corrupt frame and a bad width are refused", "[delta]") {
  const std::size_t bytes = 64 * 1024;
  const auto base = random_bytes(bytes, 3);
  const auto target = nudged(base, 2, 5, 4);
  std::vector<std::uint8_t> scratch, encoded;
  REQUIRE(encode_delta(base.data(), target.data(), bytes, 2, 1, scratch, encoded).ok());
  std::vector<std::uint8_t> out(2 * bytes, 0xAB);
  // Declares 64 KiB; asked for 32 KiB: refused before decompressing.
  auto wrong = decode_delta(encoded.data(), encoded.size(), bytes / 2, 2, scratch, out.data());
  CHECK(wrong.code() == ErrorCode::kProtocolError);
  // Truncated.
  auto cut = decode_delta(encoded.data(), encoded.size() / 2, bytes, 2, scratch, out.data());
  CHECK(cut.code() == ErrorCode::kProtocolError);
  // Not zstd at all.
  const auto junk = random_bytes(100, 5);
  CHECK(decode_delta(junk.data(), junk.size(), bytes, 2, scratch, out.data()).code() == ErrorCode::kProtocolError);
  CHECK(decode_delta(encoded.data(), encoded.size(), bytes, 3, scratch, out.data()).code() ==
        ErrorCode::kProtocolError);
  // Nothing was written past the image by any of them.
  for (std::size_t i = bytes; i < out.size(); ++i) REQUIRE(out[i] == 0xAB);
  // A frame that says nothing of its size (streamed) is refused too.
  std::vector<std::uint8_t> streamed(ZSTD_compressBound(bytes));
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  const std::size_t n = ZSTD_compress2(cctx, streamed.data(), streamed.size(), target.data(), bytes);
  ZSTD_freeCCtx(cctx);
  REQUIRE(!ZSTD_isError(n));
  CHECK(decode_delta(streamed.data(), n, bytes, 2, scratch, out.data()).code() == ErrorCode::kProtocolError);
}

TEST_CASE("delta codec: the transposition width is the layout's shared element size, else 1", "[delta]") {
  auto bf16 = WeightLayout::build({{"a", DType::kBFloat16, {10}}, {"b", DType::kFloat16, {3}}});
  REQUIRE(bf16.ok());
  CHECK(delta_element_bytes(*bf16) == 2);
  auto mixed = WeightLayout::build({{"a", DType::kFloat32, {10}}, {"b", DType::kBFloat16, {3}}});
  REQUIRE(mixed.ok());
  CHECK(delta_element_bytes(*mixed) == 1);
  auto fp32 = WeightLayout::build({{"a", DType::kFloat32, {10}}});
  REQUIRE(fp32.ok());
  CHECK(delta_element_bytes(*fp32) == 4);
}

TEST_CASE("delta apply: a chain of two links lands bit-exact in scattered pieces, padding untouched", "[delta]") {
  const std::size_t bytes = 8192;
  const auto v1 = random_bytes(bytes, 7);
  const auto v2 = nudged(v1, 2, 4, 8);
  const auto v3 = nudged(v2, 2, 4, 9);
  std::vector<std::uint8_t> scratch, d12, d23;
  REQUIRE(encode_delta(v1.data(), v2.data(), bytes, 2, 1, scratch, d12).ok());
  REQUIRE(encode_delta(v2.data(), v3.data(), bytes, 2, 1, scratch, d23).ok());
  DeltaChain chain;
  chain.element_bytes = 2;
  chain.links = {{1, 2, d12.size()}, {2, 3, d23.size()}};
  std::vector<std::uint8_t> compressed = d12;
  compressed.insert(compressed.end(), d23.begin(), d23.end());
  // Two "tensors" in separate buffers, holding v1's bytes; [4000, 4096) is padding.
  std::vector<std::uint8_t> first(v1.begin(), v1.begin() + 4000), second(v1.begin() + 4096, v1.end());
  std::vector<ReadPiece> pieces = {{0, 4000, first.data()}, {4096, bytes - 4096, second.data()}};
  DeltaApplyBuffers buffers;
  auto sum = apply_delta_chain(chain, compressed, bytes, pieces, buffers);
  REQUIRE(sum.ok());
  CHECK(std::equal(first.begin(), first.end(), v3.begin()));
  CHECK(std::equal(second.begin(), second.end(), v3.begin() + 4096));
  // A flipped bit anywhere in the compressed bytes is refused, or changes
  // the result's hash, or (a bit zstd does not use) changes nothing at all:
  // never a different result with the right hash.
  std::mt19937 rng(11);
  int caught = 0, harmless = 0;
  for (int i = 0; i < 500; ++i) {
    auto bad = compressed;
    const std::size_t at = rng() % bad.size();
    bad[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    std::vector<std::uint8_t> f(v1.begin(), v1.begin() + 4000), s(v1.begin() + 4096, v1.end());
    std::vector<ReadPiece> p = {{0, 4000, f.data()}, {4096, bytes - 4096, s.data()}};
    auto r = apply_delta_chain(chain, bad, bytes, p, buffers);
    if (!r.ok() || *r != *sum) {
      ++caught;
    } else if (std::equal(f.begin(), f.end(), v3.begin()) && std::equal(s.begin(), s.end(), v3.begin() + 4096)) {
      ++harmless;
    }
  }
  CHECK(caught + harmless == 500);
  CHECK(caught > 400);
}

TEST_CASE("delta wire: FETCH_DELTA and DELTA round trip, and decode enforces the chain", "[delta][wire]") {
  FetchDeltaMsg fetch{5, 9, 1000, 20};
  auto f = FetchDeltaMsg::decode(fetch.encode());
  REQUIRE(f.ok());
  CHECK(f->have == 5);
  CHECK(f->at_least == 9);
  CHECK(f->max_bytes == 1000);
  CHECK(f->wait_ms == 20);
  CHECK(FetchDeltaMsg::decode(FetchDeltaMsg{0, 9, 1, 0}.encode()).status().code() == ErrorCode::kProtocolError);
  CHECK(FetchDeltaMsg::decode(FetchDeltaMsg{9, 9, 1, 0}.encode()).status().code() == ErrorCode::kProtocolError);

  DeltaMsg good;
  good.element_bytes = 2;
  good.links = {{5, 7, 11, 100}, {7, 9, 12, 50}};
  auto d = DeltaMsg::decode(good.encode());
  REQUIRE(d.ok());
  CHECK(d->total_bytes() == 150);
  CHECK(d->links[1].checksum == 12);

  auto refused = [](DeltaMsg m) { return DeltaMsg::decode(m.encode()).status().code() == ErrorCode::kProtocolError; };
  DeltaMsg gap = good;
  gap.links[1].from = 8;  // does not start where the previous ended
  CHECK(refused(gap));
  DeltaMsg backwards = good;
  backwards.links[0].to = 5;
  CHECK(refused(backwards));
  DeltaMsg empty_link = good;
  empty_link.links[0].bytes = 0;
  CHECK(refused(empty_link));
  DeltaMsg huge = good;
  huge.links[0].bytes = (std::uint64_t{1} << 40) + 1;
  CHECK(refused(huge));
  DeltaMsg width = good;
  width.element_bytes = 3;
  CHECK(refused(width));
  DeltaMsg none = good;
  none.links.clear();
  CHECK(refused(none));
  auto bytes = good.encode();
  bytes.push_back(0);  // trailing byte
  CHECK(DeltaMsg::decode(bytes).status().code() == ErrorCode::kProtocolError);
}

TEST_CASE("delta wire: SLOT_TABLE carries a feature mask only when set", "[delta][wire]") {
  SlotTableMsg table;
  table.slot_count = 3;
  table.slot_bytes = 64;
  const auto plain = table.encode();
  table.features = kFeatureDeltas;
  const auto with = table.encode();
  CHECK(with.size() == plain.size() + 4);
  auto decoded = SlotTableMsg::decode(with);
  REQUIRE(decoded.ok());
  CHECK(decoded->features == kFeatureDeltas);
  auto old = SlotTableMsg::decode(plain);
  REQUIRE(old.ok());
  CHECK(old->features == 0);
  table.features = 0;
  auto zero = table.encode();
  for (int i = 0; i < 4; ++i) zero.push_back(0);  // an explicit zero mask: two encodings of one value
  CHECK(SlotTableMsg::decode(zero).status().code() == ErrorCode::kProtocolError);
}

TEST_CASE("delta apply: before_link can stop a chain between links (issue 30, finding 12)", "[delta]") {
  const std::size_t bytes = 8192;
  const auto v1 = random_bytes(bytes, 21);
  const auto v2 = nudged(v1, 2, 4, 22);
  const auto v3 = nudged(v2, 2, 4, 23);
  std::vector<std::uint8_t> scratch, d12, d23;
  REQUIRE(encode_delta(v1.data(), v2.data(), bytes, 2, 1, scratch, d12).ok());
  REQUIRE(encode_delta(v2.data(), v3.data(), bytes, 2, 1, scratch, d23).ok());
  DeltaChain chain;
  chain.element_bytes = 2;
  chain.links = {{1, 2, d12.size()}, {2, 3, d23.size()}};
  std::vector<std::uint8_t> compressed = d12;
  compressed.insert(compressed.end(), d23.begin(), d23.end());
  auto dest = v1;
  std::vector<ReadPiece> pieces = {{0, bytes, dest.data()}};
  DeltaApplyBuffers buffers;
  std::vector<std::size_t> asked;
  auto stopped = apply_delta_chain(chain, compressed, bytes, pieces, buffers, nullptr, [&](std::size_t link) {
    asked.push_back(link);
    return link == 1 ? Status(ErrorCode::kCancelled, "stop") : Status();
  });
  CHECK(stopped.status().code() == ErrorCode::kCancelled);
  CHECK(asked == std::vector<std::size_t>{0, 1});
  CHECK(dest == v2);  // the first link only
}

TEST_CASE("delta wire: SLOT_TABLE's feature bits carry the delta history, which old decoders ignore",
          "[delta][wire]") {
  SlotTableMsg table;
  table.slot_count = 3;
  table.slot_bytes = 64;
  table.features = kFeatureDeltas | (8u << kFeatureDeltaHistoryShift);
  auto decoded = SlotTableMsg::decode(table.encode());
  REQUIRE(decoded.ok());
  CHECK((decoded->features & kFeatureDeltas) != 0);
  CHECK(((decoded->features >> kFeatureDeltaHistoryShift) & kFeatureDeltaHistoryMask) == 8);
  CHECK(kMaxDeltaLinks <= kFeatureDeltaHistoryMask);
}
