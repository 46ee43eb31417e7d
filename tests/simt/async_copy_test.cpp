// The emulator's cp.async (src/simt/async_copy.h): a copy lands when its thread waits for its
// group, never before, so a kernel that reads too early fails here as it might on a GPU; a
// block's copies are seen by every thread after wait + __syncthreads; zero-fill; wait_group N
// leaves the N newest groups in flight and uncommitted copies in none; and the misuses that
// abort like a GPU fault.
#include "simt/async_copy.h"

#include <cstring>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::ReverseSchedule;
using simt_test::SimtTest;

constexpr int kThreads = 64;

// Thread t copies source row t into shared row (t + 1) % kThreads, then reads row t (its
// neighbour's copy) before its wait, after its wait, and after wait + __syncthreads.
__global__ void neighbour_copy(const uint32_t* source, uint32_t* before, uint32_t* after) {
  __shared__ __align__(16) uint32_t rows[kThreads][4];
  const int t = threadIdx.x;
  for (int i = 0; i < 4; i++) rows[t][i] = 0xdeadbeefu;
  __syncthreads();
  simt::copy_async(rows[(t + 1) % kThreads], source + 4 * t, 16, 16);
  simt::copy_async_commit();
  before[t] = rows[(t + 1) % kThreads][0];  // this thread's own destination, not yet written
  simt::copy_async_wait(0);
  __syncthreads();
  for (int i = 0; i < 4; i++) after[4 * t + i] = rows[t][i];
}

TEST_F(SimtTest, AsyncCopyLandsAtTheWaitAndIsSeenAfterTheBarrier) {
  for (const bool reverse : {false, true}) {
    ReverseSchedule order(reverse);
    std::vector<uint32_t> values(4 * kThreads);
    for (size_t i = 0; i < values.size(); i++) values[i] = uint32_t(i * 2654435761u);
    DeviceArray<uint32_t> d_source(values.size()), d_before(kThreads), d_after(values.size());
    upload(d_source, values);
    run(neighbour_copy, dim3(1), dim3(kThreads), 0, d_source.get(), d_before.get(), d_after.get());
    const std::vector<uint32_t> before = download(d_before), after = download(d_after);
    for (int t = 0; t < kThreads; t++) {
      EXPECT_EQ(before[t], 0xdeadbeefu) << "thread " << t << " reverse=" << reverse;
      const int from = (t + kThreads - 1) % kThreads;  // who copied into row t
      for (int i = 0; i < 4; i++)
        EXPECT_EQ(after[4 * t + i], values[4 * from + i]) << "row " << t << " reverse=" << reverse;
    }
  }
}

// One thread: group A (a full copy), group B (8 bytes and zero fill), then a copy never
// committed; records the shared words after wait_group 1, 0, and commit + wait_group 0.
__global__ void groups(const uint32_t* source, uint32_t* seen) {
  __shared__ __align__(16) uint32_t a[4], b[4], c[4];
  for (int i = 0; i < 4; i++) a[i] = b[i] = c[i] = 7;
  simt::copy_async(a, source, 16, 16);
  simt::copy_async_commit();
  simt::copy_async(b, source + 4, 16, 8);
  simt::copy_async_commit();
  simt::copy_async(c, source + 8, 16, 0);  // source not read: all zeros
  auto record = [&](int stage) {
    for (int i = 0; i < 4; i++) {
      seen[stage * 12 + i] = a[i];
      seen[stage * 12 + 4 + i] = b[i];
      seen[stage * 12 + 8 + i] = c[i];
    }
  };
  simt::copy_async_wait(1);
  record(0);
  simt::copy_async_wait(0);
  record(1);
  simt::copy_async_commit();
  simt::copy_async_wait(0);
  record(2);
}

TEST_F(SimtTest, AsyncCopyGroupsCompleteOldestFirst) {
  const std::vector<uint32_t> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  DeviceArray<uint32_t> d_source(values.size()), d_seen(36);
  upload(d_source, values);
  run(groups, dim3(1), dim3(1), 0, d_source.get(), d_seen.get());
  const std::vector<uint32_t> seen = download(d_seen);
  const std::vector<uint32_t> want = {
      1, 2, 3, 4, 7, 7, 7, 7, 7, 7, 7, 7,  // wait_group 1: A only
      1, 2, 3, 4, 5, 6, 0, 0, 7, 7, 7, 7,  // wait_group 0: B too, with its zero fill
      1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0,  // the uncommitted copy once committed: zeros
  };
  EXPECT_EQ(seen, want);
}

__global__ void exits_in_flight(const uint32_t* source) {
  __shared__ __align__(16) uint32_t a[4];
  simt::copy_async(a, source, 16, 16);
  simt::copy_async_commit();
}
__global__ void misaligned_copy(const uint32_t* source) {
  __shared__ __align__(16) uint32_t a[8];
  simt::copy_async(a + 1, source, 16, 16);
  simt::copy_async_commit();
  simt::copy_async_wait(0);
}

class AsyncCopyMisuse : public SimtTest {
 protected:
  void launch_and_sync(void (*kernel)(const uint32_t*)) {
    DeviceArray<uint32_t> d_source(8);
    simt::launch(stream, kernel, dim3(1), dim3(1), 0, static_cast<const uint32_t*>(d_source.get()));
    simt::synchronize(stream);
  }
};

TEST_F(AsyncCopyMisuse, ExitWithCopiesInFlight) {
  EXPECT_DEATH(launch_and_sync(exits_in_flight),
               "simt: .*exited with 1 cp.async copies never waited for");
}
TEST_F(AsyncCopyMisuse, MisalignedDestination) {
  EXPECT_DEATH(launch_and_sync(misaligned_copy), "simt: .*cp.async: .* is not 16-byte aligned");
}

}  // namespace
