// WeightLayout: offsets, alignment, serialization, rejection of bad layouts.
#include <catch2/catch.hpp>

#include "weightsync/layout.h"

using weightsync::DType;
using weightsync::ErrorCode;
using weightsync::TensorSpec;
using weightsync::WeightLayout;

TEST_CASE("layout: tensors are packed in order at aligned offsets", "[layout]") {
  auto layout = WeightLayout::build({{"a", DType::kFloat32, {3}},      // 12 bytes at 0
                                     {"b", DType::kBFloat16, {2, 5}},  // 20 bytes at 256
                                     {"c", DType::kInt64, {64}}});     // 512 bytes at 512
  REQUIRE(layout.ok());
  const auto& t = layout->tensors();
  REQUIRE(t.size() == 3);
  CHECK(t[0].offset == 0);
  CHECK(t[0].bytes == 12);
  CHECK(t[1].offset == 256);
  CHECK(t[1].bytes == 20);
  CHECK(t[2].offset == 512);
  CHECK(t[2].bytes == 512);
  CHECK(layout->total_bytes() == 1024);
  CHECK(layout->payload_bytes() == 12 + 20 + 512);
  CHECK(layout->find("b") == &t[1]);
  CHECK(layout->find("nope") == nullptr);

  auto tight = WeightLayout::build({{"x", DType::kUInt8, {3}}, {"y", DType::kUInt8, {5}}}, 1);
  REQUIRE(tight.ok());
  CHECK(tight->tensors()[1].offset == 3);
  CHECK(tight->total_bytes() == 8);
}

TEST_CASE("layout: serialize/deserialize round trip", "[layout]") {
  auto layout = WeightLayout::build({{"embed.weight", DType::kFloat16, {1000, 64}},
                                     {"blocks.0.attn.qkv", DType::kFloat32, {64, 192}},
                                     {"scale", DType::kFloat8E4M3, {1}}},
                                    64);
  REQUIRE(layout.ok());
  auto bytes = layout->serialize();
  auto back = WeightLayout::deserialize(bytes.data(), bytes.size());
  REQUIRE(back.ok());
  CHECK(*back == *layout);
  CHECK(back->alignment() == 64);
  CHECK(back->total_bytes() == layout->total_bytes());
  CHECK(back->tensors()[2].spec.dtype == DType::kFloat8E4M3);
}

TEST_CASE("layout: bad layouts are rejected with kInvalidArgument", "[layout]") {
  auto rejects = [](std::vector<TensorSpec> specs, std::size_t alignment, const char* why) {
    auto r = WeightLayout::build(std::move(specs), alignment);
    INFO(why);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("invalid weight layout"));
  };
  rejects({}, 256, "empty");
  rejects({{"a", DType::kFloat32, {2}}, {"a", DType::kFloat32, {2}}}, 256, "duplicate");
  rejects({{"z", DType::kFloat32, {0}}}, 256, "zero-size");
  rejects({{"n", DType::kFloat32, {4, -1}}}, 256, "negative dim");
  rejects({{"", DType::kFloat32, {4}}}, 256, "empty name");
  rejects({{std::string(2000, 'x'), DType::kFloat32, {4}}}, 256, "long name");
  rejects({{"o", DType::kFloat64, {1LL << 31, 1LL << 31, 8}}}, 256, "numel*size overflow");
  rejects({{"a", DType::kUInt8, {1LL << 62}},
           {"b", DType::kUInt8, {1LL << 62}},
           {"c", DType::kUInt8, {1LL << 62}},
           {"d", DType::kUInt8, {1LL << 62}}},
          256, "offset overflow");
  rejects({{"d", DType::kFloat32, {1, 1, 1, 1, 1, 1, 1, 1, 1}}}, 256, "too many dims");
  rejects({{"a", DType::kFloat32, {4}}}, 3, "alignment not a power of two");
  rejects({{"a", DType::kFloat64, {4}}}, 4, "alignment smaller than the element");
  rejects({{"a", DType::kFloat32, {4}}}, 0, "zero alignment");
  rejects({{"a", static_cast<DType>(200), {4}}}, 256, "unknown dtype");
}

TEST_CASE("layout: deserialize rejects every truncation and corruption", "[layout]") {
  auto layout = WeightLayout::build({{"w", DType::kFloat32, {8, 8}}, {"b", DType::kFloat32, {8}}});
  REQUIRE(layout.ok());
  auto bytes = layout->serialize();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n);
    CHECK_FALSE(WeightLayout::deserialize(bytes.data(), n).ok());
  }
  auto longer = bytes;
  longer.push_back(0);
  CHECK_FALSE(WeightLayout::deserialize(longer.data(), longer.size()).ok());
  auto bad_magic = bytes;
  bad_magic[0] ^= 0xff;
  CHECK_FALSE(WeightLayout::deserialize(bad_magic.data(), bad_magic.size()).ok());
  // A count far larger than the bytes can hold is refused before allocating.
  auto huge_count = bytes;
  huge_count[10] = 0xff;
  huge_count[11] = 0xff;
  huge_count[12] = 0x0f;
  auto r = WeightLayout::deserialize(huge_count.data(), huge_count.size());
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
}
