// Philox4x32-10 against the published known-answer vectors, and the request-key rules.
#include "sample/philox.h"

#include <gtest/gtest.h>

#include <set>

namespace kvasir {
namespace {

using Block = std::array<uint32_t, 4>;

TEST(Philox, MatchesKnownAnswerVectors) {
  // Random123's kat_vectors for philox4x32 with 10 rounds.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu}),
            (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsInUnitIntervalAndCentred) {
  double sum = 0.0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = philox_uniform(12345, static_cast<uint64_t>(i), kRngStreamToken);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);
}

TEST(Philox, StreamsAndPositionsGiveDifferentNumbers) {
  EXPECT_NE(philox_uniform(7, 0, 0), philox_uniform(7, 0, 1));
  EXPECT_NE(philox_uniform(7, 0, 0), philox_uniform(7, 1, 0));
  EXPECT_NE(philox_uniform(7, 0, 0), philox_uniform(8, 0, 0));
  EXPECT_NE(philox_uniform(7, 0, 0), philox_uniform(7, uint64_t{1} << 32, 0));
}

TEST(RngKey, SeedAloneDecidesSeededKeys) {
  EXPECT_EQ(rng_key_for_request(42, 1, 5), rng_key_for_request(42, 999, 77));
  EXPECT_NE(rng_key_for_request(42, 1, 5), rng_key_for_request(43, 1, 5));
}

TEST(RngKey, UnseededKeysDependOnEngineSeedAndIndex) {
  std::set<uint64_t> keys;
  for (uint64_t i = 0; i < 1000; ++i) keys.insert(rng_key_for_request(std::nullopt, 0, i));
  EXPECT_EQ(keys.size(), 1000u);
  EXPECT_EQ(rng_key_for_request(std::nullopt, 3, 9), rng_key_for_request(std::nullopt, 3, 9));
  EXPECT_NE(rng_key_for_request(std::nullopt, 3, 9), rng_key_for_request(std::nullopt, 4, 9));
  EXPECT_NE(rng_key_for_request(std::nullopt, 0, 9), rng_key_for_request(9, 0, 0));
}

}  // namespace
}  // namespace kvasir
