// Emulated device memory: 256-byte aligned, poisoned, recognised by is_device_pointer; the host
// faults when it dereferences it while queued work reads and writes it freely; a kernel that
// runs past an allocation faults; copies that run past one are reported.
#include <cstdint>

#include "simt_test_util.h"

namespace {

using simt_test::DeviceArray;
using simt_test::SimtTest;

TEST_F(SimtTest, AllocationsAreAlignedPoisonedAndKnown) {
  for (const size_t bytes : {size_t(1), size_t(255), size_t(256), size_t(4096), size_t(100000)}) {
    DeviceArray<unsigned char> memory(bytes);
    unsigned char* p = memory.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << bytes;
    EXPECT_TRUE(simt::is_device_pointer(p));
    EXPECT_TRUE(simt::is_device_pointer(p + bytes - 1));
    EXPECT_FALSE(simt::is_device_pointer(p + bytes));
    EXPECT_FALSE(simt::is_device_pointer(p - 1));
    EXPECT_EQ(download(memory), std::vector<unsigned char>(bytes, 0xff)) << bytes;
  }
  std::vector<int> host(4);
  EXPECT_FALSE(simt::is_device_pointer(host.data()));
  void* freed = simt::device_malloc(64);
  simt::device_free(freed);
  EXPECT_FALSE(simt::is_device_pointer(freed));
}

__global__ void add_one(int* data, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] += 1;
}

TEST_F(SimtTest, HostDereferenceFaultsWhileQueuedWorkMayAccess) {
  DeviceArray<int> data(1024);
  simt::memset_async(stream, data.get(), 0, data.bytes());
  run(add_one, dim3(4), dim3(256), 0, data.get(), 1024);
  int* device = data.get();
  int seen = -1;
  simt::enqueue(stream, [device, &seen] { seen = device[7] + 1; });  // host code, queued
  sync();
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(download(data), std::vector<int>(1024, 1));
  EXPECT_DEATH({ [[maybe_unused]] volatile int value = device[7]; },
               SIMT_FAULT_REPORT("simt: illegal access to device memory at 0x[0-9a-f]+ \\(offset "
                                 "28 of the device allocation 0x[0-9a-f]+ of 4096 bytes\\) \\(in "
                                 "host code"));
  EXPECT_DEATH({ device[0] = 1; }, SIMT_FAULT_REPORT("simt: illegal access to device memory"));
}

__global__ void write_at(int* data, int index) {
  if (threadIdx.x == 1) data[index] = 5;
}

TEST_F(SimtTest, KernelOverrunFaults) {
  DeviceArray<int> data(1024);                            // 4096 bytes: both ends meet a guard page
  run(write_at, dim3(1), dim3(32), 0, data.get(), 1023);  // the last element is fine
  sync();
  EXPECT_DEATH(
      {
        simt::launch(stream, write_at, dim3(1), dim3(32), 0, data.get(), 1024);
        simt::synchronize(stream);
      },
      SIMT_FAULT_REPORT("simt: illegal address 0x[0-9a-f]+: 0 bytes past the end of the device "
                        "allocation 0x[0-9a-f]+ of 4096 bytes \\(in kernel .*\\(int\\*, int\\), "
                        "block \\(0,0,0\\), thread \\(1,0,0\\)\\)"));
  EXPECT_DEATH(
      {
        simt::launch(stream, write_at, dim3(1), dim3(32), 0, data.get(), -1);
        simt::synchronize(stream);
      },
      SIMT_FAULT_REPORT("simt: illegal address 0x[0-9a-f]+: 4 bytes before the device allocation"));
}

TEST_F(SimtTest, CopiesPastAnAllocationAreReported) {
  DeviceArray<int> data(100);
  std::vector<int> host(101, 3);
  simt::memcpy_async(stream, data.get(), host.data(), 101 * sizeof(int));
  const char* error = simt::synchronize(stream);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("memcpy_async destination: 404 bytes at offset 0 of the "
                                    "device allocation"),
            std::string::npos)
      << error;
  simt::memset_async(stream, data.get() + 50, 0, 51 * sizeof(int));
  error = simt::synchronize(stream);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("memset_async destination: 204 bytes at offset 200"),
            std::string::npos)
      << error;
  simt::memcpy_async(stream, host.data(), data.get() + 1, 100 * sizeof(int));
  error = simt::synchronize(stream);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("memcpy_async source"), std::string::npos) << error;
  EXPECT_EQ(host, std::vector<int>(101, 3));  // nothing was copied
}

TEST_F(SimtTest, FreeingHostMemoryAborts) {
  int host = 0;
  EXPECT_DEATH(simt::device_free(&host),
               "simt: device_free\\(0x[0-9a-f]+\\): not the start of a live device allocation");
}

__global__ void deep_recursion_kernel(int* out, int depth);
int recurse(int depth) {
  volatile char frame[4096];
  frame[0] = char(depth);
  return depth == 0 ? 0 : recurse(depth - 1) + frame[0];
}
__global__ void deep_recursion_kernel(int* out, int depth) {
  if (threadIdx.x == 2) out[0] = recurse(depth);
}

TEST_F(SimtTest, FiberStackOverflowFaults) {
  DeviceArray<int> out(1);
  run(deep_recursion_kernel, dim3(1), dim3(4), 0, out.get(), 4);  // 16 KiB: fits
  sync();
  EXPECT_DEATH(
      {
        simt::launch(stream, deep_recursion_kernel, dim3(1), dim3(4), 0, out.get(), 64);
        simt::synchronize(stream);
      },
      SIMT_FAULT_REPORT("simt: fiber stack overflow at 0x[0-9a-f]+.*\\(in kernel .*thread "
                        "\\(2,0,0\\)\\)"));
}

}  // namespace
