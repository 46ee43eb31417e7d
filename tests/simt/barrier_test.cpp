// __syncthreads under the emulator: block-wide reductions through shared memory for block
// sizes that are not multiples of 32, threads that exit before the barrier, 2-D blocks, and the
// scheduling that makes a missing barrier visible as a wrong result.
#include <numeric>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::SimtTest;

// out[block] = Σ of the block's inputs, by a shared-memory tree with a barrier per level.
__global__ void block_sum(const int* in, int* out) {
  __shared__ int partial[1024];
  const unsigned t = threadIdx.x, n = blockDim.x;
  partial[t] = in[blockIdx.x * n + t];
  __syncthreads();
  unsigned stride = 1;
  while (stride * 2 < n) stride *= 2;
  for (; stride > 0; stride /= 2) {
    if (t < stride && t + stride < n) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

class Barrier : public SimtTest, public ::testing::WithParamInterface<unsigned> {};

TEST_P(Barrier, BlockReductionThroughSharedMemory) {
  const unsigned threads = GetParam(), blocks = 7;
  std::vector<int> in(threads * blocks);
  for (size_t i = 0; i < in.size(); ++i) in[i] = int(i * 7919 % 1000) - 500;
  DeviceArray<int> d_in(in.size()), d_out(blocks);
  upload(d_in, in);
  run(block_sum, dim3(blocks), dim3(threads), 0, d_in.get(), d_out.get());
  const std::vector<int> out = download(d_out);
  for (unsigned b = 0; b < blocks; ++b)
    EXPECT_EQ(out[b], std::accumulate(in.begin() + b * threads, in.begin() + (b + 1) * threads, 0))
        << "block " << b;
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, Barrier, ::testing::Values(1u, 33u, 96u, 200u, 1024u));

// Threads t >= active exit before the barrier (after lower threads already wait there), or
// threads t < skipped exit first; the barrier then releases the remaining threads, each of which
// reads a neighbour's value written before the barrier.
__global__ void exit_then_exchange(int* out, unsigned skipped, unsigned active) {
  __shared__ int value[1024];
  const unsigned t = threadIdx.x;
  if (t < skipped || t >= active) return;
  value[t] = int(t * t + blockIdx.x);
  __syncthreads();
  const unsigned neighbour = t + 1 < active ? t + 1 : skipped;
  out[blockIdx.x * blockDim.x + t] = value[neighbour];
  __syncthreads();  // a second barrier with the same (smaller) set of live threads
  value[t] = -1;
}

TEST_F(SimtTest, BarrierReleasesWhenEveryLiveThreadArrived) {
  const unsigned threads = 200, blocks = 3;
  for (const auto& [skipped, active] :
       {std::pair{0u, 77u}, std::pair{50u, 200u}, std::pair{31u, 133u}}) {
    DeviceArray<int> d_out(threads * blocks);
    run(exit_then_exchange, dim3(blocks), dim3(threads), 0, d_out.get(), skipped, active);
    const std::vector<int> out = download(d_out);
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned t = skipped; t < active; ++t) {
        const unsigned neighbour = t + 1 < active ? t + 1 : skipped;
        ASSERT_EQ(out[b * threads + t], int(neighbour * neighbour + b))
            << "block " << b << " thread " << t << " (skipped " << skipped << ", active " << active
            << ")";
      }
  }
}

// Thread t writes its slot, then reads its right neighbour's; only the barrier orders the write
// of thread t+1 before the read of thread t. `salt` differs between launches, so values left in
// the static shared array by an earlier launch do not pass for fresh ones.
__global__ void neighbour_exchange(int* out, int salt, bool with_barrier) {
  __shared__ int slot[256];
  const unsigned t = threadIdx.x;
  slot[t] = int(t) + salt;
  if (with_barrier) __syncthreads();
  out[t] = slot[(t + 1) % blockDim.x];
}

__global__ void neighbour_exchange_dynamic(int* out, bool with_barrier) {
  int* slot = static_cast<int*>(simt::dynamic_shared_memory());
  const unsigned t = threadIdx.x;
  slot[t] = int(t);
  if (with_barrier) __syncthreads();
  out[t] = slot[(t + 1) % blockDim.x];
}

TEST_F(SimtTest, MissingBarrierGivesWrongResult) {
  const unsigned threads = 96;
  DeviceArray<int> d_out(threads);
  int salt = 1000;
  for (const bool with_barrier : {true, false, true, false}) {
    salt += 1000;
    run(neighbour_exchange, dim3(1), dim3(threads), 0, d_out.get(), salt, with_barrier);
    const std::vector<int> out = download(d_out);
    unsigned wrong = 0;
    for (unsigned t = 0; t < threads; ++t) wrong += out[t] != int((t + 1) % threads) + salt;
    if (with_barrier) {
      EXPECT_EQ(wrong, 0u);
    } else {  // thread t runs to its end before thread t+1 writes: all reads but the last stale
      EXPECT_EQ(wrong, threads - 1);
    }
  }
  for (const bool with_barrier : {true, false}) {
    run(neighbour_exchange_dynamic, dim3(1), dim3(threads), threads * sizeof(int), d_out.get(),
        with_barrier);
    const std::vector<int> out = download(d_out);
    unsigned wrong = 0;
    for (unsigned t = 0; t < threads; ++t) wrong += out[t] != int((t + 1) % threads);
    EXPECT_EQ(wrong, with_barrier ? 0u : threads - 1);
    if (!with_barrier) {
      EXPECT_EQ(out[0], -1);  // the poison of fresh dynamic shared memory
    }
  }
}

// Inclusive scan (Hillis-Steele): each step reads, waits, writes, waits. Dropping either
// barrier breaks it.
__global__ void inclusive_scan(const int* in, int* out, int skip_barrier) {
  __shared__ int data[512];
  const unsigned t = threadIdx.x;
  data[t] = in[t];
  __syncthreads();
  for (unsigned offset = 1; offset < blockDim.x; offset *= 2) {
    const int add = t >= offset ? data[t - offset] : 0;
    if (skip_barrier != 1) __syncthreads();
    data[t] += add;
    if (skip_barrier != 2) __syncthreads();
  }
  out[t] = data[t];
}

TEST_F(SimtTest, ScanNeedsBothBarriers) {
  const unsigned threads = 300;
  std::vector<int> in(threads), expected(threads);
  for (unsigned i = 0; i < threads; ++i) in[i] = int(i % 13) + 1;
  std::partial_sum(in.begin(), in.end(), expected.begin());
  DeviceArray<int> d_in(threads), d_out(threads);
  upload(d_in, in);
  // Without the first barrier a thread's write overtakes a higher thread's read: the default
  // (lowest first) order shows it. Without the second, a thread's read overtakes a lower
  // thread's write: the reverse order shows it.
  for (const bool reverse : {false, true}) {
    simt_test::ReverseSchedule order(reverse);
    for (const int skip : {0, 1, 2}) {
      run(inclusive_scan, dim3(1), dim3(threads), 0, d_in.get(), d_out.get(), skip);
      const bool correct = download(d_out) == expected;
      const bool shows = skip == (reverse ? 2 : 1);
      EXPECT_EQ(correct, skip == 0 || !shows)
          << "barrier " << skip << " skipped, " << (reverse ? "reverse" : "default") << " order";
    }
  }
}

// Thread indices of a 3-D block follow CUDA's linear order (x fastest); the barrier covers all.
__global__ void linear_order(int* out) {
  __shared__ int seen[512];
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  seen[linear] = int(linear);
  __syncthreads();
  const unsigned n = blockDim.x * blockDim.y * blockDim.z;
  out[blockIdx.y * n + linear] = seen[n - 1 - linear] + 1000 * int(blockIdx.y);
}

TEST_F(SimtTest, ThreeDimensionalBlocks) {
  const dim3 block(5, 7, 3);
  const unsigned n = 5 * 7 * 3;
  DeviceArray<int> d_out(2 * n);
  run(linear_order, dim3(1, 2), block, 0, d_out.get());
  const std::vector<int> out = download(d_out);
  for (unsigned y = 0; y < 2; ++y)
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(out[y * n + i], int(n - 1 - i) + 1000 * int(y));
}

// A barrier that can never release: thread 0 waits in a warp collective that the other lanes,
// waiting at __syncthreads, never reach.
__global__ void barrier_deadlock(int* out) {
  int v = int(threadIdx.x);
  if (threadIdx.x == 0) v = __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  out[threadIdx.x] = v;
}

TEST_F(SimtTest, DeadlockAborts) {
  DeviceArray<int> d_out(64);
  EXPECT_DEATH(
      {
        simt::launch(stream, barrier_deadlock, dim3(1), dim3(64), 0, d_out.get());
        simt::synchronize(stream);
      },
      "simt: kernel .*block \\(0,0,0\\).*deadlock.*thread \\(0,0,0\\) in __shfl_xor_sync with "
      "mask 0xffffffff; threads \\(1,0,0\\)-\\(63,0,0\\) at __syncthreads");
}

TEST(SimtOutsideKernel, SyncthreadsOnTheHostAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(__syncthreads(), "simt: __syncthreads called outside a running kernel");
}

}  // namespace
