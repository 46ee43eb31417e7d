// The lane vectors of src/numerics/bf16_lanes.h (the cpu optimizer's AVX2 path) against the
// scalar functions they twin in bf16_math.h and collage_math.h, which the float64 tests
// (bf16_math_test, mcf_math_test, strategy_step_test) pin down: bit for bit in every lane,
// on millions of inputs with NaN (any payload), ±inf, subnormals, ±0 and rounding ties.
//
// One allowance: where an fp32 result is NaN, only NaN-ness is compared. With two NaN
// operands x86 returns the first source operand's payload, and the compiler may swap the
// operands of a commutative op, in scalar as in packed code; IEEE leaves the payload open.
// Every bf16 result goes through rn, which maps any NaN to 0x7fff, so those are exact.
#include <gtest/gtest.h>

#if defined(__AVX2__) && defined(__FMA__)

#include <cstring>
#include <string>
#include <vector>

#include "numerics/bf16_lanes.h"
#include "numerics/collage_math.h"
#include "numerics/edq_lanes.h"
#include "reference_math.h"

namespace collage::test {
namespace {

using math::Bf16Lanes;
using math::bfloat;
using math::F32Lanes;
using math::kLanes;

uint32_t bits32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float from_bits32(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// A float pattern drawn to hit the edges: anything, bf16 rounding ties and their
// neighbours, subnormals, ±inf and NaN with random payloads, ±0, ordinary values.
uint32_t edge_f32(std::mt19937_64& r) {
  const uint32_t any = uint32_t(r());
  const uint32_t sign = any & 0x80000000u;
  const uint32_t low_edges[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  switch (r() % 8) {
    case 0:
    case 1:
      return any;
    case 2:
      return (any & 0xffff0000u) | low_edges[r() % 6];
    case 3:
      return sign | (any & 0x007fffffu);  // subnormal or ±0
    case 4:
      return sign | 0x7f800000u | (r() % 4 == 0 ? 0 : any & 0x007fffffu);  // ±inf, NaN
    default:  // exponent within ±20 of 1: ordinary values whose ops round
      return sign | (uint32_t(107 + r() % 41) << 23) | (any & 0x007fffffu);
  }
}

// A bf16 pattern: the high half of edge_f32, or (half the time) a value near 1 whose sums,
// products and quotients with its peers are inexact.
uint16_t edge_bf16(std::mt19937_64& r) {
  if (r() % 2) return uint16_t(edge_f32(r) >> 16);
  return uint16_t((r() % 2 ? 0x8000u : 0u) | ((120u + r() % 14) << 7) | (r() % 128));
}

// Lane vectors from kLanes scalars and back.
Bf16Lanes bf16_lanes(const uint16_t* bits) { return math::load_bf16_lanes(bits); }
F32Lanes f32_lanes(const float* x) { return math::load_f32_lanes(x); }
std::vector<uint16_t> bits_of_lanes(Bf16Lanes x) {
  std::vector<uint16_t> out(kLanes);
  math::store_bf16_lanes(out.data(), x);
  return out;
}
std::vector<float> floats_of_lanes(F32Lanes x) {
  std::vector<float> out(kLanes);
  math::store_f32_lanes(out.data(), x);
  return out;
}

// Same bits, or both NaN (see the top).
bool same_f32(float got, float want) {
  return bits32(got) == bits32(want) || (std::isnan(got) && std::isnan(want));
}
bool same_f64(double got, double want) {
  return std::memcmp(&got, &want, 8) == 0 || (std::isnan(got) && std::isnan(want));
}

TEST(Bf16Lanes, LoadStoreRoundTripsEveryPattern) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; i++) all[i] = uint16_t(i);
  for (int i = 0; i < 65536; i += kLanes) {
    const Bf16Lanes x = bf16_lanes(&all[i]);
    const std::vector<uint16_t> back = bits_of_lanes(x);
    const std::vector<float> wide = floats_of_lanes(to_f32(x));
    for (int k = 0; k < kLanes; k++) {
      ASSERT_EQ(back[k], all[i + k]);
      ASSERT_EQ(bits32(wide[k]), bits32(math::to_f32(math::bf16_from_bits(all[i + k]))));
    }
  }
}

TEST(Bf16Lanes, RnMatchesScalarRnOnEveryHighHalfAndTheEdgesOfTheLowHalf) {
  std::mt19937_64 r(1);
  std::vector<float> inputs;
  for (uint32_t high = 0; high < 65536; high++) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0u, 0u}) {
      if (low == 0 && r() % 2) low = uint32_t(r()) & 0xffffu;
      inputs.push_back(from_bits32(high << 16 | low));
    }
  }
  for (int i = 0; i < 2000000; i++) inputs.push_back(from_bits32(edge_f32(r)));
  inputs.resize(inputs.size() / kLanes * kLanes);
  for (size_t i = 0; i < inputs.size(); i += kLanes) {
    const std::vector<uint16_t> got = bits_of_lanes(rn(f32_lanes(&inputs[i])));
    for (int k = 0; k < kLanes; k++) {
      ASSERT_EQ(got[k], math::bf16_bits(math::rn(inputs[i + k])))
          << std::hex << "rn of 0x" << bits32(inputs[i + k]);
    }
  }
}

// The guarded lanes' rn (reg::rn_normal, three instructions): rn's bits for every finite
// normal below 2^112 and ±0; for any other value it either still gives them, or raises an
// exception flag that guarded_flags() reports, or the value is one unusual_bits() flags
// first (NaN). optimizer_chunks.cpp relies on exactly this to redo a block.
TEST(Bf16Lanes, GuardedRnIsRnOrRaisesAFlag) {
  std::mt19937_64 r(11);
  std::vector<float> inputs;
  for (uint32_t high = 0; high < 65536; high++) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0u}) {
      if (low == 0 && r() % 2) low = uint32_t(r()) & 0xffffu;
      inputs.push_back(from_bits32(high << 16 | low));
    }
  }
  for (int i = 0; i < 1000000; i++) inputs.push_back(from_bits32(edge_f32(r)));
  inputs.resize(inputs.size() / kLanes * kLanes);
  auto guarded_rn = [](const float* x) {
    return bits_of_lanes(
        math::same_lanes<Bf16Lanes>(rn(math::load_f32_lanes<math::LaneRounding::guarded>(x))));
  };
  int64_t ordinary = 0, flagged = 0, found_first = 0;
  for (size_t i = 0; i < inputs.size(); i += kLanes) {
    const std::vector<uint16_t> got = guarded_rn(&inputs[i]);
    for (int k = 0; k < kLanes; k++) {
      const float x = inputs[i + k];
      const uint16_t want = math::bf16_bits(math::rn(x));
      const float magnitude = std::fabs(x);
      if (x == 0 || (magnitude >= 0x1p-126f && magnitude < 0x1p112f)) {
        ASSERT_EQ(got[k], want) << std::hex << "rn of 0x" << bits32(x);
        ordinary++;
        continue;
      }
      if (got[k] == want) continue;
      const float alone[kLanes] = {x};
      if (math::reg::unusual_bits(math::reg::load_f32(alone)) & 1) {
        ASSERT_TRUE(std::isnan(x) || math::reg::kWidth == 16) << std::hex << "0x" << bits32(x);
        found_first++;
        continue;
      }
      math::reg::clear_guarded_flags();
      guarded_rn(alone);
      ASSERT_NE(math::reg::guarded_flags(), 0u) << std::hex << "no flag for 0x" << bits32(x);
      flagged++;
    }
  }
  math::reg::clear_guarded_flags();
  EXPECT_GT(ordinary, int64_t(inputs.size() / 2));
  EXPECT_GT(flagged + found_first, 1000);  // the subnormals, huge values and infinities
}

// rn_expect_exact (bf16_math.h): rn itself on exact lanes. Guarded lanes keep the value and
// record it, and the block's record says "failed" exactly when some lane was not a bf16,
// which is when rn would have changed it; NaN aside, which the guarded loop never lets
// through (an exception flag or unusual_bits).
TEST(Bf16Lanes, RnExpectExactIsRnOrSaysItWasNot) {
  std::mt19937_64 r(12);
  std::vector<float> inputs;
  for (uint32_t high = 0; high < 65536; high++) {
    for (uint32_t low : {0x0000u, 0x0000u, 0x0001u, 0x8000u, 0xffffu}) {
      inputs.push_back(from_bits32(high << 16 | low));
    }
  }
  std::shuffle(inputs.begin(), inputs.end(), r);
  // Whole blocks of bf16 values too, which must not be recorded as failures.
  for (int i = 0; i < 1000 * kLanes; i++) inputs.push_back(from_bits32(uint32_t(r()) << 16));
  inputs.resize(inputs.size() / kLanes * kLanes);
  int64_t passed = 0, failed = 0;
  for (size_t i = 0; i < inputs.size(); i += kLanes) {
    const float* x = &inputs[i];
    const std::vector<uint16_t> exact = bits_of_lanes(rn_expect_exact(math::load_f32_lanes(x)));
    math::reg::clear_expected_exact();
    float kept[kLanes];
    const auto guarded = math::load_f32_lanes<math::LaneRounding::guarded>(x);
    math::store_f32_lanes(kept, to_f32(rn_expect_exact(guarded)));
    bool all_bf16 = true;
    for (int k = 0; k < kLanes; k++) {
      ASSERT_EQ(exact[k], math::bf16_bits(math::rn(x[k]))) << std::hex << "0x" << bits32(x[k]);
      ASSERT_EQ(bits32(kept[k]), bits32(x[k]));
      all_bf16 &= (bits32(x[k]) & 0xffffu) == 0;
    }
    ASSERT_EQ(math::reg::expected_exact_failed(), !all_bf16) << "block " << i / kLanes;
    if (!all_bf16) {
      failed++;
      continue;
    }
    passed++;
    for (int k = 0; k < kLanes; k++) {
      if (std::isnan(x[k])) continue;
      ASSERT_EQ(bits32(kept[k]) >> 16, exact[k]) << std::hex << "0x" << bits32(x[k]);
    }
  }
  EXPECT_GE(passed, 1000);  // the blocks of bf16 values
  EXPECT_GT(failed, 1000);
}

TEST(Bf16Lanes, Fp32OperationsMatchScalar) {
  std::mt19937_64 r(2);
  constexpr int kGroups = 40000;
  for (int g = 0; g < kGroups; g++) {
    float a[kLanes], b[kLanes], c[kLanes];
    for (int k = 0; k < kLanes; k++) {
      a[k] = from_bits32(edge_f32(r)), b[k] = from_bits32(edge_f32(r));
      c[k] = from_bits32(edge_f32(r));
    }
    const F32Lanes la = f32_lanes(a), lb = f32_lanes(b), lc = f32_lanes(c);
    const std::vector<float> add = floats_of_lanes(f32_add(la, lb)),
                             sub = floats_of_lanes(f32_sub(la, lb)),
                             mul = floats_of_lanes(f32_mul(la, lb)),
                             div = floats_of_lanes(f32_div(la, lb)),
                             sqrt = floats_of_lanes(f32_sqrt(la)),
                             fma = floats_of_lanes(f32_fma(la, lb, lc)), neg = floats_of_lanes(-la);
    for (int k = 0; k < kLanes; k++) {
      const std::string at = std::to_string(a[k]) + " " + std::to_string(b[k]);
      ASSERT_TRUE(same_f32(add[k], math::f32_add(a[k], b[k]))) << "add " << at;
      ASSERT_TRUE(same_f32(sub[k], math::f32_sub(a[k], b[k]))) << "sub " << at;
      ASSERT_TRUE(same_f32(mul[k], math::f32_mul(a[k], b[k]))) << "mul " << at;
      ASSERT_TRUE(same_f32(div[k], math::f32_div(a[k], b[k]))) << "div " << at;
      ASSERT_TRUE(same_f32(sqrt[k], math::f32_sqrt(a[k]))) << "sqrt " << at;
      ASSERT_TRUE(same_f32(fma[k], math::f32_fma(a[k], b[k], c[k]))) << "fma " << at;
      ASSERT_EQ(bits32(neg[k]), bits32(-a[k])) << "neg " << at;  // a sign flip, NaN too
    }
  }
}

TEST(Bf16Lanes, RoundedBf16LinesMatchScalar) {
  std::mt19937_64 r(3);
  for (int g = 0; g < 40000; g++) {
    uint16_t a[kLanes], b[kLanes], c[kLanes];
    for (int k = 0; k < kLanes; k++) a[k] = edge_bf16(r), b[k] = edge_bf16(r), c[k] = edge_bf16(r);
    const Bf16Lanes la = bf16_lanes(a), lb = bf16_lanes(b), lc = bf16_lanes(c);
    const std::vector<uint16_t> add = bits_of_lanes(add_rn(la, lb)),
                                sub = bits_of_lanes(sub_rn(la, lb)),
                                mul = bits_of_lanes(mul_rn(la, lb)),
                                div = bits_of_lanes(div_rn(la, lb)),
                                sqrt = bits_of_lanes(sqrt_rn(la)),
                                fma = bits_of_lanes(fma_rn(la, lb, lc));
    for (int k = 0; k < kLanes; k++) {
      const bfloat x = math::bf16_from_bits(a[k]), y = math::bf16_from_bits(b[k]),
                   z = math::bf16_from_bits(c[k]);
      const std::string at = std::to_string(a[k]) + " " + std::to_string(b[k]);
      ASSERT_EQ(add[k], math::bf16_bits(math::add_rn(x, y))) << "add bits " << at;
      ASSERT_EQ(sub[k], math::bf16_bits(math::sub_rn(x, y))) << "sub bits " << at;
      ASSERT_EQ(mul[k], math::bf16_bits(math::mul_rn(x, y))) << "mul bits " << at;
      ASSERT_EQ(div[k], math::bf16_bits(math::div_rn(x, y))) << "div bits " << at;
      ASSERT_EQ(sqrt[k], math::bf16_bits(math::sqrt_rn(x))) << "sqrt bits " << at;
      ASSERT_EQ(fma[k], math::bf16_bits(math::fma_rn(x, y, z))) << "fma bits " << at;
    }
  }
}

TEST(Bf16Lanes, StochasticRoundingMatchesScalar) {
  std::mt19937_64 r(4);
  const int64_t firsts[] = {0, 1, 777, int64_t(1) << 40, INT64_MAX - 7, -kLanes};
  for (int g = 0; g < 20000; g++) {
    const uint64_t seed = g % 3 == 0 ? 0 : r();
    const int64_t t = 1 + int64_t(r() % 1000000);
    const int64_t first = g < 6 ? firsts[g] : int64_t(r() >> 2);
    const math::U32Lanes noise = math::rounding_noise16(seed, t, math::LaneIndices{first});
    uint32_t noise_lanes[kLanes];
    std::memcpy(noise_lanes, noise.r, sizeof noise_lanes);
    float x[kLanes];
    for (int k = 0; k < kLanes; k++) x[k] = from_bits32(edge_f32(r));
    const std::vector<uint16_t> got = bits_of_lanes(round_stochastic(f32_lanes(x), noise));
    for (int k = 0; k < kLanes; k++) {
      const int64_t index = int64_t(uint64_t(first) + uint64_t(k));  // wraps past INT64_MAX
      const uint32_t want_noise = math::rounding_noise16(seed, t, index);
      ASSERT_EQ(noise_lanes[k], want_noise) << "seed " << seed << " t " << t << " index " << index;
      ASSERT_EQ(got[k], math::bf16_bits(math::round_stochastic(x[k], want_noise)))
          << std::hex << "x 0x" << bits32(x[k]) << " noise 0x" << want_noise;
    }
  }
}

TEST(Bf16Lanes, EdqAccumulatorCountsAndSumsAsTheScalarOne) {
  // Finite data: sums agree to rounding (another summation order), counts exactly.
  std::mt19937_64 r(5);
  Bf16Random values(5);
  math::EdqLanesAccumulator lanes;
  math::EdqAccumulator scalar;
  for (int g = 0; g < 5000; g++) {
    uint16_t u[kLanes], after[kLanes], before[kLanes];
    for (int k = 0; k < kLanes; k++) {
      u[k] = r() % 5 == 0 ? 0 : bits_of(rb(values.normal() * 1e-3));
      before[k] = bits_of(rb(values.normal()));
      after[k] = r() % 3 == 0 ? before[k] : bits_of(rb(values.normal()));
      if (r() % 50 == 0) before[k] = 0x8000, after[k] = 0x0000;  // −0 -> +0: Δ == 0
      scalar.add(math::edq_term(math::bf16_from_bits(u[k]), math::bf16_from_bits(after[k]),
                                math::bf16_from_bits(before[k])));
    }
    lanes.add(math::edq_term(bf16_lanes(u), bf16_lanes(after), bf16_lanes(before)));
  }
  EXPECT_EQ(lanes.updated, scalar.updated);
  EXPECT_EQ(lanes.lost, scalar.lost);
  EXPECT_GT(scalar.lost, 1000);
  EXPECT_NEAR(lanes.dot_total(), scalar.dot, 1e-12 * std::fabs(scalar.dot));
  EXPECT_NEAR(lanes.u_squared_total(), scalar.u_squared, 1e-12 * scalar.u_squared);

  // The corner cases of the counts, one lane each: NaN u is an update; inf -> inf is no
  // change of a number (Δ = inf − inf is NaN, not 0), so not lost; NaN -> NaN neither.
  const uint16_t u[kLanes] = {0x7fc0, 0x3f80, 0x3f80, 0x3f80, 0x0000};
  const uint16_t after[kLanes] = {0x3f80, 0x7f80, 0x7fc0, 0x3f80, 0x3f80};
  const uint16_t before[kLanes] = {0x3f80, 0x7f80, 0x7fc0, 0x3f80, 0x3f80};
  math::EdqLanesAccumulator corner;
  corner.add(math::edq_term(bf16_lanes(u), bf16_lanes(after), bf16_lanes(before)));
  math::EdqAccumulator want;
  for (int k = 0; k < kLanes; k++) {
    want.add(math::edq_term(math::bf16_from_bits(u[k]), math::bf16_from_bits(after[k]),
                            math::bf16_from_bits(before[k])));
  }
  EXPECT_EQ(corner.updated, want.updated);
  EXPECT_EQ(corner.lost, want.lost);
  EXPECT_EQ(want.updated, 4);  // the lanes past the listed five are u = 0
  EXPECT_EQ(want.lost, 2);     // lane 0 (NaN u, θ kept) and lane 3
}

}  // namespace
}  // namespace collage::test

#else

TEST(Bf16Lanes, NeedsAvx2AndFma) {
  GTEST_SKIP() << "built without AVX2/FMA: the cpu optimizer runs the scalar path only";
}

#endif
