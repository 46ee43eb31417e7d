// The cpu loop's division by multiplication (src/numerics/collage_math.h, adam_direction):
// a = rn(numer · r[v]) with r[v] = f32_div(1, denom(v)) gives the bits of rn(numer / denom).
// - The rounding argument, checked for every pair of bf16 values (n, d), 2^32 of them, with
//   the lane operations the loop runs.
// - The table: one fp32 division per entry, and unusable exactly when a reciprocal overflowed.
// (cpu_optimizer_isa_test compares whole steps with the table and dividing; lanes_step_test
// each lane with the table against the scalar step.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/optimizer_chunks.h"
#include "numerics/collage_math.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "numerics/bf16_lanes.h"
#endif

namespace collage::test {
namespace {

using math::bfloat;

float value_of(uint32_t bits16) { return math::to_f32(math::bf16_from_bits(uint16_t(bits16))); }

// The denominators whose fp32 reciprocal overflows: nonzero, 1/d = ±inf.
bool reciprocal_overflows(float d) { return d != 0 && std::isinf(math::f32_div(1.0f, d)); }

#if defined(__AVX2__) && defined(__FMA__)
TEST(ReciprocalDenominators, MultiplyingRoundsAsDividingForEveryPairOfBf16) {
  using math::Bf16Lanes;
  using math::F32Lanes;
  using math::kLanes;
  std::vector<uint16_t> every_bf16(65536);
  for (int b = 0; b < 65536; b++) every_bf16[b] = uint16_t(b);
  // mismatches[d]: the numerators n for which rn(n · RN32(1/d)) != rn(n / d). The lane vectors
  // are compared whole, and element by element only where they differ (few memory accesses:
  // under AddressSanitizer each one is checked).
  std::vector<int64_t> mismatches(65536, 0);
#pragma omp parallel for schedule(dynamic, 256)
  for (int d_bits = 0; d_bits < 65536; d_bits++) {
    const F32Lanes d(value_of(uint32_t(d_bits)));
    const F32Lanes r = f32_div(F32Lanes(1.0f), d);
    int64_t count = 0;
    for (int first = 0; first < 65536; first += kLanes) {
      const Bf16Lanes n = math::load_bf16_lanes(&every_bf16[first]);
      const Bf16Lanes by_product = rn(f32_mul(to_f32(n), r));
      const Bf16Lanes by_quotient = rn(f32_div(to_f32(n), d));
      if (std::memcmp(&by_product, &by_quotient, sizeof by_product) == 0) continue;
      uint16_t product_bits[kLanes], quotient_bits[kLanes];
      math::store_bf16_lanes(product_bits, by_product);
      math::store_bf16_lanes(quotient_bits, by_quotient);
      for (int k = 0; k < kLanes; k++) count += product_bits[k] != quotient_bits[k];
    }
    mismatches[d_bits] = count;
  }
  int overflowing = 0;
  for (int d_bits = 0; d_bits < 65536; d_bits++) {
    const float d = value_of(uint32_t(d_bits));
    if (reciprocal_overflows(d)) {
      overflowing++;
      // Why those are excluded: n · inf is inf where n / d is finite.
      EXPECT_GT(mismatches[d_bits], 0) << "d " << d;
    } else {
      ASSERT_EQ(mismatches[d_bits], 0) << "d " << d << " (bits " << d_bits << ")";
    }
  }
  // The subnormals of magnitude at most 2^-128, both signs: 32 each.
  EXPECT_EQ(overflowing, 64);
  EXPECT_TRUE(reciprocal_overflows(std::ldexp(1.0f, -128)));
  EXPECT_FALSE(reciprocal_overflows(value_of(0x0021)));
}
#else
TEST(ReciprocalDenominators, MultiplyingRoundsAsDividingForEveryPairOfBf16) {
  GTEST_SKIP() << "built without AVX2/FMA: the cpu optimizer divides (no lane loop, no table)";
}
#endif

TEST(ReciprocalDenominators, TableHoldsOneDivisionOfEachDenominator) {
  std::vector<float> values(cpu::ReciprocalDenominators::kEntries);
  for (bool hf : {false, true}) {
    for (int64_t t : {int64_t(1), int64_t(3), int64_t(100000)}) {
      for (double eps : {1e-8, 1e-6, 0.0}) {
        SCOPED_TRACE(std::string(hf ? "hf" : "torch") + " t " + std::to_string(t) + " eps " +
                     std::to_string(eps));
        const math::AdamScalars s = math::make_adam_scalars(1e-3, 0.9, 0.95, eps, 0.1, t, hf);
        ASSERT_TRUE(cpu::fill_reciprocal_denominators(s, values.data()));
        for (uint32_t b = 0; b < 65536; b++) {
          const float d =
              math::to_f32(math::adam_denominator(math::bf16_from_bits(uint16_t(b)), s));
          const float want = math::f32_div(1.0f, d);
          ASSERT_TRUE(std::memcmp(&values[b], &want, 4) == 0 ||
                      (std::isnan(values[b]) && std::isnan(want)))
              << "entry " << b << ": " << values[b] << " vs " << want;
        }
      }
    }
  }
}

TEST(ReciprocalDenominators, TableIsUnusableWhenAReciprocalOverflows) {
  std::vector<float> values(cpu::ReciprocalDenominators::kEntries);
  // eps below 2^-128: v = 0 gives denom = eps, whose reciprocal overflows.
  for (bool hf : {false, true}) {
    const math::AdamScalars s = math::make_adam_scalars(1e-3, 0.9, 0.95, 1e-39, 0.1, 1, hf);
    ASSERT_TRUE(
        reciprocal_overflows(math::to_f32(math::adam_denominator(math::bf16_from_bits(0), s))));
    EXPECT_FALSE(cpu::fill_reciprocal_denominators(s, values.data())) << (hf ? "hf" : "torch");
  }
}

}  // namespace
}  // namespace collage::test
