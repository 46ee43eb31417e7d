// launch() (kernels/common.cuh), the one way kernels start: it counts launches, and a launch the
// device refuses throws collage::Error naming the op, the call site and the shape, so the
// trainer's "name the step, write no checkpoint" path runs instead of a bare CUDA error.
#include <gtest/gtest.h>

#include <string>

#include "../../kernels/common.cuh"
#include "backend/cuda/runtime/runtime.h"
#include "core/error.h"

namespace collage::cuda {
namespace {

__global__ void write_block_size(int* out) {
  if (threadIdx.x == 0) *out = int(blockDim.x);
}

class CudaLaunch : public ::testing::Test {
 protected:
  void SetUp() override { open_context(cx_, 0); }
  void TearDown() override { close_context(cx_); }
  CudaContext cx_;
};

TEST_F(CudaLaunch, RunsAndCounts) {
  int* value = static_cast<int*>(device_allocate(cx_, sizeof(int)));
  const int64_t before = cx_.launches;
  launch(cx_, "write_block_size", write_block_size, dim3(1), dim3(96))(value);
  EXPECT_EQ(cx_.launches, before + 1);
  int host = 0;
  download(cx_, &host, value, sizeof host);
  EXPECT_EQ(host, 96);
  device_release(cx_, value);
}

TEST_F(CudaLaunch, RefusedConfigurationNamesOpCallSiteAndShape) {
  try {
    launch(cx_, "my_op", write_block_size, dim3(3), dim3(2048))(nullptr);
    FAIL() << "a 2048-thread block was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("my_op: kernel launch failed at "), std::string::npos) << message;
    EXPECT_NE(message.find("launch_test.cpp:"), std::string::npos) << message;
    EXPECT_NE(message.find("grid 3x1x1, block 2048x1x1"), std::string::npos) << message;
  }
}

TEST_F(CudaLaunch, EntryArgumentChecksThrowErrors) {
  try {
    COLLAGE_KERNEL_CHECK(1 + 1 == 3, "my_op: C = %d must be even", 7);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "my_op: C = 7 must be even");
  }
}

}  // namespace
}  // namespace collage::cuda
