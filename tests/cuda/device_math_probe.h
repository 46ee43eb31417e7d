#pragma once
// The probe of tests/cuda/device_math_test.cpp (device_math_probe.cu), built with nvcc only:
// under the emulator the shared math runs its host code, so only a GPU has anything to compare.
#include <cstdint>

#include "backend/cuda/runtime/context.h"  // opens this build's inline namespace first

namespace collage::cuda {

// For one function: how many fp32 inputs the kernel tried (all 2^32), how many gave other bits
// than the host's code, and the smallest such input's bit pattern.
struct DeviceMathMisses {
  uint64_t inputs = 0, misses = 0;
  uint32_t first_miss = ~0u;
};
struct DeviceMathProbeResult {
  DeviceMathMisses rounding;  // math::rn, __float2bfloat16_rn, pack_bf16 vs math::rn_by_bits
  DeviceMathMisses exp;       // math::exp_approx vs math::exp_approx_by_bits
};

namespace device {  // only in builds with COLLAGE_HAVE_CUDA
DeviceMathProbeResult run_device_math_probe();
}

}  // namespace collage::cuda
