// The emulator's warp matrix instructions (src/simt/warp_matrix.h) as collectives: a product
// whose lanes arrive in any order (the reverse schedule), and the misuses that must abort like a
// GPU fault instead of computing something: a lane that skips the instruction, a partial warp,
// a misaligned ldmatrix row, lanes that disagree on the form. The fragment layouts themselves
// are checked through kernels/mma.cuh in tests/cuda/mma_test.cpp.
#include "simt/warp_matrix.h"

#include <cstring>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::ReverseSchedule;
using simt_test::SimtTest;

// A = identity (16×16), B[k][n] = k·8 + n, C = 0.5: D = B's first 16 rows + 0.5 per lane.
__global__ void identity_product(float* out) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t one = 0x3f80;  // bf16 1.0
  uint32_t a[4] = {0, 0, 0, 0};
  // Row g has its 1 at column g: a[0] holds columns 2t, 2t+1 of row g, a[2] columns 2t+8, 2t+9.
  if (g / 2 == t) a[0] = g % 2 ? one << 16 : one;
  if ((g + 8) / 2 - 4 == t) a[3] = (g + 8) % 2 ? one << 16 : one;
  auto bf16 = [](float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    return bits >> 16;  // exact for these small integers
  };
  const uint32_t b[2] = {bf16(float(2 * t * 8 + g)) | bf16(float((2 * t + 1) * 8 + g)) << 16,
                         bf16(float((2 * t + 8) * 8 + g)) | bf16(float((2 * t + 9) * 8 + g)) << 16};
  float d[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  simt::mma_m16n8k16_bf16(d, a, b, d);
  for (int i = 0; i < 4; i++) out[threadIdx.x * 4 + i] = d[i];
}

TEST_F(SimtTest, MmaLanesArriveInAnyOrder) {
  for (const bool reverse : {false, true}) {
    ReverseSchedule order(reverse);
    DeviceArray<float> d_out(64 * 4);
    run(identity_product, dim3(1), dim3(64), 0, d_out.get());
    const std::vector<float> out = download(d_out);
    for (int thread = 0; thread < 64; thread++) {
      const int lane = thread % 32, g = lane / 4, t = lane % 4;
      const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
      for (int i = 0; i < 4; i++)
        EXPECT_EQ(out[thread * 4 + i], float(rows[i] * 8 + cols[i]) + 0.5f)
            << "thread " << thread << " d[" << i << "] reverse=" << reverse;
    }
  }
}

__global__ void half_warp_mma(float* out) {
  uint32_t a[4] = {}, b[2] = {};
  float d[4] = {};
  if (threadIdx.x < 16) simt::mma_m16n8k16_bf16(d, a, b, d);
  out[threadIdx.x] = d[0];
}
__global__ void partial_warp_mma(float* out) {
  uint32_t a[4] = {}, b[2] = {};
  float d[4] = {};
  simt::mma_m16n8k16_bf16(d, a, b, d);
  out[threadIdx.x] = d[0];
}
__global__ void misaligned_ldmatrix(float* out) {
  __shared__ __align__(16) uint16_t tile[8 * 8 + 1];
  uint32_t r[1];
  simt::ldmatrix(r, 1, false, &tile[1 + (threadIdx.x % 8) * 8]);
  out[threadIdx.x] = float(r[0]);
}
__global__ void mixed_ldmatrix_forms(float* out) {
  __shared__ __align__(16) uint16_t tile[32 * 8];
  uint32_t r[4];
  simt::ldmatrix(r, threadIdx.x == 3 ? 2 : 4, false, &tile[threadIdx.x * 8]);
  out[threadIdx.x] = float(r[0]);
}

class WarpMatrixMisuse : public SimtTest {
 protected:
  void launch_and_sync(void (*kernel)(float*), unsigned threads) {
    DeviceArray<float> d_out(threads);
    simt::launch(stream, kernel, dim3(1), dim3(threads), 0, d_out.get());
    simt::synchronize(stream);
  }
};

TEST_F(WarpMatrixMisuse, HalfTheWarpSkipsTheInstruction) {
  EXPECT_DEATH(launch_and_sync(half_warp_mma, 32), "simt: .*warp-wide matrix instruction");
}
TEST_F(WarpMatrixMisuse, PartialWarp) {
  EXPECT_DEATH(launch_and_sync(partial_warp_mma, 48),
               "simt: .*names lane 16, which does not exist \\(the block has 48 threads\\)");
}
TEST_F(WarpMatrixMisuse, MisalignedLdmatrixRow) {
  EXPECT_DEATH(launch_and_sync(misaligned_ldmatrix, 32),
               "simt: .*ldmatrix: lane 0's row address .* is not 16-byte aligned");
}
TEST_F(WarpMatrixMisuse, LanesDisagreeOnTheForm) {
  EXPECT_DEATH(launch_and_sync(mixed_ldmatrix_forms, 32),
               "simt: .*ldmatrix: lane 3 asks for .x2, lane 0 for .x4");
}

}  // namespace
