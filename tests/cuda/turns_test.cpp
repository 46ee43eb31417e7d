// kernels/turns.cuh: blocks that add to a sum in turn do so in the order the code fixes, on the
// emulator (also with blocks on two OS threads, CudaKernels.ConcurrentBlocks) and on a real GPU
// when one is usable. Each turn computes running·3 + a value of its block, exact in fp32 at
// these sizes and different for any other order, so the sums must equal the host's bits.
#include <gtest/gtest.h>

#include "dist/backend_choice.h"
#include "turns_probe.h"

namespace collage::test {
namespace {

using cuda::kTurnsProbeBlocks;
using cuda::kTurnsProbeSums;

// What every pair must hold: blocks s % kTurnsProbeBlocks down to 0 in turn.
void expect_ordered_sums(const std::vector<float>& sums) {
  ASSERT_EQ(sums.size(), size_t(kTurnsProbeSums) * 4 * 32 * 2);
  int misses = 0;
  for (int s = 0; s < kTurnsProbeSums; s++) {
    for (int warp = 0; warp < 4; warp++) {
      for (int lane = 0; lane < 32; lane++) {
        float first = 0.0f, second = 0.0f;
        for (int k = s % kTurnsProbeBlocks; k >= 0; k--)
          first = first * 3.0f + float(k + 1), second = second * 3.0f + float(lane + 1);
        const float* got = &sums[((s * 4 + warp) * 32 + lane) * 2];
        if ((got[0] != first || got[1] != second) && ++misses <= 8)
          ADD_FAILURE() << "sum " << s << " warp " << warp << " lane " << lane << ": got ("
                        << got[0] << ", " << got[1] << "), want (" << first << ", " << second
                        << ")";
      }
    }
  }
  EXPECT_EQ(misses, 0);
}

TEST(CudaTurns, EmulatedBlocksAddInTheirOrder) {
  expect_ordered_sums(cuda::emulated::run_turns_probe());
}

TEST(CudaTurns, DeviceBlocksAddInTheirOrder) {
#if defined(COLLAGE_HAVE_CUDA)
  if (choose_backend("auto").name != "cuda") GTEST_SKIP() << "no usable GPU";
  expect_ordered_sums(cuda::device::run_turns_probe());
#else
  GTEST_SKIP() << "this build has no CUDA (nvcc was not found)";
#endif
}

}  // namespace
}  // namespace collage::test
