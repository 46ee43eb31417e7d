// kernels/reduce.cu under the host emulator against the cpu backend
// (src/backend/cpu/elementwise.cpp's chunked_sum): sum (fp32 -> double) and sum_squares
// (bf16 widened to double, squared).
//
// Tolerance: relative 1e-12. Both backends add the same double terms (exact: an fp32 widened,
// or the square of a bf16's 8-bit significand) in different orders. With depth D (the most
// additions on any term's path) a sum errs by at most D·2^-53·Σ|terms|. The cpu's depth is
// 2^14/4 (a chunk in AVX2's 4 double lanes) + 2 + n/2^14 (the chunks) ≈ 4.2e3 at n = 2^20; the
// kernels' n/(blocks·256) (a thread's share, ≤ 16 here) + 5 + 3 (warp and block trees) + 8
// (the partials' tree). Together ≈ 4.2e3·1.1e-16·Σ|x|/|Σx| ≤ 9e-13 with the inputs below
// (sum: mean 0.5 against a standard deviation of 1, Σ|x|/|Σx| ≈ 1.8; sum_squares: all terms
// positive, 1). The observed error (printed) is near 1e-16: rounding errors are not all of one
// sign.
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda_test_util.h"

namespace collage::test {
namespace {

// Around and beyond the kernels' shapes: 8 elements a thread, 2048 a block, 512 blocks
// (2^20 elements) before the grid-stride loop takes over.
constexpr int64_t kSizes[] = {0, 1, 7, 8, 1000, 1024, 4099, 4096, 65536 + 3, (1 << 20) + 4099};
constexpr double kRelative = 1e-12;

std::string label(const char* op, int64_t n, int offset) {
  return std::string(op) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

TEST(CudaReduce, SumMatchesCpu) {
  BackendPair pair;
  Rng rng(31);
  double worst = 0;
  for (int64_t n : kSizes) {
    // Offset 1 (4 bytes) turns off the 128-bit path.
    for (int offset : {0, 1}) {
      std::vector<float> x(size_t(n + offset));
      for (float& v : x) v = float(0.5 + rng.normal());
      const Mirrored<float> values(pair, x);
      const double want = pair.cpu->sum(values.cpu() + offset, n);
      const double got = pair.emulated->sum(values.emulated() + offset, n);
      // The result is overwritten, not accumulated: a second call gives the same.
      EXPECT_EQ(pair.emulated->sum(values.emulated() + offset, n), got) << label("sum", n, offset);
      if (n == 0) {
        EXPECT_EQ(got, 0.0) << label("sum", n, offset);
        continue;
      }
      EXPECT_NEAR(got, want, kRelative * std::fabs(want)) << label("sum", n, offset);
      worst = std::max(worst, std::fabs(got - want) / std::fabs(want));
    }
  }
  std::printf("[ worst    ] sum: %.3g relative\n", worst);
}

TEST(CudaReduce, SumSquaresMatchesCpu) {
  BackendPair pair;
  Rng rng(32);
  double worst = 0;
  for (int64_t n : kSizes) {
    // Offset 1 (2 bytes) turns off the 128-bit path.
    for (int offset : {0, 1}) {
      const Mirrored<bf16> values(pair, random_values<bf16>(rng, size_t(n + offset), 3.0));
      const double want = pair.cpu->sum_squares(values.cpu() + offset, n);
      const double got = pair.emulated->sum_squares(values.emulated() + offset, n);
      EXPECT_EQ(pair.emulated->sum_squares(values.emulated() + offset, n), got)
          << label("sum_squares", n, offset);
      if (n == 0) {
        EXPECT_EQ(got, 0.0) << label("sum_squares", n, offset);
        continue;
      }
      EXPECT_NEAR(got, want, kRelative * std::fabs(want)) << label("sum_squares", n, offset);
      worst = std::max(worst, std::fabs(got - want) / std::fabs(want));
    }
  }
  std::printf("[ worst    ] sum_squares: %.3g relative\n", worst);
}

}  // namespace
}  // namespace collage::test
