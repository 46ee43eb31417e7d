#pragma once
// Elementwise math shared by the cpu backend and the CUDA kernels (kernels/), as
// __host__ __device__ inline functions: both backends evaluate the same fp32 operations in
// the same order, so elementwise ops give the same bits on the cpu and under the host
// emulation of the kernels (docs/ARCHITECTURE.md, "Bit-identical elementwise ops"). The CUDA
// build compiles kernels with -fmad=false so a GPU does not contract these into fmas either.
#include <cstdint>
#include <cstring>

#include "optim/bf16_math.h"  // COLLAGE_HD

namespace collage::math {

// e^x in fp32 from plain arithmetic, so that loops over it vectorize (glibc's expf does not
// without -ffast-math). Cody-Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, then a degree-7
// Taylor polynomial (truncation < 2e-8 relative): about 1-2 ulp. x is clamped to [-87, 88] so
// 2^n stays a normal float (e^-87 ≈ 1.6e-38 stands in for anything smaller, e^88 for anything
// larger); NaN comes out NaN. The clamp and the NaN test work on the bit patterns as integers:
// float comparisons would keep GCC from vectorizing under -ftrapping-math (the default).
COLLAGE_HD inline float exp_approx(float x) {
  int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  constexpr int32_t kLow = -0x3d520000;  // bits of -87.0f (0xc2ae0000) as int32
  constexpr int32_t kHigh = 0x42b00000;  // bits of 88.0f
  // Negative floats order backwards as int32: x < -87 is bits in (kLow, 0).
  // Selects by masks, not `?:`: GCC would fold the clamped case to a constant and branch.
  const int32_t below = -static_cast<int32_t>((bits < 0) & (bits > kLow));  // all ones if so
  int32_t clamped = (bits & ~below) | (kLow & below);
  const int32_t above = -static_cast<int32_t>(clamped > kHigh);
  clamped = (clamped & ~above) | (kHigh & above);
  float y;
  std::memcpy(&y, &clamped, sizeof y);
  // n = round(y / ln2): adding 1.5·2^23 pushes the fraction bits out (round-to-nearest).
  const float shifter = 12582912.0f;
  const float n = (y * 1.44269504088896341f + shifter) - shifter;
  // ln2 = 0.693359375 - 2.12194440e-4: the first part has 9 bits, so n·part is exact.
  float r = y - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t two_n_bits = (static_cast<int32_t>(n) + 127) << 23;  // n in [-126, 127]
  float two_n;
  std::memcpy(&two_n, &two_n_bits, sizeof two_n);
  const float result = p * two_n;
  int32_t result_bits;
  std::memcpy(&result_bits, &result, sizeof result_bits);
  const int32_t is_nan = -static_cast<int32_t>((bits & 0x7fffffff) > 0x7f800000);
  result_bits = (result_bits & ~is_nan) | (bits & is_nan);
  float out;
  std::memcpy(&out, &result_bits, sizeof out);
  return out;
}

// GELU, tanh approximation, as x·sigmoid(2u) with u = √(2/π)(x + 0.044715x³): the identity
// 0.5(1 + tanh u) = sigmoid(2u) needs one exp_approx (which vectorizes) and no tanh.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluCubic = 0.044715f;

COLLAGE_HD inline float gelu(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return x / (1.0f + exp_approx(-2.0f * u));
}

// d/dx [x · σ] with σ = sigmoid(2u): 0.5(1 - tanh² u) = 2σ(1 - σ), so the derivative is
// σ + 2x·σ(1 - σ)·u'.
COLLAGE_HD inline float gelu_derivative(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  float sig = 1.0f / (1.0f + exp_approx(-2.0f * u));
  return sig + 2.0f * x * sig * (1.0f - sig) * du;
}

}  // namespace collage::math
