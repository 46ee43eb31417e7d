#pragma once
// A scalar float64 reference of one AdamW step per strategy, written line by line from
// docs/PRECISION.md §3–§5 and §8, independent of src/optim/*_math.h: every value is a double;
// each line rounds explicitly, rb(...) to bf16 (directly from double) where the page stores
// bf16, rf(...) where it computes in fp32 with an fp32 operand, fma_f32 where it says fma.
#include <cmath>
#include <cstdint>

#include "reference_math.h"

namespace collage::test {

struct RefScalars {
  double beta1, beta2, eps, omb1, omb2, lr_wd, neg_lr_bc1, neg_lr_sqrt_bc2_bc1, sqrt_bc2;
  double bh, bl;
  bool hf;
};

// Evaluated in double from the double hyperparameters, rounded once to fp32.
inline RefScalars ref_scalars(double lr, double beta1, double beta2, double eps, double wd,
                              int64_t t, bool hf) {
  const double bc1 = 1 - std::pow(beta1, double(t)), bc2 = 1 - std::pow(beta2, double(t));
  RefScalars s;
  s.beta1 = rf(beta1), s.beta2 = rf(beta2), s.eps = rf(eps);
  s.omb1 = rf(1 - beta1), s.omb2 = rf(1 - beta2);
  s.lr_wd = rf(lr * wd);
  s.neg_lr_bc1 = rf(-lr / bc1);
  s.neg_lr_sqrt_bc2_bc1 = rf(-lr * std::sqrt(bc2) / bc1);
  s.sqrt_bc2 = rf(std::sqrt(bc2));
  s.bh = rb(s.beta2);           // bh = rn(β2), β2 the fp32 scalar
  s.bl = rb(rf(beta2 - s.bh));  // bl = rn(β2 − bh), the difference formed in double
  s.hf = hf;
  return s;
}

inline double fma_line(double a, double b, double c) {  // rn(fma(a, b, c)), fp32 operands
  return rb(fma_f32(float(a), float(b), float(c)));
}

inline double ref_first_moment(double m, double g, const RefScalars& s) {
  if (s.hf) {
    m = rb(rf(m * s.beta1));
    return fma_line(s.omb1, g, m);
  }
  return fma_line(s.omb1, rf(g - m), m);  // g − m in fp32
}

inline double ref_second_moment(double v, double g, const RefScalars& s) {
  v = rb(rf(v * s.beta2));
  return fma_line(s.omb2, rf(g * g), v);
}

struct RefPair {
  double x, dx;
};

inline RefPair ref_grow(RefPair p, double u) {
  const double s = rb(p.x + u);
  double dx = rb(p.dx + rb(u - rb(s - p.x)));
  const double x = rb(s + dx);
  dx = rb(dx - rb(x - s));
  return {x, dx};
}

inline RefPair ref_mult(RefPair v, double bh, double bl, bool quirk) {
  const double p = rb(v.x * bh);
  const double xr = quirk ? p : v.x;  // the quirk reads p where docs/PRECISION.md §3 says x
  const double e = fma_line(xr, bh, -p);
  double dx = rb(v.dx * bh);
  dx = fma_line(xr, bl, dx);
  dx = rb(dx + e);
  const double x = rb(p + dx);
  if (!quirk) dx = rb(dx - rb(x - p));
  return {x, dx};
}

inline RefPair ref_second_moment_plus(RefPair v, double g, const RefScalars& s, bool quirk) {
  v = ref_mult(v, s.bh, s.bl, quirk);
  return ref_grow(v, rb(rf(s.omb2 * rf(g * g))));
}

inline double ref_update(double m, double v, double theta, const RefScalars& s) {
  double a;
  if (s.hf) {
    const double denom = rb(rf(rb(std::sqrt(v)) + s.eps));
    a = rb(rb(rf(m * s.neg_lr_sqrt_bc2_bc1)) / denom);
  } else {
    const double denom = rb(rf(rb(rf(rb(std::sqrt(v)) / s.sqrt_bc2)) + s.eps));
    a = rb(rb(rf(m * s.neg_lr_bc1)) / denom);
  }
  return rb(a - rb(rf(theta * s.lr_wd)));
}

// The state of one element; the fields a strategy does not use stay 0.
struct RefState {
  double theta = 0, m = 0, v = 0, dtheta = 0, dv = 0, comp = 0;  // bf16 values
  double u = 0, delta = 0;                                       // this step's EDQ terms
};

// The counter-based noise as bf16_math.h documents it (splitmix64's finalizer, three rounds).
inline uint64_t ref_mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint32_t ref_noise(uint64_t seed, int64_t t, int64_t index) {
  const uint64_t h =
      ref_mix(ref_mix(ref_mix(seed ^ 0x9e3779b97f4a7c15ull) + uint64_t(t)) + uint64_t(index));
  return uint32_t(h >> 48);
}

// Stochastic rounding by value: up (away from zero) to the next bf16 when the fp32's 16
// dropped bits plus the noise reach 2^16.
inline double ref_round_stochastic(double x, uint32_t noise) {
  if (x == 0) return x;
  const double ax = std::fabs(x), quantum = ulp(ax);
  const double lo = std::floor(ax / quantum) * quantum;
  const double dropped = (ax - lo) / (quantum / 65536);
  const double rounded = lo + (dropped + noise >= 65536 ? quantum : 0);
  return std::copysign(rounded >= 0x1p128 ? INFINITY : rounded, x);
}

enum class RefStrategy { bf16, light, plus, kahan, stochastic };

inline void ref_step(RefStrategy strategy, RefState& st, double g, const RefScalars& s, bool quirk,
                     uint64_t seed, int64_t t, int64_t index) {
  st.m = ref_first_moment(st.m, g, s);
  if (strategy == RefStrategy::plus) {
    const RefPair v = ref_second_moment_plus({st.v, st.dv}, g, s, quirk);
    st.v = v.x, st.dv = v.dx;
  } else {
    st.v = ref_second_moment(st.v, g, s);
  }
  const double u = ref_update(st.m, st.v, st.theta, s);
  const double before = st.theta;
  switch (strategy) {
    case RefStrategy::bf16:
      st.theta = rb(st.theta + u);
      break;
    case RefStrategy::light:
    case RefStrategy::plus: {
      const RefPair w = ref_grow({st.theta, st.dtheta}, u);
      st.theta = w.x, st.dtheta = w.dx;
      break;
    }
    case RefStrategy::kahan:
      st.comp = rb(st.comp + u);
      st.theta = rb(st.theta + st.comp);
      st.comp = rb(st.comp + rb(before - st.theta));
      break;
    case RefStrategy::stochastic:
      st.theta = ref_round_stochastic(rf(st.theta + u), ref_noise(seed, t, index));
      break;
  }
  st.u = u;
  st.delta = st.theta - before;
}

// fp32-master: the same lines in fp32 (every result rf), on an fp32 master.
struct RefMaster {
  double master = 0, m = 0, v = 0;  // fp32 values
  double u = 0, delta = 0;
};

inline void ref_step_fp32_master(RefMaster& st, double g, const RefScalars& s) {
  if (s.hf) {
    st.m = rf(st.m * s.beta1);
    st.m = fma_f32(float(s.omb1), float(g), float(st.m));
  } else {
    st.m = fma_f32(float(s.omb1), float(rf(g - st.m)), float(st.m));
  }
  st.v = rf(st.v * s.beta2);
  st.v = fma_f32(float(s.omb2), float(rf(g * g)), float(st.v));
  double a;
  if (s.hf) {
    a = rf(rf(st.m * s.neg_lr_sqrt_bc2_bc1) / rf(rf(std::sqrt(st.v)) + s.eps));
  } else {
    a = rf(rf(st.m * s.neg_lr_bc1) / rf(rf(rf(std::sqrt(st.v)) / s.sqrt_bc2) + s.eps));
  }
  st.u = rf(a - rf(st.master * s.lr_wd));
  const double before = st.master;
  st.master = rf(st.master + st.u);
  st.delta = st.master - before;
}

}  // namespace collage::test
