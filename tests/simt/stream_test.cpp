// Streams: order of queued work, deferred mode (which catches a missing synchronize), staged
// host sources, arguments copied at the launch, errors of queued functions, and launch
// configurations that are refused.
#include <stdexcept>
#include <string>

#include "simt_test_util.h"

namespace {

using simt_test::DeferredMode;
using simt_test::DeviceArray;
using simt_test::SimtTest;

__global__ void scale(float* data, int n, float factor) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] *= factor;
}

// The host reads a device-to-host copy without synchronising: in deferred mode it sees the
// stale contents of its buffer (as it may on a GPU), so the missing synchronize shows; after
// synchronize it sees the result. In immediate mode the same code happens to work.
TEST_F(SimtTest, DeferredModeCatchesAMissingSynchronize) {
  const int n = 1000;
  std::vector<float> input(n);
  for (int i = 0; i < n; ++i) input[i] = float(i);
  DeviceArray<float> data(n);
  for (const bool deferred : {true, false}) {
    DeferredMode mode(deferred);
    std::vector<float> result(n, -1.0f);
    simt::memcpy_async(stream, data.get(), input.data(), data.bytes());
    ASSERT_EQ(simt::launch(stream, scale, dim3(4), dim3(256), 0, data.get(), n, 2.0f), nullptr);
    simt::memcpy_async(stream, result.data(), data.get(), data.bytes());
    // No synchronize yet.
    if (deferred) {
      EXPECT_EQ(result, std::vector<float>(n, -1.0f)) << "deferred work ran before synchronize";
    } else {
      EXPECT_EQ(result[10], 20.0f);
    }
    ASSERT_EQ(simt::synchronize(stream), nullptr);
    for (int i = 0; i < n; ++i) ASSERT_EQ(result[i], 2.0f * float(i)) << i;
  }
}

// memcpy_async reads a host source at the call: reusing the buffer right after is safe.
TEST_F(SimtTest, HostSourceIsReadAtTheCall) {
  for (const bool deferred : {true, false}) {
    DeferredMode mode(deferred);
    DeviceArray<int> first(64), second(64);
    std::vector<int> buffer(64, 1);
    simt::memcpy_async(stream, first.get(), buffer.data(), first.bytes());
    std::fill(buffer.begin(), buffer.end(), 2);
    simt::memcpy_async(stream, second.get(), buffer.data(), second.bytes());
    buffer.assign(64, 3);
    EXPECT_EQ(download(first), std::vector<int>(64, 1));
    EXPECT_EQ(download(second), std::vector<int>(64, 2));
  }
}

struct Params {
  int values[4];
};
__global__ void record_params(int* out, Params params, int extra) {
  if (threadIdx.x < 4) out[threadIdx.x] = params.values[threadIdx.x] + extra;
  params.values[0] = 99;  // each thread has its own copy: no other thread sees this
}

TEST_F(SimtTest, ArgumentsAreCopiedAtTheLaunch) {
  DeferredMode mode(true);
  DeviceArray<int> out(4);
  Params params{{1, 2, 3, 4}};
  int extra = 10;
  ASSERT_EQ(simt::launch(stream, record_params, dim3(1), dim3(64), 0, out.get(), params, extra),
            nullptr);
  params.values[1] = -7;  // the queued launch must not see these
  extra = 1000;
  EXPECT_EQ(download(out), (std::vector<int>{11, 12, 13, 14}));
}

__global__ void append(int* log, int value) {
  if (threadIdx.x == 0) {
    const int at = atomicAdd(&log[0], 1) + 1;
    log[at] = value;
  }
}

TEST_F(SimtTest, WorkRunsInOrderAndOnlyAtSynchronizeWhenDeferred) {
  DeferredMode mode(true);
  DeviceArray<int> log(16);
  std::vector<int> order;
  simt::memset_async(stream, log.get(), 0, log.bytes());
  simt::enqueue(stream, [&order] { order.push_back(1); });
  ASSERT_EQ(simt::launch(stream, append, dim3(1), dim3(32), 0, log.get(), 7), nullptr);
  simt::enqueue(stream, [&order] { order.push_back(2); });
  ASSERT_EQ(simt::launch(stream, append, dim3(1), dim3(32), 0, log.get(), 8), nullptr);
  EXPECT_TRUE(order.empty());
  ASSERT_EQ(simt::synchronize(stream), nullptr);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  std::vector<int> expected(16, 0);
  expected[0] = 2, expected[1] = 7, expected[2] = 8;
  EXPECT_EQ(download(log), expected);
}

TEST_F(SimtTest, DestroyStreamAndDeviceFreeRunQueuedWork) {
  DeferredMode mode(true);
  int ran = 0;
  simt::Stream* other = simt::create_stream();
  simt::enqueue(other, [&ran] { ran++; });
  simt::destroy_stream(other);
  EXPECT_EQ(ran, 1);
  // device_free waits for the work queued on every stream, like cudaFree.
  int* memory = static_cast<int*>(simt::device_malloc(256));
  simt::memset_async(stream, memory, 0, 256);
  ASSERT_EQ(simt::launch(stream, append, dim3(1), dim3(32), 0, memory, 5), nullptr);
  int seen = 0;
  simt::enqueue(stream, [memory, &seen] { seen = memory[1]; });
  simt::device_free(memory);
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(simt::synchronize(stream), nullptr);
}

TEST_F(SimtTest, ThrowingFunctionFailsSynchronizeAndDropsLaterWork) {
  for (const bool deferred : {true, false}) {
    DeferredMode mode(deferred);
    int ran = 0;
    simt::enqueue(stream, [&ran] { ran += 1; });
    simt::enqueue(stream, [] { throw std::runtime_error("gemm: bad shape 3x0x2"); });
    simt::enqueue(stream, [] { throw std::runtime_error("a second failure"); });
    simt::enqueue(stream, [&ran] { ran += 10; });  // dropped: the stream failed
    const char* error = simt::synchronize(stream);
    ASSERT_NE(error, nullptr);
    EXPECT_STREQ(error, "gemm: bad shape 3x0x2");
    EXPECT_EQ(ran, 1);
    // Reported once; the stream runs work again.
    EXPECT_EQ(simt::synchronize(stream), nullptr);
    simt::enqueue(stream, [&ran] { ran += 100; });
    EXPECT_EQ(simt::synchronize(stream), nullptr);
    EXPECT_EQ(ran, 101);
  }
}

__global__ void count_blocks(int* counter) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(counter, 1);
}

TEST_F(SimtTest, LaunchConfigurationErrors) {
  DeviceArray<int> counter(1);
  simt::memset_async(stream, counter.get(), 0, 4);
  struct Case {
    dim3 grid, block;
    size_t shared;
    const char* error;  // nullptr: valid
  };
  const Case cases[] = {
      {dim3(1), dim3(0), 0, "a block of 0 threads"},
      {dim3(1), dim3(1025), 0, "more than 1024 threads per block"},
      {dim3(1), dim3(32, 16, 4), 0, "more than 1024 threads per block"},
      {dim3(1), dim3(1, 1, 65), 0, "block.z > 64"},
      {dim3(0), dim3(32), 0, "empty grid"},
      {dim3(2, 0), dim3(32), 0, "empty grid"},
      {dim3(1, 65536), dim3(32), 0, "grid.y or grid.z > 65535"},
      {dim3(1, 1, 65536), dim3(32), 0, "grid.y or grid.z > 65535"},
      {dim3(1), dim3(32), (227u << 10) + 1, "more than 227 KiB of dynamic shared memory"},
      {dim3(1), dim3(1024), 227u << 10, nullptr},
      {dim3(1, 2, 3), dim3(8, 8, 16), 0, nullptr},
  };
  int valid_blocks = 0;
  for (const Case& c : cases) {
    const char* error =
        simt::launch(stream, count_blocks, c.grid, c.block, c.shared, counter.get());
    if (!c.error) {
      EXPECT_EQ(error, nullptr) << error;
      valid_blocks += int(c.grid.x * c.grid.y * c.grid.z);
    } else {
      ASSERT_NE(error, nullptr) << c.error;
      EXPECT_NE(std::string(error).find(c.error), std::string::npos) << error;
    }
  }
  EXPECT_EQ(download(counter)[0], valid_blocks);  // refused launches queued nothing
}

TEST_F(SimtTest, NullStreamIsTheDefaultStream) {
  DeviceArray<int> counter(1);
  simt::memset_async(nullptr, counter.get(), 0, 4);
  ASSERT_EQ(simt::launch(nullptr, count_blocks, dim3(3), dim3(2), 0, counter.get()), nullptr);
  int value = 0;
  simt::memcpy_async(nullptr, &value, counter.get(), 4);
  EXPECT_EQ(simt::synchronize(nullptr), nullptr);
  EXPECT_EQ(value, 3);
}

}  // namespace
