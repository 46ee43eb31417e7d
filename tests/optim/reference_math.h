#pragma once
// Independent float64 rounding for the optimizer-math tests. Nothing here calls
// src/optim/*_math.h: values are doubles, rounded explicitly where docs/PRECISION.md §2 rounds.
//   rb(x)       double -> nearest-even bf16 value, directly (scaled nearbyint, not via fp32)
//   rf(x)       double -> nearest-even fp32 value (the C++ conversion)
//   fma_f32(...) fp32 fma with one rounding, from an exact double product and a TwoSum
// plus random bf16 inputs and the header <-> double glue the tests need.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "numerics/bf16_math.h"

namespace collage::test {

// Nearest-even bf16 value of x: 8 significant bits, grid 2^-133 below 2^-126 (subnormals),
// ±inf from 2^128 − 2^119 (half an ulp above the largest finite bf16) up.
inline double rb(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // |x| in [2^(e−1), 2^e)
  const int quantum = std::max(e - 8, -133);
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  if (std::fabs(r) >= 0x1p128) return std::copysign(INFINITY, x);
  return r;
}

inline double rf(double x) { return double(float(x)); }

// a·b + c rounded once to fp32. a·b is exact in double (24 + 24 bits); s + err = a·b + c
// exactly (TwoSum). Rounding s to fp32 gives the right answer unless s sits exactly on a
// midpoint between two floats, where the sign of err decides (a midpoint is a double, so
// RN53 cannot have moved a value across one).
inline float fma_f32(float a, float b, float c) {
  const double p = double(a) * double(b);
  const double s = p + double(c);
  const double bp = s - p;
  const double err = (p - (s - bp)) + (double(c) - bp);
  float f = float(s);
  if (err == 0 || !std::isfinite(s)) return f;
  const float lo = double(f) > s ? std::nextafter(f, -INFINITY) : f;
  const float hi = std::nextafter(lo, INFINITY);
  if ((double(lo) + double(hi)) / 2 == s) f = err > 0 ? hi : lo;  // midpoint: err decides
  return f;
}

// bf16 value <-> the header's type (through the bits: both are the fp32's high half).
inline math::bfloat to_bfloat(double x) {
  const float f = float(x);  // x is a bf16 value: exact
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return math::bf16_from_bits(uint16_t(u >> 16));
}
inline double to_double(math::bfloat x) {
  const uint32_t u = uint32_t(math::bf16_bits(x)) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint16_t bits_of(double bf16_value) { return math::bf16_bits(to_bfloat(bf16_value)); }

// The bf16 with these bits, as a double.
inline double bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Exponent of x as a bf16 floating-point number (subnormals and zero: the minimum, −126).
inline int fp_exponent(double x) { return x == 0 ? -126 : std::max(std::ilogb(x), -126); }
// ulp of a bf16 value: 2^(exponent − 7).
inline double ulp(double x) { return std::ldexp(1.0, fp_exponent(x) - 7); }

class Bf16Random {
 public:
  explicit Bf16Random(uint64_t seed) : rng_(seed) {}
  std::mt19937_64& engine() { return rng_; }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(rng_); }
  // Any finite bf16 (uniform over bit patterns: every binade, subnormals, ±0 equally likely).
  double any() {
    for (;;) {
      const uint16_t bits = uint16_t(rng_());
      if ((bits & 0x7f80) != 0x7f80) return bf16_value(bits);
    }
  }
  // A random sign and 8-bit significand with exponent in [emin, emax] (normal numbers).
  double with_exponent(int emin, int emax) {
    const double significand = 1.0 + integer(0, 127) / 128.0;
    const double sign = rng_() & 1 ? -1.0 : 1.0;
    return sign * std::ldexp(significand, integer(emin, emax));
  }
  // A low part for x: a random bf16 with |dx| ≤ ½ ulp(x) (0 a tenth of the time).
  double low_part(double x) {
    if (integer(0, 9) == 0) return 0;
    return rb(uniform(-0.5, 0.5) * ulp(x) * std::ldexp(1.0, -integer(0, 12)));
  }

 private:
  std::mt19937_64 rng_;
};

// A bf16 optimizer component (θ, g, a moment...) at `scale`: an ordinary value most of the
// time, else an edge: any bit pattern (NaN, ±inf), ±0 or a subnormal.
inline uint16_t component(Bf16Random& r, double scale, bool positive) {
  switch (r.integer(0, 19)) {
    case 0:
      return uint16_t(r.engine()());  // any pattern: NaN, ±inf, subnormals included
    case 1:
      return uint16_t(r.integer(0, 1) << 15);  // ±0
    case 2:
      return uint16_t(r.integer(0, 0x807f) & 0x807f);  // subnormal
    default: {
      const double x = r.normal() * scale * std::pow(10.0, r.uniform(-2, 1));
      return bits_of(rb(positive ? std::fabs(x) : x));
    }
  }
}

}  // namespace collage::test
