// The cpu kernels' fp32 helpers (backend/cpu/storage.h): exp_approx, max_value,
// select_float, against the standard library.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/storage.h"

namespace collage::cpu {
namespace {

TEST(ExpApprox, WithinOneUlpOverTheNormalRange) {
  double worst = 0;  // in fp32 ulps at e^x
  for (double x = -87.0; x <= 88.0; x += 1e-3) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(double(xf));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst = std::max(worst, std::fabs(exp_approx(xf) - want) / ulp);
  }
  // Degree-7 Taylor on |r| ≤ ln2/2 (truncation < 2e-8 relative) and the fma form's roundings
  // (numerics/elementwise_math.h): 0.92 ulp at worst; the same steps as separate multiplies
  // and adds reached 1.17.
  EXPECT_LT(worst, 1.0);
}

TEST(ExpApprox, ClampsTheTailsAndPassesNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  // Below -87 every value is ≤ e^-87 (a normal float), above 88 it stays e^88: both far
  // beyond anything a softmax or sigmoid can tell from 0 or from "huge".
  for (float x : {-87.5f, -100.0f, -1e30f, -inf}) {
    EXPECT_GE(exp_approx(x), 0.0f);
    EXPECT_LE(exp_approx(x), 1.7e-38f);
  }
  for (float x : {88.5f, 100.0f, 1e30f, inf}) EXPECT_GE(exp_approx(x), 1.6e38f);
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_approx(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-0.0f), 1.0f);
}

TEST(MaxValue, MatchesStdMaxOnMixedSigns) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (int trial = 0; trial < 200; trial++) {
    std::vector<float> x(1 + rng() % 300);
    for (auto& v : x) v = normal(rng);
    if (trial % 2) {
      for (auto& v : x) v = -std::fabs(v);  // all negative: the order is reversed as integers
    }
    float want = -std::numeric_limits<float>::infinity();
    for (float v : x) want = std::max(want, v);
    EXPECT_EQ(max_value(x.data(), int64_t(x.size())), want);
  }
  EXPECT_EQ(max_value(nullptr, 0), -std::numeric_limits<float>::infinity());
  const float zeros[] = {-0.0f, -1e-40f, -3.0f};
  EXPECT_EQ(max_value(zeros, 3), 0.0f);
}

TEST(SelectFloat, PicksBySign) {
  EXPECT_EQ(select_float(true, 1.5f, -2.0f), 1.5f);
  EXPECT_EQ(select_float(false, 1.5f, -2.0f), -2.0f);
  EXPECT_TRUE(std::isinf(select_float(true, -std::numeric_limits<float>::infinity(), 0.0f)));
}

}  // namespace
}  // namespace collage::cpu
