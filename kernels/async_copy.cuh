#pragma once
// cp.async (Ampere and later): copies from global to shared memory that bypass registers and
// run while the thread computes, so a kernel can fetch its next tile during the current one.
// Under nvcc each function is one PTX instruction; under g++ it is the emulator's
// (src/simt/async_copy.h), which does a copy when its thread waits for it.
//
// Use: copy_async_16 ... ; copy_async_commit(); ... compute ... ; copy_async_wait<0>();
// __syncthreads(); then every thread may read what any thread copied.
#include <cstdint>

#include "kernels/common.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

// 16 bytes from `source` (global) to `destination` (shared), both 16-byte aligned; with `valid`
// false, 16 zero bytes instead and `source` is not read.
__device__ __forceinline__ void copy_async_16(void* destination, const void* source, bool valid) {
#if defined(__CUDACC__)
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(source),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  ::simt::copy_async(destination, source, 16, valid ? 16 : 0);
#endif
}

// The copies issued since the last commit become one group.
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDACC__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  ::simt::copy_async_commit();
#endif
}

// Waits until at most kPending of this thread's groups are in flight (the oldest finish first).
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDACC__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#else
  ::simt::copy_async_wait(kPending);
#endif
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
