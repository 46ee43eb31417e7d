#pragma once
// Storage helpers shared by the cpu kernels. Every kernel is a template over the storage type
// S (bf16 for training, float for finite-difference checks): values are loaded to fp32,
// computed in fp32 and stored back, which rounds to nearest-even for bf16 and is the identity
// for float. Loops that call these carry `#pragma omp simd`: at -O2 GCC's cost model
// vectorizes almost nothing on its own, and these helpers are simple enough to vectorize.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "numerics/bf16.h"
#include "numerics/elementwise_math.h"
#include "numerics/isa_namespace.h"

namespace collage::cpu {
// In the namespace of the compilation that includes it: the lane kernels are compiled twice
// (lane_kernels.h), and an AVX-512 copy of a helper must not stand in for the baseline's.
inline namespace COLLAGE_ISA_NAMESPACE {

inline float load(float x) { return x; }
inline float load(bf16 x) { return bf16_to_float(x); }
inline void store(float& dst, float value) { dst = value; }
inline void store(bf16& dst, float value) { dst = float_to_bf16(value); }

template <typename S>
constexpr bool is_fp32_storage = std::is_same_v<S, float>;

// out[i] = load(in[i]) for i < n
template <typename S>
inline void widen(const S* in, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) out[i] = load(in[i]);
}

// out[i] = rn(in[i]) for i < n
template <typename S>
inline void narrow(const float* in, S* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) store(out[i], in[i]);
}

// if_true where condition, else if_false, by masking bits: a `?:` on floats can turn into a
// branch (GCC will not speculate float math under -ftrapping-math) and stop vectorization.
inline float select_float(bool condition, float if_true, float if_false) {
  int32_t a, b;
  std::memcpy(&a, &if_true, sizeof a);
  std::memcpy(&b, &if_false, sizeof b);
  const int32_t mask = -static_cast<int32_t>(condition);  // all ones if condition
  const int32_t bits = (a & mask) | (b & ~mask);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// The float bit pattern as an int32 that orders like the float (negative floats have their
// magnitude bits flipped); its own inverse. Lets a max reduction run on integers, which
// vectorize where float comparisons do not.
inline int32_t float_order_key(int32_t bits) { return bits ^ ((bits >> 31) & 0x7fffffff); }

// max of x[0, n); -inf for n = 0. A NaN with the sign bit clear counts as the largest value.
inline float max_value(const float* x, int64_t n) {
  int32_t best = float_order_key(static_cast<int32_t>(0xff800000u));  // -inf
#pragma omp simd reduction(max : best)
  for (int64_t i = 0; i < n; i++) {
    int32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    const int32_t key = float_order_key(bits);
    best = key > best ? key : best;
  }
  const int32_t bits = float_order_key(best);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Σ term(i) for i < n in fp32, in one order whatever the lane registers, so that the baseline and
// AVX-512 compilations of a kernel give the same bits (an `omp simd` reduction's order depends
// on the vector width): lane k (k < 16) adds, in order, the terms with i ≡ k (mod 16); then the
// lanes fold pairwise, lane k += lane k + w for w = 8, 4, 2, 1; lane 0 is the sum.
constexpr int kSumLanes = 16;
template <typename Term>
inline float lane_sum(int64_t n, Term term) {
  float lanes[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
#pragma omp simd
    for (int k = 0; k < kSumLanes; k++) lanes[k] += term(i + k);
  }
  for (int k = 0; i < n; i++, k++) lanes[k] += term(i);
  for (int width = kSumLanes / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; k++) lanes[k] += lanes[k + width];
  }
  return lanes[0];
}

// exp_approx: e^x from plain fp32 arithmetic, shared with the CUDA kernels so both compute the
// same bits (numerics/elementwise_math.h).
using math::exp_approx;

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
