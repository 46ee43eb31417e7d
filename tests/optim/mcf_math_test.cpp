// The MCF building blocks of src/numerics/mcf_math.h against exact arithmetic: a sum of two
// doubles is compared exactly through TwoSum (a + b = S + E with S = RN(a+b), E exact, for
// any exponent gap), longer sums in __float128 (exact for the ≤ 100-bit spans generated).
// Each block is checked where its precondition holds, and where it does not the documented
// behaviour is pinned (docs/PRECISION.md §3: Grow uses the Fast2Sum error form, not 2Sum).
#include "numerics/mcf_math.h"

#include <gtest/gtest.h>

#include <cmath>

#include "reference_math.h"

namespace collage::test {
namespace {

using math::bfloat;
using math::Mcf;
using quad = __float128;

struct DoubleDouble {
  double hi, lo;
  bool operator==(const DoubleDouble& o) const { return hi == o.hi && lo == o.lo; }
};
DoubleDouble two_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
// a + b == c + d exactly (hi + lo normalised by the TwoSum of each side; ±0 compare equal).
bool same_sum(double a, double b, double c, double d) { return two_sum(a, b) == two_sum(c, d); }

Mcf mcf(double x, double dx) { return {to_bfloat(x), to_bfloat(dx)}; }
quad value(Mcf v) { return quad(to_double(v.x)) + quad(to_double(v.dx)); }
bool renormalised(Mcf v) { return std::fabs(to_double(v.dx)) <= ulp(to_double(v.x)) / 2; }

double pair_operand(Bf16Random& r, int i) {
  switch (i % 4) {
    case 0:
      return r.any();
    case 1:
      return r.with_exponent(-4, 4);
    case 2:
      return r.with_exponent(-130 + 4, -100);  // near and (via any()) below the subnormal line
    default:
      return i % 8 == 3 ? 0.0 * (i % 16 == 3 ? -1 : 1) : r.any();
  }
}

TEST(McfMath, Fast2SumIsExactWhenTheFirstExponentIsAtLeastTheSecond) {
  Bf16Random r(1);
  int64_t checked = 0, violated = 0, violated_inexact = 0;
  for (int i = 0; i < 2000000; i++) {
    const double a = pair_operand(r, i), b = pair_operand(r, i / 4);
    const Mcf got = math::fast2sum(to_bfloat(a), to_bfloat(b));
    const double s = to_double(got.x), e = to_double(got.dx);
    ASSERT_EQ(bits_of(s), bits_of(rb(a + b))) << a << " " << b;  // s is rn(a+b) always
    if (std::isinf(s)) continue;
    if (a == 0 || fp_exponent(a) >= fp_exponent(b)) {
      ASSERT_TRUE(same_sum(s, e, a, b)) << a << " + " << b << " -> " << s << " + " << e;
      checked++;
    } else {
      violated++;
      violated_inexact += !same_sum(s, e, a, b);
    }
  }
  EXPECT_GT(checked, 1000000);
  // |a| < |b| with b in a higher binade: the error term is often wrong.
  EXPECT_GT(violated_inexact, violated / 10);
  const Mcf bad = math::fast2sum(to_bfloat(0x1p-9 + 0x1p-16), to_bfloat(1.0));
  EXPECT_EQ(to_double(bad.x), 1.0);
  EXPECT_EQ(to_double(bad.dx), 0x1p-8);  // not 2^-9 + 2^-16
}

TEST(McfMath, TwoProdIsExactWhenTheProductIsOnTheBf16Grid) {
  Bf16Random r(2);
  int64_t checked = 0, off_grid = 0, off_grid_inexact = 0;
  for (int i = 0; i < 2000000; i++) {
    const double a = pair_operand(r, i),
                 b = i % 5 == 0 ? r.with_exponent(-70, -40) : pair_operand(r, i / 4);
    const Mcf got = math::two_prod(to_bfloat(a), to_bfloat(b));
    const double p = to_double(got.x), e = to_double(got.dx);
    ASSERT_EQ(bits_of(p), bits_of(rb(a * b))) << a << " " << b;
    if (std::isinf(p)) continue;
    if (ulp(a) * ulp(b) >= 0x1p-133) {  // a·b's lowest bit is representable
      ASSERT_TRUE(same_sum(p, e, a * b, 0)) << a << " * " << b << " -> " << p << " + " << e;
      checked++;
    } else if (a * b != 0) {
      off_grid++;
      off_grid_inexact += !same_sum(p, e, a * b, 0);
    }
  }
  EXPECT_GT(checked, 500000);
  EXPECT_GT(off_grid_inexact, 0);  // underflow: the error term cannot be represented
  EXPECT_LE(off_grid_inexact, off_grid);
}

// x + δx (renormalised) and u with exponent gaps from u ≪ x to u ≫ x, both signs.
struct GrowCase {
  double x, dx, u;
};
GrowCase grow_case(Bf16Random& r, int i) {
  const int ex = i % 10 == 0 ? r.integer(-126, -112) : r.integer(-40, 40);
  const double x = i % 50 == 0 ? 0.0 : r.with_exponent(ex, ex);
  const double dx = i % 3 == 0 ? 0.0 : r.low_part(x);
  const int eu = std::max(-126, ex + r.integer(-30, 10));
  const double u = i % 97 == 0 ? 0.0 : r.with_exponent(eu, eu);
  return {x, dx, u};
}

TEST(McfMath, GrowIsExactUpToTheRoundingOfItsLowPart) {
  Bf16Random r(3);
  int64_t exact_cases = 0, error_free = 0, violated = 0, violated_wrong = 0;
  for (int i = 0; i < 2000000; i++) {
    const auto [x, dx, u] = grow_case(r, i);
    const Mcf got = math::grow(mcf(x, dx), to_bfloat(u));
    ASSERT_TRUE(renormalised(got)) << x << " " << dx << " " << u;
    // docs/PRECISION.md §3: s = rn(x+u), e = x + u − s (exact), δ = rn(δx + e); the result
    // should be s + δ exactly, and x + δx + u exactly when δx + e needs no rounding.
    const double s = rb(x + u), e = (x + u) - s, delta = rb(dx + e);
    const quad want = quad(s) + quad(delta);
    if (x == 0 || fp_exponent(x) >= fp_exponent(u)) {  // Fast2Sum(x, u)'s condition
      ASSERT_TRUE(value(got) == want) << x << " " << dx << " " << u;
      exact_cases++;
      if (delta == dx + e) {
        ASSERT_TRUE(value(got) == quad(x) + quad(dx) + quad(u)) << x << " " << dx << " " << u;
        error_free++;
      }
    } else {
      violated++;
      violated_wrong += !(value(got) == want);
    }
  }
  EXPECT_GT(exact_cases, 1000000);
  EXPECT_GT(error_free, 500000);
  EXPECT_GT(violated_wrong, 0);  // |u| > |x| > 0 may lose x's low bits: documented
  // The pinned case: x = 2^-9 + 2^-16 absorbed into u = 1 comes out as 1 + 2^-8.
  const Mcf bad = math::grow(mcf(0x1p-9 + 0x1p-16, 0), to_bfloat(1.0));
  EXPECT_TRUE(value(bad) == quad(1.0) + quad(0x1p-8));
  // θ = 0 (a zero-initialised bias) takes any update exactly.
  const Mcf zero = math::grow(mcf(0, 0), to_bfloat(rb(-0.123)));
  EXPECT_EQ(to_double(zero.x), rb(-0.123));
  EXPECT_EQ(to_double(zero.dx), 0.0);
}

// The β2 split used by collage-plus, as docs/PRECISION.md §3 defines it.
void split(double beta, double& bh, double& bl) {
  bh = rb(rf(beta));
  bl = rb(rf(beta - bh));
}

TEST(McfMath, BetaSplitMatchesCollageMd) {
  double bh, bl;
  split(0.999, bh, bl);
  EXPECT_EQ(bh, 1.0);
  EXPECT_EQ(bl, -0.00099945068359375);
  split(0.95, bh, bl);
  EXPECT_EQ(bl, 0.000782012939453125);
  split(0.98, bh, bl);
  EXPECT_EQ(bl, -0.000469207763671875);
}

TEST(McfMath, MultIsExactToTwoToTheMinus16AndRenormalised) {
  Bf16Random r(4);
  double worst = 0;
  int64_t exact_checked = 0;
  for (int i = 0; i < 1500000; i++) {
    const double beta = i % 4 == 0   ? 0.999
                        : i % 4 == 1 ? 0.95
                        : i % 4 == 2 ? r.uniform(0.5, 1.0)
                                     : 0.5 + r.integer(0, 127) / 256.0;  // bl = 0
    double bh, bl;
    split(beta, bh, bl);
    const int ex = r.integer(-100, 100);
    const double x = r.with_exponent(ex, ex), dx = i % 5 == 0 ? 0.0 : r.low_part(x);
    const Mcf got = math::mult(mcf(x, dx), to_bfloat(bh), to_bfloat(bl));
    ASSERT_TRUE(renormalised(got)) << x << " " << dx << " " << beta;
    const quad exact = (quad(x) + quad(dx)) * (quad(bh) + quad(bl));
    const double error = std::fabs(double(value(got) - exact)) / std::fabs(x);
    worst = std::max(worst, error);
    ASSERT_LE(error, 5 * 0x1p-16) << x << " " << dx << " " << beta;
    if (dx == 0 && bl == 0) {  // x·bh split by TwoProd: error-free
      ASSERT_TRUE(value(got) == quad(x) * quad(bh)) << x << " " << bh;
      exact_checked++;
    }
  }
  EXPECT_GT(exact_checked, 50000);
  std::printf("Mult: largest |error| / |x| = %.3g = %.2f * 2^-16\n", worst, worst / 0x1p-16);
}

// The reference implementation's in-place Mult at β2 = 0.999 (bh = 1): p = x, e = 0, δx
// collects x·bl and is never renormalised, so it is counted again in x' each step.
TEST(McfMath, ReferenceQuirkMultKeepsItsLowPart) {
  double bh, bl;
  split(0.999, bh, bl);
  const Mcf got = math::mult_reference_quirk(mcf(1.0, 0.0), to_bfloat(bh), to_bfloat(bl));
  EXPECT_EQ(to_double(got.x), 1.0);  // rn(1 − 0.000999) = 1
  EXPECT_EQ(to_double(got.dx), bl);  // kept, not renormalised away
  const Mcf right = math::mult(mcf(1.0, 0.0), to_bfloat(bh), to_bfloat(bl));
  EXPECT_TRUE(value(right) == quad(1.0) + quad(bl));  // the same value here ...
  Mcf q = mcf(1.0, 0.0), m = q;
  for (int t = 0; t < 50; t++) {
    q = math::mult_reference_quirk(q, to_bfloat(bh), to_bfloat(bl));
    m = math::mult(m, to_bfloat(bh), to_bfloat(bl));
  }
  // ... but over 50 steps the quirk decays much faster than 0.999^50 ≈ 0.951.
  EXPECT_NEAR(double(value(m)), std::pow(bh + bl, 50), 1e-3);
  EXPECT_LT(double(value(q)), 0.9);
}

}  // namespace
}  // namespace collage::test
