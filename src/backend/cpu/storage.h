#pragma once
// Storage helpers shared by the cpu kernels. Every kernel is a template over the storage type
// S (bf16 for training, float for finite-difference checks): values are loaded to fp32,
// computed in fp32 and stored back, which rounds to nearest-even for bf16 and is the identity
// for float. Loops that call these carry `#pragma omp simd`: at -O2 GCC's cost model
// vectorizes almost nothing on its own, and these helpers are simple enough to vectorize.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/bf16.h"

namespace collage::cpu {

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

// e^x in fp32 from plain arithmetic, so that loops over it vectorize (glibc's expf does not
// without -ffast-math). Cody-Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, then a degree-7
// Taylor polynomial (truncation < 2e-8 relative): about 1-2 ulp. x is clamped to [-87, 88] so
// 2^n stays a normal float (e^-87 ≈ 1.6e-38 stands in for anything smaller, e^88 for anything
// larger); NaN comes out NaN. The clamp and the NaN test work on the bit patterns as integers:
// float comparisons would keep GCC from vectorizing under -ftrapping-math (the default).
inline float exp_approx(float x) {
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

}  // namespace collage::cpu
