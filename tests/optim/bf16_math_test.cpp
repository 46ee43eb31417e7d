// The rounding model of src/numerics/bf16_math.h against float64 (reference_math.h):
// rn is nearest-even; a bf16 op computed in fp32 then rounded equals the op rounded once
// (innocuous double rounding, subnormals included); an "fma" line is one fp32 fma then rn;
// stochastic rounding picks a neighbour with the right probability, reproducibly.
#include "numerics/bf16_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "reference_math.h"

namespace collage::test {
namespace {

using math::bfloat;

float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// rn on every kind of fp32: random bit patterns (all binades, subnormals, inf, NaN) and
// patterns whose dropped half is exactly a tie or one step either side of it.
TEST(Bf16Math, RnIsNearestEvenOnEveryKindOfFloat) {
  std::mt19937_64 rng(1);
  const uint32_t low_halves[] = {0x8000u, 0x7fffu, 0x8001u, 0x0000u, 0xffffu};
  int64_t nan_count = 0;
  for (int i = 0; i < 2000000; i++) {
    uint32_t u = uint32_t(rng());
    if (i % 2) u = (u & 0xffff0000u) | low_halves[(i / 2) % 5];
    const float x = float_from_bits(u);
    const uint16_t got = math::bf16_bits(math::rn(x));
#ifdef COLLAGE_HAVE_CUDA_BF16
    ASSERT_EQ(got, __bfloat16_as_ushort(__float2bfloat16_rn(x))) << std::hex << u;
#endif
    if (std::isnan(x)) {
      ASSERT_EQ(got, 0x7fff) << std::hex << u;  // canonical NaN, as cvt.rn.bf16.f32
      nan_count++;
      continue;
    }
    const double want = rb(x);
    ASSERT_EQ(got, bits_of(want)) << std::hex << u << " " << x;  // bits: ±0 and ±inf too
  }
  EXPECT_GT(nan_count, 0);
  // The boundary of overflow: the largest bf16 plus just under / exactly half an ulp.
  EXPECT_EQ(math::bf16_bits(math::rn(float_from_bits(0x7f7f7fffu))), 0x7f7f);
  EXPECT_EQ(math::bf16_bits(math::rn(float_from_bits(0x7f7f8000u))), 0x7f80);  // tie -> even=inf
  EXPECT_EQ(math::bf16_bits(math::rn(float_from_bits(0x80008000u))), 0x8000);  // -tiny -> -0
}

// Operands: any finite bf16 (huge exponent gaps, subnormals), operands of nearby exponents
// (cancellation, ties), and subnormal/near-subnormal ones.
double operand(Bf16Random& r, int kind) {
  switch (kind % 3) {
    case 0:
      return r.any();
    case 1:
      return r.with_exponent(-3, 3);
    default:
      return r.integer(0, 1) ? bf16_value(uint16_t(r.integer(0, 0x17f) | (r.integer(0, 1) << 15)))
                             : r.with_exponent(-126, -110);
  }
}

// fp32 op then rn == the op rounded once to bf16 (double then rb: innocuous too, 53 ≥ 18).
TEST(Bf16Math, Fp32OpThenRnIsTheCorrectlyRoundedBf16Op) {
  Bf16Random r(2);
  struct Op {
    const char* name;
    std::function<bfloat(bfloat, bfloat)> header;
    std::function<double(double, double)> exact;
  };
  const Op ops[] = {
      {"add", math::add_rn, [](double a, double b) { return a + b; }},
      {"sub", math::sub_rn, [](double a, double b) { return a - b; }},
      {"mul", math::mul_rn, [](double a, double b) { return a * b; }},
      {"div", math::div_rn, [](double a, double b) { return a / b; }},
      {"sqrt", [](bfloat a, bfloat) { return math::sqrt_rn(a); },
       [](double a, double) { return std::sqrt(std::fabs(a)); }},
  };
  for (const Op& op : ops) {
    int64_t inexact = 0;
    for (int i = 0; i < 1000000; i++) {
      double a = operand(r, i), b = operand(r, i / 3);
      if (op.name[1] == 'q') a = std::fabs(a);
      const double want = rb(op.exact(a, b));
      const bfloat got = op.header(to_bfloat(a), to_bfloat(b));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(to_double(got))) << op.name << " " << a << " " << b;
        continue;
      }
      inexact += want != op.exact(a, b);
      ASSERT_EQ(math::bf16_bits(got), bits_of(want)) << op.name << " " << a << " " << b;
    }
    EXPECT_GT(inexact, 100000) << op.name;  // the rounding was exercised
  }
}

// The test's fp32 fma reference agrees with the C library's fmaf, including a product that
// sits exactly on an fp32 midpoint plus a tiny addend (where double emulation double-rounds).
TEST(Bf16Math, ReferenceFmaIsFmaf) {
  const float a = 24929.0f / 32768, b = 673.0f / 512, c = 0x1p-80f;  // a·b = 1 + 2^-24
  EXPECT_EQ(fma_f32(a, b, c), 1.0f + 0x1p-23f);
  EXPECT_EQ(float(double(a) * double(b) + double(c)), 1.0f);  // what emulation would give
  EXPECT_EQ(std::fma(a, b, c), 1.0f + 0x1p-23f);
  EXPECT_EQ(fma_f32(a, b, -c), 1.0f);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000000; i++) {
    const float x = float_from_bits(uint32_t(rng()) & 0xbfffffffu);  // |x| < 2: no overflow
    const float y = float_from_bits(uint32_t(rng()) & 0xbfffffffu);
    const float z =
        i % 2 ? -x * y * (1.0f + 0x1p-20f) : float_from_bits(uint32_t(rng()) & 0xbfffffffu);
    ASSERT_EQ(fma_f32(x, y, z), std::fma(x, y, z)) << x << " " << y << " " << z;
  }
}

// An "fma" line: rn(fmaf(a, b, c)) of bf16 operands.
TEST(Bf16Math, FmaLineIsOneFp32FmaThenRn) {
  Bf16Random r(4);
  for (int i = 0; i < 1000000; i++) {
    const double a = operand(r, i), b = operand(r, i / 3);
    const double c = i % 2 ? -rb(a * b * r.uniform(0.9, 1.1)) : operand(r, i / 9);
    const double want = rb(fma_f32(float(a), float(b), float(c)));
    const bfloat got = math::fma_rn(to_bfloat(a), to_bfloat(b), to_bfloat(c));
    if (std::isnan(want)) continue;
    ASSERT_EQ(math::bf16_bits(got), bits_of(want)) << a << " " << b << " " << c;
  }
}

// The noise is a pure function of (seed, t, index), uniform over 16 bits, and each key word
// matters.
TEST(Bf16Math, RoundingNoiseIsReproducibleAndKeyed) {
  const int n = 100000;
  double sum = 0;
  int64_t same_seed = 0, same_t = 0, same_index = 0;
  std::set<uint32_t> values;
  for (int i = 0; i < n; i++) {
    const uint32_t x = math::rounding_noise16(7, 3, i);
    ASSERT_LT(x, 65536u);
    ASSERT_EQ(x, math::rounding_noise16(7, 3, i));
    sum += x;
    values.insert(x);
    same_seed += x == math::rounding_noise16(8, 3, i);
    same_t += x == math::rounding_noise16(7, 4, i);
    same_index += x == math::rounding_noise16(7, 3, i + n);
  }
  EXPECT_NEAR(sum / n, 32767.5, 5 * 18918.0 / std::sqrt(n));  // 5σ of the uniform mean
  EXPECT_GT(values.size(), 50000u);
  // Equal by chance with probability 2^-16 each: a handful, not thousands.
  EXPECT_LT(same_seed, 20);
  EXPECT_LT(same_t, 20);
  EXPECT_LT(same_index, 20);
}

// By value: |x| = |lo| + k·2^-16·ulp_bf16 with lo truncated toward zero; rounds away from
// zero exactly when k + noise ≥ 2^16.
double stochastic_by_value(float x, uint32_t noise) {
  if (x == 0) return x;
  const double ax = std::fabs(double(x));
  const double quantum = ulp(ax);  // the bf16 grid in |x|'s binade
  const double lo = std::floor(ax / quantum) * quantum;
  const double k = (ax - lo) / (quantum / 65536);
  const double up = k + noise >= 65536 ? quantum : 0;
  const double rounded = lo + up >= 0x1p128 ? INFINITY : lo + up;  // past the largest bf16
  return std::copysign(rounded, double(x));
}

TEST(Bf16Math, StochasticRoundingPicksANeighbourByValue) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000000; i++) {
    uint32_t u = uint32_t(rng());
    if ((u & 0x7f800000u) == 0x7f800000u) continue;
    if (i % 4 == 0) u &= 0xffff0000u;  // already a bf16: must stay exactly
    const float x = float_from_bits(u);
    const uint32_t noise = uint32_t(rng()) & 0xffffu;
    const double got = to_double(math::round_stochastic(x, noise));
    ASSERT_EQ(got, stochastic_by_value(x, noise)) << x << " " << noise;
    if (i % 4 == 0) ASSERT_EQ(got, double(x));
  }
  EXPECT_TRUE(std::isinf(to_double(math::round_stochastic(INFINITY, 123))));
  EXPECT_TRUE(std::isnan(to_double(math::round_stochastic(NAN, 123))));
}

// E[round_stochastic(x)] = x: over many indices the fraction rounded up matches the
// position of x between its neighbours.
TEST(Bf16Math, StochasticRoundingIsUnbiased) {
  for (float x : {1.0f + 0x1p-9f, -3.0f - 0x1p-6f * 0.3f, 1e-3f, 0x1p-130f * 1.37f}) {
    const int n = 200000;
    double sum = 0;
    for (int i = 0; i < n; i++) {
      sum += to_double(math::round_stochastic(x, math::rounding_noise16(11, 1, i)));
    }
    const double lo = stochastic_by_value(x, 0), hi = stochastic_by_value(x, 65535);
    const double p = (double(x) - lo) / (hi - lo);
    const double sigma = std::fabs(hi - lo) * std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(sum / n, double(x), 5 * sigma) << x;
  }
}

}  // namespace
}  // namespace collage::test
