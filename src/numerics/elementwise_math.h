#pragma once
// Elementwise math shared by the cpu backend and the CUDA kernels (kernels/), as
// __host__ __device__ inline functions: both backends evaluate the same fp32 operations in
// the same order, so elementwise ops give the same bits on the cpu and under the host
// emulation of the kernels (docs/ARCHITECTURE.md, "Bit-identical elementwise ops"). The CUDA
// build compiles kernels with -fmad=false so a GPU does not contract these into fmas either.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "numerics/bf16_math.h"  // COLLAGE_HD_ALWAYS_INLINE, f32_fma
#include "numerics/isa_namespace.h"

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {

// e^x in fp32 from plain arithmetic, so that loops over it vectorize (glibc's expf does not
// without -ffast-math). Cody-Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, then a degree-7
// Taylor polynomial (truncation < 2e-8 relative): under 1 ulp (0.92 at worst). x is clamped to
// [-87, 88] so 2^n stays a normal float (e^-87 ≈ 1.6e-38 stands in for anything smaller, e^88 for
// anything larger); NaN comes out NaN, with its own bits.
//
// Every multiply-add is an explicit fma (f32_fma: one rounding, the same bits from an x86 FMA,
// glibc's fmaf and a GPU's FFMA), because the CUDA build's -fmad=false and the host's
// -ffp-contract=off otherwise make each a multiply and an add: the GPU's GELU and
// cross-entropy are bound by their instruction count (docs/ARCHITECTURE.md, "What each change
// to the GPU step bought"), and the fmas halve the polynomial's. 2^n is built from the bits of
// the rounded y/ln2 + 1.5·2^23, whose low mantissa bits hold n, rather than by converting n to
// an integer (a conversion-unit instruction on the GPU).
//
// exp_of_clamped is the arithmetic after the clamp. exp_approx_by_bits clamps and tests for
// NaN on the bit patterns as integers: float comparisons would keep GCC from vectorizing under
// -ftrapping-math (the default). exp_approx is exp_approx_by_bits on the host; on the GPU it
// clamps with fminf/fmaxf and tests with isnan, the same results for every input in ~4
// instructions instead of ~11 integer ones. tests/cuda/device_math_test.cpp checks all 2^32
// inputs on a real GPU.
COLLAGE_HD_ALWAYS_INLINE float exp_of_clamped(float y) {
  // shifted = 1.5·2^23 + n with n = round(y / ln2): at 1.5·2^23 an ulp is 1, so the one
  // rounding of the fma rounds y/ln2 to the nearest integer.
  const float shifter = 12582912.0f;
  const float shifted = f32_fma(y, 1.44269504088896341f, shifter);
  const float n = shifted - shifter;
  // ln2 = 0.693359375 - 2.12194440e-4: the first part has 9 bits, so n·part is exact.
  float r = f32_fma(-n, 0.693359375f, y);
  r = f32_fma(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  p = f32_fma(p, r, 1.0f / 720.0f);
  p = f32_fma(p, r, 1.0f / 120.0f);
  p = f32_fma(p, r, 1.0f / 24.0f);
  p = f32_fma(p, r, 1.0f / 6.0f);
  p = f32_fma(p, r, 0.5f);
  p = f32_fma(p, r, 1.0f);
  p = f32_fma(p, r, 1.0f);
  // shifted's bits are those of 1.5·2^23 (low 9 bits zero) plus n, n in [-126, 127]: adding
  // the exponent bias and shifting left by 23 leaves exactly (n + 127) << 23, the bits of 2^n.
  uint32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
  const uint32_t two_n_bits = (shifted_bits + 127u) << 23;
  float two_n;
  std::memcpy(&two_n, &two_n_bits, sizeof two_n);
  return p * two_n;
}

COLLAGE_HD_ALWAYS_INLINE float exp_approx_by_bits(float x) {
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
  const float result = exp_of_clamped(y);
  int32_t result_bits;
  std::memcpy(&result_bits, &result, sizeof result_bits);
  const int32_t is_nan = -static_cast<int32_t>((bits & 0x7fffffff) > 0x7f800000);
  result_bits = (result_bits & ~is_nan) | (bits & is_nan);
  float out;
  std::memcpy(&out, &result_bits, sizeof out);
  return out;
}

COLLAGE_HD_ALWAYS_INLINE float exp_approx(float x) {
#ifdef __CUDA_ARCH__
  const float result = exp_of_clamped(fminf(fmaxf(x, -87.0f), 88.0f));  // NaN: -87 here
  return isnan(x) ? x : result;
#else
  return exp_approx_by_bits(x);
#endif
}

// GELU, tanh approximation, as x·sigmoid(2u) with u = √(2/π)(x + 0.044715x³): the identity
// 0.5(1 + tanh u) = sigmoid(2u) needs one exp_approx (which vectorizes) and no tanh.
// x + 0.044715x³ is one fma on 0.044715x², and e^(-2u) multiplies by -2√(2/π) at once.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluMinusTwoScale = -1.5957691216057308f;  // -2·sqrt(2/π)
constexpr float kGeluScaleCubic3 = 0.10703222440890037f;    // 3·0.044715·sqrt(2/π)

// x + 0.044715x³ (u/√(2/π)) from x and x².
COLLAGE_HD_ALWAYS_INLINE float gelu_inner(float x, float x2) {
  return f32_fma(kGeluCubic * x2, x, x);
}

COLLAGE_HD_ALWAYS_INLINE float gelu(float x) {
  const float e = exp_approx(gelu_inner(x, x * x) * kGeluMinusTwoScale);  // e^(-2u)
  return x / (1.0f + e);
}

// d/dx [x · σ] with σ = sigmoid(2u): 0.5(1 - tanh² u) = 2σ(1 - σ), so the derivative is
// σ + 2x·σ(1 - σ)·u' = σ·(1 + 2x(1 - σ)·u'), u' = √(2/π)(1 + 3·0.044715x²).
COLLAGE_HD_ALWAYS_INLINE float gelu_derivative(float x) {
  const float x2 = x * x;
  const float sig = 1.0f / (1.0f + exp_approx(gelu_inner(x, x2) * kGeluMinusTwoScale));
  const float du = f32_fma(kGeluScaleCubic3, x2, kGeluScale);
  return f32_fma(sig, (x + x) * (1.0f - sig) * du, sig);
}

// ---- encoder ops (BERT/RoBERTa) ----

// GELU, exact: 0.5·x·(1 + erf(x/√2)), the "gelu" of BERT and RoBERTa. erff is the C library's
// on the host (glibc) and CUDA's libdevice erff on a GPU: both are accurate to ~1-2 ulp but are
// different implementations, so a GPU may differ from the cpu backend by an ulp of erf before
// the rounding to bf16 (rarely visible after it). Under the host emulation the kernels call
// glibc's erff too and match the cpu bit for bit.
constexpr float kSqrtHalf = 0.70710678118654752f;      // 1/√2
constexpr float kInvSqrtTwoPi = 0.39894228040143268f;  // 1/√(2π)

COLLAGE_HD inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * kSqrtHalf)); }

// d/dx [0.5·x·(1 + erf(x/√2))] = 0.5·(1 + erf(x/√2)) + x·φ(x), φ(x) = exp(-x²/2)/√(2π).
// exp_approx clamps its argument at -87: φ is then ~1e-38·x instead of 0, far below any bf16
// gradient that matters (and x·φ(x) for |x| ≥ 13.2 is below fp32's smallest normal anyway).
COLLAGE_HD inline float gelu_erf_derivative(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
  const float pdf = kInvSqrtTwoPi * exp_approx(-0.5f * x * x);
  return cdf + x * pdf;
}

// tanh (the BERT pooler). tanhf: glibc's on the host, CUDA's on a GPU (the same caveat as erff).
COLLAGE_HD inline float tanh_value(float x) { return tanhf(x); }
// d tanh = (1 - y²) from the saved output y.
COLLAGE_HD inline float tanh_derivative_from_output(float y) { return 1.0f - y * y; }

// ---- Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011; the Random123 library's philox4x32_10): a counter-based generator. The 128-bit
// output is a bijection of the 128-bit counter under the 64-bit key, so any element's random
// number is computed from (key, counter) alone: no state, the same on every backend and
// thread layout, and a resumed run replays the same numbers from the same (seed, offset).
// tests/backend/dropout_test.cpp checks Random123's known-answer vectors.
struct Philox4x32 {
  uint32_t v[4];
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // key increments (Weyl)

// hi and lo halves of the 64-bit product a·b (the device would use __umulhi; a 64-bit multiply
// gives the same bits on both and in the emulator).
COLLAGE_HD inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = uint64_t(a) * uint64_t(b);
  hi = uint32_t(product >> 32);
  lo = uint32_t(product);
}

COLLAGE_HD inline Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; round++) {
    if (round > 0) key0 += kPhiloxW0, key1 += kPhiloxW1;  // the key schedule: bump, then round
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kPhiloxM0, counter.v[0], hi0, lo0);
    philox_mulhilo(kPhiloxM1, counter.v[2], hi1, lo1);
    counter = Philox4x32{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
  }
  return counter;
}

// The random numbers of dropout: element e (a 64-bit index into the op's numbering) gets word
// e % 4 of Philox under key (seed low, seed high) at counter (e / 4 low, e / 4 high, 0, 0).
// So 4 consecutive elements share one Philox evaluation.
COLLAGE_HD inline Philox4x32 dropout_block(uint64_t seed, uint64_t group) {
  return philox4x32_10(Philox4x32{{uint32_t(group), uint32_t(group >> 32), 0u, 0u}}, uint32_t(seed),
                       uint32_t(seed >> 32));
}

// A Philox word as a uniform number in [0, 1): its top 24 bits · 2^-24, exact in fp32 (so
// the comparison with p has no rounding in it, and the same outcome everywhere).
COLLAGE_HD inline float uniform_from_bits(uint32_t bits) {
  return float(bits >> 8) * (1.0f / 16777216.0f);
}

COLLAGE_HD inline float dropout_uniform(uint64_t seed, uint64_t element) {
  const Philox4x32 block = dropout_block(seed, element >> 2);
  return uniform_from_bits(block.v[element & 3]);
}

// Dropout keeps element e iff its uniform ≥ p, scaled by 1/(1 - p) (inverted dropout); the
// factor an element is multiplied by: keep_scale = 1/(1 - p) (fp32) or 0.
COLLAGE_HD inline float dropout_keep_scale(float p) { return 1.0f / (1.0f - p); }
COLLAGE_HD inline float dropout_factor(float uniform, float p, float keep_scale) {
  return uniform >= p ? keep_scale : 0.0f;
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
