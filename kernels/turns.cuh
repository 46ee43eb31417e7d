#pragma once
// Taking turns: a sum that several blocks add to, in an order the code fixes, without float
// atomics. Each sum has a counter in global memory; the contributor whose turn is n waits until
// the counter reads n, adds its part to the running sum, and raises the counter to n + 1. The
// result's bits are then the same on every run, whatever the GPU's scheduling. The tensor-core
// attention's backward (kernels/flash_attention.cu) sums dq over key blocks this way.
//
// One warp takes a turn: lane 0 watches the counter, the whole warp reads and writes the sum.
// The running sum is read and written at the L2 (ld/st .cg), never through an SM's L1, which
// is not coherent and could hold a stale copy of it.
//
// Progress. A GPU promises nothing about which blocks run together, only (in practice) that
// blocks start in the order of their linear index. A kernel that takes turns must therefore
// give every turn's predecessor a lower linear block index than its own: then the block it
// waits for has started, and it waits on nothing that waits on it. The emulator runs blocks in
// that order too (docs/ARCHITECTURE.md, "Host emulation of CUDA", rule 3), one after another or
// on several OS threads that each take the next block, so the same rule keeps it from waiting
// forever. A wait that does not end (a kernel that breaks the rule) traps on the GPU after
// about ten seconds and aborts the emulator with the kernel's name after a minute.
//
// Under nvcc each step is a PTX instruction; under g++ a std::atomic operation with the same
// ordering (acquire, release). These, kernels/mma.cuh and kernels/async_copy.cuh are the only
// places kernels use inline PTX.
#include <cstdint>

#include "kernels/common.cuh"

#if !defined(__CUDACC__)
#include <chrono>
#include <thread>
#endif

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// Returns when *counter reaches `turn` (every lane of the warp calls it); what the earlier
// turns wrote before passing their turn is then visible to the whole warp.
__device__ __forceinline__ void wait_for_turn(const int* counter, int turn) {
  if (threadIdx.x % kWarpSize == 0) {
#if defined(__CUDACC__)
    for (long long spins = 0;; spins++) {
      int seen;
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= turn) break;
      if (spins > (1ll << 26)) __trap();  // ~10 s of 128-ns naps: a kernel that breaks the rule
      __nanosleep(128);
    }
#else
    const auto start = std::chrono::steady_clock::now();
    while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < turn) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60))
        ::simt::detail::kernel_fault("waited a minute for turn %d (the counter reads %d)", turn,
                                     __atomic_load_n(counter, __ATOMIC_ACQUIRE));
      std::this_thread::yield();
    }
#endif
  }
  __syncwarp();  // orders lane 0's acquire before every lane's reads
}

// Hands the turn on (every lane of the warp calls it, after its writes to the sum): the warp's
// writes become visible before the counter rises.
__device__ __forceinline__ void pass_turn(int* counter) {
  __syncwarp();  // every lane's writes before lane 0's release
  if (threadIdx.x % kWarpSize == 0) {
#if defined(__CUDACC__)
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
#else
    __atomic_fetch_add(counter, 1, __ATOMIC_RELEASE);
#endif
  }
}

// Two floats of a running sum, read or written at the L2 (8-byte aligned).
__device__ __forceinline__ float2 load_sum_pair(const float* sum) {
  return __ldcg(reinterpret_cast<const float2*>(sum));
}
__device__ __forceinline__ void store_sum_pair(float* sum, float first, float second) {
  __stcg(reinterpret_cast<float2*>(sum), make_float2(first, second));
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
