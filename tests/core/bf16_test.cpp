// bf16 rounding against an independent definition: the nearest representable value,
// found by comparing distances in double, ties to the even significand.
#include "numerics/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace collage {
namespace {

double nearest_even_reference(float f) {
  // Candidates: truncation toward zero and the next bf16 away from zero.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t lo_bits = u & 0xffff0000u;
  uint32_t hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, 4);
  std::memcpy(&hi, &hi_bits, 4);
  double dlo = std::fabs(double(f) - double(lo)), dhi = std::fabs(double(hi) - double(f));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return ((lo_bits >> 16) & 1) ? hi : lo;  // tie: even significand
}

TEST(Bf16, RoundsToNearestEvenOnRandomFloats) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; i++) {
    uint32_t u = bits(gen);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isfinite(f)) continue;
    double want = nearest_even_reference(f);
    float got = round_to_bf16(f);
    if (std::isinf(got)) {
      EXPECT_GT(std::fabs(double(f)), 3.3e38) << f;
      continue;
    }
    ASSERT_EQ(double(got), want) << "input bits " << std::hex << u;
  }
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(round_to_bf16(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(round_to_bf16(-0.0f)));
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(round_to_bf16(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(round_to_bf16(1.0f + 1.0f / 256), 1.0f);               // tie -> even (down)
  EXPECT_EQ(round_to_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);  // tie -> even (up)
}

}  // namespace
}  // namespace collage
