// kernels/reduce.cu under the host emulator against the cpu backend
// (src/backend/cpu/sums.cpp's chunked_sum): sum (fp32 -> double) and sum_squares
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
#include "elementwise_inputs.h"

namespace collage::test {
namespace {

// Around and beyond the kernels' shapes: 8 elements a thread, 2048 a block, 512 blocks
// (2^20 elements) before the grid-stride loop takes over.
constexpr int64_t kSizes[] = {0, 1, 7, 8, 1000, 1024, 4099, 4096, 65536 + 3, (1 << 20) + 4099};
constexpr double kRelative = 1e-12;

// Runs `reduce` (sum or sum_squares) of both backends on the values make(n + offset) from
// `offset` on, for every size, at offsets 0 and 1 (4 or 2 bytes: off the 128-bit path); checks
// that the kernel overwrites its result (a second call gives the same), gives 0 for no
// elements and agrees with the cpu within kRelative. Prints the largest relative difference.
template <typename T, typename Make, typename Reduce>
void expect_reduction_matches_cpu(const char* op, Make make, Reduce reduce) {
  BackendPair pair;
  double worst = 0;
  for (int64_t n : kSizes) {
    for (int offset : {0, 1}) {
      const Mirrored<T> values(pair, make(size_t(n + offset)));
      const double want = reduce(*pair.cpu, values.cpu() + offset, n);
      const double got = reduce(*pair.emulated, values.emulated() + offset, n);
      EXPECT_EQ(reduce(*pair.emulated, values.emulated() + offset, n), got) << label(op, n, offset);
      if (n == 0) {
        EXPECT_EQ(got, 0.0) << label(op, n, offset);
        continue;
      }
      EXPECT_NEAR(got, want, kRelative * std::fabs(want)) << label(op, n, offset);
      worst = std::max(worst, std::fabs(got - want) / std::fabs(want));
    }
  }
  std::printf("[ worst    ] %s: %.3g relative\n", op, worst);
}

TEST(CudaReduce, SumMatchesCpu) {
  Rng rng(31);
  expect_reduction_matches_cpu<float>(
      "sum",
      [&](size_t count) {
        std::vector<float> x(count);
        for (float& v : x) v = float(0.5 + rng.normal());
        return x;
      },
      [](Backend& backend, const float* x, int64_t n) { return backend.sum(x, n); });
}

TEST(CudaReduce, SumSquaresMatchesCpu) {
  Rng rng(32);
  expect_reduction_matches_cpu<bf16>(
      "sum_squares", [&](size_t count) { return random_values<bf16>(rng, count, 3.0); },
      [](Backend& backend, const bf16* x, int64_t n) { return backend.sum_squares(x, n); });
}

}  // namespace
}  // namespace collage::test
