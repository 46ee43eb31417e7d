// Shared memory under the emulator: static __shared__ arrays and dynamic shared memory belong
// to one block, also when blocks run at the same time on several worker OS threads; dynamic
// shared memory is 16-byte aligned, poisoned at the start of every block, and ends at a guard.
#include <cstdint>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::SimtTest;
using simt_test::WorkerThreads;

// Every round: all threads write the block's index into the static array, wait, and check
// that they read their own block's index back. out[block] counts the failed checks.
__global__ void static_shared_owner(int* out, int rounds) {
  __shared__ unsigned owner[128];
  __shared__ int failures;
  if (threadIdx.x == 0) failures = 0;
  for (int round = 0; round < rounds; ++round) {
    owner[threadIdx.x] = blockIdx.x;
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; ++i)
      if (owner[i] != blockIdx.x) atomicAdd(&failures, 1);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = failures;
}

// The same with dynamic shared memory, which must also be 16-byte aligned.
__global__ void dynamic_shared_owner(int* out, int rounds) {
  unsigned* owner = static_cast<unsigned*>(simt::dynamic_shared_memory());
  int* failures = reinterpret_cast<int*>(owner + blockDim.x);
  if (threadIdx.x == 0) *failures = reinterpret_cast<uintptr_t>(owner) % 16 == 0 ? 0 : 1000;
  for (int round = 0; round < rounds; ++round) {
    owner[threadIdx.x] = blockIdx.x;
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; ++i)
      if (owner[i] != blockIdx.x) atomicAdd(failures, 1);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = *failures;
}

TEST_F(SimtTest, SharedMemoryIsPrivateToABlock) {
  const unsigned blocks = 64, threads = 128;
  for (const unsigned workers : {1u, 2u, 3u}) {
    WorkerThreads pool(workers);  // several blocks at once on different OS threads
    DeviceArray<int> d_static(blocks), d_dynamic(blocks);
    run(static_shared_owner, dim3(blocks), dim3(threads), 0, d_static.get(), 20);
    run(dynamic_shared_owner, dim3(blocks), dim3(threads), (threads + 4) * sizeof(unsigned),
        d_dynamic.get(), 20);
    EXPECT_EQ(download(d_static), std::vector<int>(blocks, 0)) << workers << " workers";
    EXPECT_EQ(download(d_dynamic), std::vector<int>(blocks, 0)) << workers << " workers";
  }
}

// Reads dynamic shared memory before anything wrote it: the poison, in every block (also
// after the previous block wrote there).
__global__ void read_fresh_dynamic_shared(unsigned* out, unsigned words) {
  unsigned* shared = static_cast<unsigned*>(simt::dynamic_shared_memory());
  unsigned poisoned = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) poisoned += shared[i] == 0xffffffffu;
  atomicAdd(&out[blockIdx.x], poisoned);
  __syncthreads();
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) shared[i] = 0;
}

TEST_F(SimtTest, DynamicSharedMemoryStartsPoisonedInEveryBlock) {
  const unsigned blocks = 5, words = 1000;
  DeviceArray<unsigned> d_out(blocks);
  simt::memset_async(stream, d_out.get(), 0, d_out.bytes());
  run(read_fresh_dynamic_shared, dim3(blocks), dim3(96), words * sizeof(unsigned), d_out.get(),
      words);
  EXPECT_EQ(download(d_out), std::vector<unsigned>(blocks, words));
}

// The largest dynamic shared memory a launch may ask for is all usable.
__global__ void fill_dynamic_shared(unsigned* out, unsigned words) {
  unsigned* shared = static_cast<unsigned*>(simt::dynamic_shared_memory());
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) shared[i] = i;
  __syncthreads();
  unsigned sum = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) sum += shared[words - 1 - i];
  atomicAdd(out, sum);
}

TEST_F(SimtTest, DynamicSharedMemoryUpTo227KiB) {
  const unsigned words = (227u << 10) / 4;
  DeviceArray<unsigned> d_out(1);
  simt::memset_async(stream, d_out.get(), 0, 4);
  run(fill_dynamic_shared, dim3(1), dim3(256), words * sizeof(unsigned), d_out.get(), words);
  EXPECT_EQ(download(d_out)[0], unsigned(uint64_t(words) * (words - 1) / 2));
}

__global__ void overrun_dynamic_shared(unsigned words) {
  unsigned* shared = static_cast<unsigned*>(simt::dynamic_shared_memory());
  if (threadIdx.x == 3) shared[words] = 1;  // one word past the launch's shared_bytes
}

TEST_F(SimtTest, DynamicSharedMemoryOverrunFaults) {
  EXPECT_DEATH(
      {
        simt::launch(stream, overrun_dynamic_shared, dim3(1), dim3(32), 64 * sizeof(unsigned), 64u);
        simt::synchronize(stream);
      },
      SIMT_FAULT_REPORT("simt: dynamic shared memory overrun at 0x[0-9a-f]+: 0 bytes past the "
                        "launch's 256 bytes \\(in kernel .*block \\(0,0,0\\), thread "
                        "\\(3,0,0\\)\\)"));
}

}  // namespace
