// The project's generator (common/random.h): SplitMix64's published values and the stream's
// properties that reproducible draws depend on.
#include "common/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mlcd {
namespace {

TEST(Random, SplitMix64KnownValues) {
  // The reference splitmix64.c stream seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  SplitMix stream(0);
  EXPECT_EQ(stream.Next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(stream.Next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(stream.Next(), 0x06C45D188009454Full);
}

TEST(Random, StreamIsSplitMix64OfTheCounter) {
  const uint64_t seed = 12345;
  SplitMix stream(seed);
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(stream.Next(), SplitMix64(seed + i * 0x9E3779B97F4A7C15ull)) << "draw " << i;
  }
}

TEST(Random, SameSeedSameSequence) {
  SplitMix a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs = differs || x != c.Next();
  }
  EXPECT_TRUE(differs);
  SplitMix g1(7), g2(7);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(g1.Gaussian(), g2.Gaussian());
}

TEST(Random, BelowStaysWithinBounds) {
  SplitMix rng(1);
  for (uint64_t bound : {1ull, 2ull, 3ull, 7ull, 1000ull, (1ull << 63) + 5}) {
    for (int i = 0; i < 1000; ++i) {
      EXPECT_LT(rng.Below(bound), bound);
      EXPECT_LT(rng.BelowFast(bound), bound);
    }
  }
  // Every value of a small range comes up.
  std::vector<int> seen(6, 0);
  for (int i = 0; i < 600; ++i) ++seen[rng.Below(6)];
  for (int count : seen) EXPECT_GT(count, 0);
}

TEST(Random, BelowFastIsOneMultiplyShift) {
  SplitMix a(9), b(9);
  const uint64_t bound = 1000;
  const uint64_t x = b.Next();
  EXPECT_EQ(a.BelowFast(bound),
            static_cast<uint64_t>((static_cast<unsigned __int128>(x) * bound) >> 64));
}

TEST(Random, UniformInHalfOpenUnitInterval) {
  SplitMix rng(3);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = rng.Uniform();
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  double sq = 0, mean = 0;
  for (int i = 0; i < 10000; ++i) {
    const double g = rng.Gaussian();
    mean += g;
    sq += g * g;
  }
  EXPECT_NEAR(mean / 10000, 0.0, 0.05);
  EXPECT_NEAR(sq / 10000, 1.0, 0.05);
}

}  // namespace
}  // namespace mlcd
