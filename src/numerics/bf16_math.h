#pragma once
// The rounding model of the optimizer math (docs/PRECISION.md §2), as
// __host__ __device__ inline functions over CUDA's __nv_bfloat16, so that the cpu loop and
// the CUDA kernel compute the same bits:
//
//   rn(x)          fp32 -> bf16, round to nearest, ties to even (NaN -> canonical 0x7fff,
//                  what the device's cvt.rn.bf16(x2).f32 and cuda_bf16.h's host path give)
//   add_rn(a, b)   one line (docs/PRECISION.md §2): read bf16 operands, compute in fp32, store rn
//   f32_add(a, b)  one IEEE fp32 operation, never contracted or reassociated
//
// Why "fp32 op, then rn" is the correctly rounded bf16 op. For +, −, ×, ÷ and √ of p-bit
// operands, rounding the exact result first to q bits and then to p bits gives the same as
// rounding it once to p bits whenever q ≥ 2p + 2 (double rounding is innocuous; Figueroa,
// "When is double rounding innocuous?", 1995). Here p = 8 (bf16), q = 24 (fp32) ≥ 18. bf16
// has fp32's exponent range, so subnormal results keep the same 16 extra bits of grid; the
// tests check the claim on subnormals too. A line with an fp32 operand (the scalars, g − m,
// g·g) has no such guarantee: it is DEFINED as fp32 op then rn, which is what a kernel doing
// one op per line computes. fma is fmaf (one fp32 rounding) then one rn, by definition.
//
// Host builds must not contract a*b+c into an fma: CMakeLists.txt adds -ffp-contract=off
// (GCC's default for gnu++ is "fast") and there is no -ffast-math. Device code uses the
// __f*_rn intrinsics, which nvcc never contracts, and must not be built with
// --use_fast_math (it flushes subnormals).
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(COLLAGE_HAVE_CUDA_BF16)
#include <cuda_bf16.h>
#else
#include "numerics/bf16_fallback.h"
#endif
#include "numerics/isa_namespace.h"

#ifdef __CUDACC__
#define COLLAGE_HD __host__ __device__
#else
#define COLLAGE_HD
#endif
// COLLAGE_HD, and inlined into every caller whatever the translation unit's size: GCC's early
// inliner costs each fma as a call and keeps a function with several out of line in a large
// file, and a call in a loop stops the loop from vectorizing (elementwise_math.h's exp_approx
// and GELUs: the cpu's GELU and cross-entropy ran ~4× slower so).
#ifdef __CUDACC__
#define COLLAGE_HD_ALWAYS_INLINE __host__ __device__ __forceinline__
#else
#define COLLAGE_HD_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {

using bfloat = __nv_bfloat16;

COLLAGE_HD inline uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

COLLAGE_HD inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

COLLAGE_HD inline bfloat bf16_from_bits(uint16_t bits) { return __ushort_as_bfloat16(bits); }
COLLAGE_HD inline uint16_t bf16_bits(bfloat x) { return __bfloat16_as_ushort(x); }

// bf16 -> fp32 is exact: the bf16 bits are the fp32's high half.
COLLAGE_HD inline float to_f32(bfloat x) { return bits_float(uint32_t(bf16_bits(x)) << 16); }

// fp32 -> bf16, nearest-even, by integer arithmetic on the bits (the host's rn; the cpu loop
// runs the same arithmetic on 64 lanes, bf16_lanes.h): adding 0x7fff plus the lowest kept bit
// carries into the kept bits exactly when the dropped half is above the tie, or at the tie
// with an odd kept part. Overflow carries into the exponent and gives ±inf, as it should.
COLLAGE_HD inline bfloat rn_by_bits(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_from_bits(0x7fff);  // NaN
  return bf16_from_bits(uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
}

// fp32 -> bf16, nearest-even: rn_by_bits on the host; on the GPU one conversion instruction,
// the paired cvt.rn.bf16x2.f32 given a zero partner rather than cvt.rn.bf16.f32. sm_90 runs a
// lone cvt.rn.bf16.f32 as F2F on its conversion unit, 16 results a clock per SM, and the paired
// form as F2FP on the ALU; ptxas itself turns two cvt.rn.bf16.f32 whose results it packs into
// one F2FP (the attention kernels), so the two round alike. The optimizer rounds ~33 values an
// element: with F2F its kernel showed SM busy 72% while the ALU was at 22% and the issue slots
// at 41% (Nsight Compute on an H100, docs/ARCHITECTURE.md "What each change to the GPU step
// bought").
// tests/cuda/device_math_test.cpp compares all 2^32 inputs with rn_by_bits on a real GPU.
COLLAGE_HD inline bfloat rn(float x) {
#ifdef __CUDA_ARCH__
  return __low2bfloat16(__floats2bfloat162_rn(x, 0.0f));
#else
  return rn_by_bits(x);
#endif
}

// ---- one IEEE fp32 operation each ----
COLLAGE_HD inline float f32_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
COLLAGE_HD inline float f32_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
COLLAGE_HD inline float f32_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
COLLAGE_HD inline float f32_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
COLLAGE_HD inline float f32_sqrt(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// a·b + c with ONE rounding (C's fmaf: correctly rounded in glibc, with or without an FMA
// instruction). Not double-precision emulation, which double-rounds near ties.
COLLAGE_HD inline float f32_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// ---- one line each (docs/PRECISION.md §2): bf16 operands, fp32 op, rn (correctly rounded) ----
COLLAGE_HD inline bfloat add_rn(bfloat a, bfloat b) { return rn(f32_add(to_f32(a), to_f32(b))); }
COLLAGE_HD inline bfloat sub_rn(bfloat a, bfloat b) { return rn(f32_sub(to_f32(a), to_f32(b))); }
COLLAGE_HD inline bfloat mul_rn(bfloat a, bfloat b) { return rn(f32_mul(to_f32(a), to_f32(b))); }
COLLAGE_HD inline bfloat div_rn(bfloat a, bfloat b) { return rn(f32_div(to_f32(a), to_f32(b))); }
COLLAGE_HD inline bfloat sqrt_rn(bfloat a) { return rn(f32_sqrt(to_f32(a))); }
// rn(fmaf(a, b, c)): not always the correctly rounded bf16 of a·b + c (fp32 then bf16 can
// double-round an fma), but the defined semantics of an "fma" line.
COLLAGE_HD inline bfloat fma_rn(bfloat a, bfloat b, bfloat c) {
  return rn(f32_fma(to_f32(a), to_f32(b), to_f32(c)));
}
// rn(x) where the line's algorithm makes x a bf16 already: an error-free transformation's
// error term (mcf_math.h: Fast2Sum's s − a and b − (s − a), TwoProd's a·b − p), which is a
// bf16 under the transformation's condition. The same bits as rn for every x; the name says
// what the line expects, and the cpu loop's guarded lanes skip the rounding and check that x
// was a bf16 instead (bf16_lanes.h).
COLLAGE_HD inline bfloat rn_expect_exact(float x) { return rn(x); }
COLLAGE_HD inline bfloat sub_rn_expect_exact(bfloat a, bfloat b) {
  return rn_expect_exact(f32_sub(to_f32(a), to_f32(b)));
}
COLLAGE_HD inline bfloat neg(bfloat a) { return bf16_from_bits(uint16_t(bf16_bits(a) ^ 0x8000u)); }
// table[b] for the 16 bits b of x: a per-step function of a bf16 value, tabulated (host only;
// collage_math.h's adam_direction).
inline float lookup_by_bf16(const float* table, bfloat x) { return table[bf16_bits(x)]; }

// ---- stochastic rounding (the `stochastic` strategy) ----

// The splitmix64 finalizer (Stafford's "variant 13"): a bijection of 64-bit words whose
// output bits each depend on every input bit.
COLLAGE_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// 16 random bits for element `index` of step t of a run seeded with `seed`: a counter-based
// RNG (no state to carry or checkpoint), one mix64 round per key word:
//   h = mix64(seed ^ 0x9e3779b97f4a7c15); h = mix64(h + t); h = mix64(h + index); bits = h >> 48
// Each round is a bijection, so within one (seed, t) distinct indices get distinct h.
COLLAGE_HD inline uint32_t rounding_noise16(uint64_t seed, int64_t t, int64_t index) {
  uint64_t h = mix64(seed ^ 0x9e3779b97f4a7c15ull);
  h = mix64(h + uint64_t(t));
  h = mix64(h + uint64_t(index));
  return uint32_t(h >> 48);
}

// fp32 -> bf16 rounding away from zero with probability (dropped 16 bits) / 2^16, toward zero
// otherwise: add the 16 random bits to the fp32 bits and truncate. Works on the magnitude
// bits, so it is symmetric in the sign and continuous across binades and subnormals; a
// carry out of the largest finite binade gives ±inf. NaN and ±inf go through rn.
COLLAGE_HD inline bfloat round_stochastic(float x, uint32_t noise16) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return rn(x);
  return bf16_from_bits(uint16_t((u + (noise16 & 0xffffu)) >> 16));
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
