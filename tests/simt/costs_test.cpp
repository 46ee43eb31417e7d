// What emulation costs per CUDA thread: starting a fiber, a __syncthreads, a warp shuffle.
// Printed (and recorded as test properties) so regressions show; the bound only catches a
// pathological slowdown (these are ~20-40 ns on the development machine).
#include <chrono>
#include <cstdio>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::SimtTest;

__global__ void empty_kernel() {}

__global__ void barriers(int rounds) {
  for (int i = 0; i < rounds; ++i) __syncthreads();
}

__global__ void shuffles(int rounds, float* sink) {
  float v = float(threadIdx.x);
  for (int i = 0; i < rounds; ++i) v += __shfl_xor_sync(0xffffffffu, v, 1);
  if (v == -1.0f) *sink = v;  // keeps the loop
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(SimtTest, CostPerThread) {
  const unsigned blocks = 200, threads = 256;
  const int rounds = 50;
  DeviceArray<float> sink(1);
  run(empty_kernel, dim3(2), dim3(threads), 0);  // fibers and stacks exist from here on
  sync();

  auto start = std::chrono::steady_clock::now();
  run(empty_kernel, dim3(blocks * 4), dim3(threads), 0);
  sync();
  const double start_ns = seconds_since(start) / (blocks * 4.0 * threads) * 1e9;

  start = std::chrono::steady_clock::now();
  run(barriers, dim3(blocks), dim3(threads), 0, rounds);
  sync();
  const double barrier_ns =
      seconds_since(start) / (double(blocks) * threads * rounds) * 1e9 - start_ns / rounds;

  start = std::chrono::steady_clock::now();
  run(shuffles, dim3(blocks), dim3(threads), 0, rounds, sink.get());
  sync();
  const double shuffle_ns =
      seconds_since(start) / (double(blocks) * threads * rounds) * 1e9 - start_ns / rounds;

  std::printf(
      "simt costs: %.1f ns per fiber start, %.1f ns per __syncthreads per thread, "
      "%.1f ns per shuffle per lane\n",
      start_ns, barrier_ns, shuffle_ns);
  RecordProperty("fiber_start_ns", int(start_ns));
  RecordProperty("syncthreads_ns_per_thread", int(barrier_ns));
  RecordProperty("shuffle_ns_per_lane", int(shuffle_ns));
  EXPECT_LT(start_ns, 2000.0);
  EXPECT_LT(barrier_ns, 2000.0);
  EXPECT_LT(shuffle_ns, 2000.0);
}

}  // namespace
