// The probe behind tests/cuda/turns_test.cpp: blocks that add to shared sums in turn through
// kernels/turns.cuh, each step a combination that does not commute (running·3 + a value of the
// block), so the result spells the order the turns were taken in. Built twice, like the
// kernels: as C++ against the emulator (into test_cuda) and, with nvcc, for the GPU.
#include "backend/cuda/runtime/runtime.h"
#include "kernels/turns.cuh"
#include "tests/cuda/turns_probe.h"

#if !defined(__CUDACC__)
#include <chrono>
#include <thread>
#endif

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

// Odd blocks dawdle (200 µs) before writing their turn, so that a successor that did not wait
// would read the sum before its predecessor's write: blocks run at once on a GPU and, with
// SIMT_THREADS=2, under the emulator.
__device__ void dawdle(int k) {
  if (k % 2 == 1 && threadIdx.x % kWarpSize == 0) {
#if defined(__CUDACC__)
    __nanosleep(200000);
#else
    std::this_thread::sleep_for(std::chrono::microseconds(200));
#endif
  }
  __syncwarp();
}

// Block index k = gridDim.x - 1 - blockIdx.x, so each turn's predecessor (k + 1) has the lower
// blockIdx.x (turns.cuh, "Progress"). sums (sums, 4 warps, 32 lanes, 2), counters (sums, 4
// warps), zero on entry.
__global__ void turns_probe_kernel(float* sums, int* counters, int n_sums) {
  const int blocks = int(gridDim.x), k = blocks - 1 - int(blockIdx.x);
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  for (int s = 0; s < n_sums; s++) {
    const int last = s % blocks;  // the first turn's block; block 0 takes the last
    if (k > last) continue;       // the same for the whole block
    int* counter = counters + s * 4 + warp;
    float* pair = sums + ((s * 4 + warp) * kWarpSize + lane) * 2;
    float first = 0.0f, second = 0.0f;
    if (k < last) {
      wait_for_turn(counter, last - k);
      const float2 running = load_sum_pair(pair);
      first = running.x, second = running.y;
    }
    dawdle(k);
    store_sum_pair(pair, first * 3.0f + float(k + 1), second * 3.0f + float(lane + 1));
    pass_turn(counter);
  }
}

}  // namespace

std::vector<float> run_turns_probe() {
  CudaContext cx;
  open_context(cx, 0);
  const size_t sum_floats = size_t(kTurnsProbeSums) * 4 * kWarpSize * 2;
  const size_t counter_count = size_t(kTurnsProbeSums) * 4;
  auto* sums = static_cast<float*>(device_allocate(cx, sum_floats * 4));
  auto* counters = static_cast<int*>(device_allocate(cx, counter_count * 4));
  const std::vector<int> zeros(counter_count, 0);
  upload(cx, counters, zeros.data(), counter_count * 4);
  launch(cx, "turns_probe", turns_probe_kernel, dim3(kTurnsProbeBlocks), dim3(4 * kWarpSize))(
      sums, counters, kTurnsProbeSums);
  std::vector<float> result(sum_floats);
  download(cx, result.data(), sums, sum_floats * 4);
  device_release(cx, sums);
  device_release(cx, counters);
  close_context(cx);
  return result;
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
