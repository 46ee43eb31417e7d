// The probe behind tests/cuda/device_math_test.cpp: every one of the 2^32 fp32 bit patterns x
// goes through the math whose GPU code differs from its host code, and each result must have
// the bits of the host's code for x (that code, run here on the device):
//   rounding to bf16, want math::rn_by_bits(x):
//     math::rn(x)               every kernel's (cvt.rn.bf16x2.f32 with a zero partner)
//     __float2bfloat16_rn(x)    the lone cvt.rn.bf16.f32 that math::rn used before
//     pack_bf16(x, -x)          the attention kernels' paired rounding (kernels/mma.cuh)
//     to_bf16_pair(x, -x)       the paired rounding of side-by-side stores (kernels/common.cuh)
//   math::exp_approx(x) (fminf/fmaxf clamp), want math::exp_approx_by_bits(x)
#include "backend/cuda/runtime/runtime.h"
#include "kernels/mma.cuh"
#include "numerics/elementwise_math.h"
#include "tests/cuda/device_math_probe.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kFunctions = 2;  // rounding, exp

// counts[2·f]: inputs seen, counts[2·f + 1]: misses of function f; first_miss[f]: the smallest
// missed pattern.
__global__ void device_math_probe_kernel(unsigned long long* counts, unsigned* first_miss) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned long long seen = 0, missed[kFunctions] = {0, 0};
  unsigned first[kFunctions] = {~0u, ~0u};
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (uint64_t(1) << 32);
       u += stride) {
    const float x = math::bits_float(uint32_t(u));
    const uint16_t want = math::bf16_bits(math::rn_by_bits(x));
    const uint16_t want_negated = math::bf16_bits(math::rn_by_bits(-x));
    const uint32_t pair = pack_bf16(x, -x);
    bf16_t low, high;
    to_bf16_pair(low, high, x, -x);
    const bool rounding_miss =
        math::bf16_bits(math::rn(x)) != want || math::bf16_bits(__float2bfloat16_rn(x)) != want ||
        uint16_t(pair) != want || uint16_t(pair >> 16) != want_negated ||
        math::bf16_bits(low) != want || math::bf16_bits(high) != want_negated;
    const bool exp_miss =
        math::float_bits(math::exp_approx(x)) != math::float_bits(math::exp_approx_by_bits(x));
    const bool miss[kFunctions] = {rounding_miss, exp_miss};
    seen++;
    for (int f = 0; f < kFunctions; f++) {
      if (miss[f]) missed[f]++, first[f] = min(first[f], uint32_t(u));
    }
  }
  for (int f = 0; f < kFunctions; f++) {
    atomicAdd(&counts[2 * f], seen);
    atomicAdd(&counts[2 * f + 1], missed[f]);
    atomicMin(&first_miss[f], first[f]);
  }
}

}  // namespace

DeviceMathProbeResult run_device_math_probe() {
  CudaContext cx;
  open_context(cx, 0);
  auto* counts = static_cast<unsigned long long*>(device_allocate(cx, 2 * kFunctions * 8));
  auto* first_miss = static_cast<unsigned*>(device_allocate(cx, kFunctions * 4));
  const unsigned long long zeros[2 * kFunctions] = {};
  const unsigned none[kFunctions] = {~0u, ~0u};
  upload(cx, counts, zeros, sizeof zeros);
  upload(cx, first_miss, none, sizeof none);
  launch(cx, "device_math_probe", device_math_probe_kernel, dim3(4096), dim3(256))(counts,
                                                                                   first_miss);
  unsigned long long host_counts[2 * kFunctions];
  unsigned host_first[kFunctions];
  download(cx, host_counts, counts, sizeof host_counts);
  download(cx, host_first, first_miss, sizeof host_first);
  device_release(cx, counts);
  device_release(cx, first_miss);
  close_context(cx);
  DeviceMathMisses* each[kFunctions];
  DeviceMathProbeResult result;
  each[0] = &result.rounding, each[1] = &result.exp;
  for (int f = 0; f < kFunctions; f++)
    *each[f] = {host_counts[2 * f], host_counts[2 * f + 1], host_first[f]};
  return result;
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
