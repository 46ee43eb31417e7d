// The shared math whose GPU code is not its host code (src/numerics/bf16_math.h's rn,
// elementwise_math.h's exp_approx): collage's cpu and cuda backends agree bit for bit only if
// the two give the same bits for every fp32 input. The probe (device_math_probe.cu) tries all
// 2^32 bit patterns (NaNs, infinities, subnormals, ties included) on the device. Skipped
// without a usable GPU: under the emulator the shared math runs its host code.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "device_math_probe.h"
#include "dist/backend_choice.h"

namespace collage::test {
namespace {

void expect_no_misses(const cuda::DeviceMathMisses& m, const char* what) {
  EXPECT_EQ(m.inputs, uint64_t(1) << 32) << what << ": the probe did not see every bit pattern";
  EXPECT_EQ(m.misses, 0u) << what << ": first differing input 0x" << std::hex << m.first_miss;
}

TEST(CudaDeviceMath, DeviceResultsEqualTheHostsForEveryFloat) {
#if defined(COLLAGE_HAVE_CUDA)
  if (choose_backend("auto").name != "cuda") GTEST_SKIP() << "no usable GPU";
  const cuda::DeviceMathProbeResult r = cuda::device::run_device_math_probe();
  expect_no_misses(r.rounding, "rounding to bf16");
  expect_no_misses(r.exp, "exp_approx");
#else
  GTEST_SKIP() << "this build has no CUDA (nvcc was not found)";
#endif
}

}  // namespace
}  // namespace collage::test
