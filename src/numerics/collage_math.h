#pragma once
// One AdamW step of one element under every precision strategy (docs/PRECISION.md §4, §5), as
// __host__ __device__ inline functions: the cpu backend's loop (src/backend/cpu/optimizer.cpp)
// and the CUDA kernel call the same code, so their updates are bit-identical
// (docs/ARCHITECTURE.md, "Bit-identical elementwise ops"). Rounding model and fp32 ops:
// bf16_math.h; MCF building blocks: mcf_math.h.
//
// Per strategy (state order as in backend/optimizer_step.h):
//   step_bf16            θ = rn(θ + u)
//   step_collage_light   (θ, δθ) = Grow((θ, δθ), u)
//   step_collage_plus    light, and (v, δv) = Grow(Mult((v, δv), (bh, bl)), rn((1−β2)·g²))
//   step_kahan           c = rn(c + u); θ' = rn(θ + c); c = rn(c + rn(θ − θ'))
//   step_stochastic      θ = round_stochastic(θ + u in fp32, rounding_noise16(seed, t, i))
//   step_fp32_master     the same AdamW in fp32 on an fp32 master; θ = rn(master) by the caller
// Each returns the element's EDQ terms (u and Δ = θ_new − θ_old, for fp32-master the master's
// change); EdqAccumulator sums them.
//
// Every per-element function is a template over the bf16 type B (fp32-master: the fp32 type
// F): bfloat/float for the CUDA kernel and scalar host code, Bf16Lanes/F32Lanes for the cpu
// loop, which steps 64 elements per call (bf16_lanes.h: the same operations lane by lane, so
// the same bits). fp32 intermediates are `auto`: float, or F32Lanes with Bf16Lanes. Branches
// on AdamScalars or the quirk switch are per call, the same for all lanes.
#include <cmath>
#include <cstdint>

#include "numerics/bf16_math.h"
#include "numerics/isa_namespace.h"
#include "numerics/mcf_math.h"

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {

// The fp32 scalars of one step. Each is evaluated on the host in double from the double
// hyperparameters and rounded ONCE to fp32 (so 1−β1 for β1 = 0.9 is fp32(0.1), not
// 1 − fp32(0.9)); none is pre-rounded to bf16 except β2's split (bh, bl) for Mult.
struct AdamScalars {
  float beta1, beta2, eps;
  float one_minus_beta1, one_minus_beta2;
  float lr_wd;                     // lr·wd (decoupled weight decay folded into u)
  float neg_lr_over_bc1;           // −lr/bc1                 (torch order)
  float neg_lr_sqrt_bc2_over_bc1;  // −lr·sqrt(bc2)/bc1       (hf order)
  float sqrt_bc2;                  // sqrt(bc2)               (torch order)
  bfloat beta2_hi, beta2_lo;       // bh = rn(β2), bl = rn(β2 − bh), β2 − bh in double
  bool hf_order;                   // false: torch order (GPT), true: hf order (BERT)
  // Host lane loop only, else null: entry b = 1 / adam_denominator(bf16 with bits b), one fp32
  // division each, filled per step by the cpu optimizer (backend/cpu/optimizer_chunks.cpp,
  // fill_reciprocal_denominators); adam_direction then multiplies instead of dividing.
  const float* reciprocal_denominators = nullptr;
};

// Host only: bc1 = 1 − β1^t, bc2 = 1 − β2^t in double (t ≥ 1, β < 1 checked by the caller).
inline AdamScalars make_adam_scalars(double lr, double beta1, double beta2, double eps,
                                     double weight_decay, int64_t t, bool hf_order) {
  const double bc1 = 1.0 - std::pow(beta1, double(t));
  const double bc2 = 1.0 - std::pow(beta2, double(t));
  AdamScalars s;
  s.beta1 = float(beta1), s.beta2 = float(beta2), s.eps = float(eps);
  s.one_minus_beta1 = float(1.0 - beta1), s.one_minus_beta2 = float(1.0 - beta2);
  s.lr_wd = float(lr * weight_decay);
  s.neg_lr_over_bc1 = float(-lr / bc1);
  s.neg_lr_sqrt_bc2_over_bc1 = float(-lr * std::sqrt(bc2) / bc1);
  s.sqrt_bc2 = float(std::sqrt(bc2));
  s.beta2_hi = rn(s.beta2);
  s.beta2_lo = rn(float(beta2 - double(to_f32(s.beta2_hi))));
  s.hf_order = hf_order;
  return s;
}

// ---- the gradient ----

// What the step reads of a gradient element with clipping's factor c ≠ 1: rn(g·c), which is
// what Backend::scale stores (fp32 product, one rounding), so clipping fused into the update's
// pass gives the bits of clipping first. fp32 storage (fp32-master's F = float): g·c.
template <typename B>
COLLAGE_HD inline B clipped_gradient(B g, float c) {
  return rn(f32_mul(to_f32(g), c));
}
COLLAGE_HD inline float clipped_gradient(float g, float c) { return f32_mul(g, c); }

// ---- the moments ----

// torch/NeMo order, a lerp: m = rn(fma(1−β1, g − m, m)), g − m in fp32 (not rounded to bf16).
template <typename B>
COLLAGE_HD inline B first_moment_torch(B m, B g, const AdamScalars& s) {
  const auto g_minus_m = f32_sub(to_f32(g), to_f32(m));
  return rn(f32_fma(s.one_minus_beta1, g_minus_m, to_f32(m)));
}

// hf order: m = rn(m·β1); m = rn(fma(1−β1, g, m)).
template <typename B>
COLLAGE_HD inline B first_moment_hf(B m, B g, const AdamScalars& s) {
  m = rn(f32_mul(to_f32(m), s.beta1));
  return rn(f32_fma(s.one_minus_beta1, to_f32(g), to_f32(m)));
}

template <typename B>
COLLAGE_HD inline B first_moment(B m, B g, const AdamScalars& s) {
  return s.hf_order ? first_moment_hf(m, g, s) : first_moment_torch(m, g, s);
}

// plain/light (both orders): v = rn(v·β2); v = rn(fma(1−β2, g·g, v)), g·g in fp32 (exact
// unless it underflows). rn(v·β2) == v for every normal v when β2 > 1 − 2^-9: bf16 v never
// decays at β2 = 0.999.
template <typename B>
COLLAGE_HD inline B second_moment(B v, B g, const AdamScalars& s) {
  v = rn(f32_mul(to_f32(v), s.beta2));
  const auto g_squared = f32_mul(to_f32(g), to_f32(g));
  return rn(f32_fma(s.one_minus_beta2, g_squared, to_f32(v)));
}

// plus: (v, δv) = Mult((v, δv), (bh, bl)); (v, δv) = Grow((v, δv), rn((1−β2)·(g·g))).
template <typename B>
COLLAGE_HD inline McfOf<B> second_moment_plus(McfOf<B> v, B g, const AdamScalars& s,
                                              bool reference_quirk) {
  v = reference_quirk ? mult_reference_quirk(v, s.beta2_hi, s.beta2_lo)
                      : mult(v, s.beta2_hi, s.beta2_lo);
  const auto g_squared = f32_mul(to_f32(g), to_f32(g));
  return grow(v, rn(f32_mul(s.one_minus_beta2, g_squared)));
}

// ---- the update u (weight decay folded in) ----
// a = div_rn(numerator(m), denominator(v)). The denominator depends on v and the step's
// scalars only, which lets the cpu loop tabulate it for every bf16 v (adam_direction below).

// torch order: denom = rn(rn(rn(sqrt(v)) / sqrt(bc2)) + eps); numer = rn(m·(−lr/bc1))
template <typename B>
COLLAGE_HD inline B adam_denominator_torch(B v, const AdamScalars& s) {
  const B root = sqrt_rn(v);
  const B corrected = rn(f32_div(to_f32(root), s.sqrt_bc2));
  return rn(f32_add(to_f32(corrected), s.eps));
}

// hf order: denom = rn(rn(sqrt(v)) + eps); numer = rn(m·(−lr·sqrt(bc2)/bc1))
template <typename B>
COLLAGE_HD inline B adam_denominator_hf(B v, const AdamScalars& s) {
  const B root = sqrt_rn(v);
  return rn(f32_add(to_f32(root), s.eps));
}

template <typename B>
COLLAGE_HD inline B adam_denominator(B v, const AdamScalars& s) {
  return s.hf_order ? adam_denominator_hf(v, s) : adam_denominator_torch(v, s);
}

template <typename B>
COLLAGE_HD inline B adam_numerator(B m, const AdamScalars& s) {
  return rn(f32_mul(to_f32(m), s.hf_order ? s.neg_lr_sqrt_bc2_over_bc1 : s.neg_lr_over_bc1));
}

// a = numer / denom, rounded once to bf16. With s.reciprocal_denominators (the cpu loop),
// a = rn(numer · r[v]) where r[v] = f32_div(1, denom(v)): the same bits without a division
// per element. For bf16 n and d, rn(n · RN32(1/d)) == rn(n / d) unless d is a nonzero
// subnormal whose reciprocal overflows fp32 (|d| ≤ 2^-128, which no table holds: see
// fill_reciprocal_denominators). Why, in short: n·RN32(1/d) is within 2^-23 of n/d
// relatively, while a quotient of two 8-bit significands is never a bf16 midpoint and lies
// farther than that from every one, so both round to the same bf16; zeros, infinities and
// NaN come out alike. tests/optim/reciprocal_denominators_test.cpp checks all 2^32 pairs (n, d).
template <typename B>
COLLAGE_HD inline B adam_direction(B m, B v, const AdamScalars& s) {
  const B numer = adam_numerator(m, s);
#ifndef __CUDA_ARCH__
  if (s.reciprocal_denominators) {
    return rn(f32_mul(to_f32(numer), lookup_by_bf16(s.reciprocal_denominators, v)));
  }
#endif
  return div_rn(numer, adam_denominator(v, s));
}

// u = rn(a − rn(θ·(lr·wd))), a from the moments just updated.
template <typename B>
COLLAGE_HD inline B adamw_update(B m, B v, B theta, const AdamScalars& s) {
  const B a = adam_direction(m, v, s);
  const B decay = rn(f32_mul(to_f32(theta), s.lr_wd));
  return sub_rn(a, decay);
}

// ---- EDQ terms (docs/PRECISION.md §7) ----

// One element's intended update u and the change Δ the stored weights received.
struct EdqTerm {
  float u;
  double delta;
};

struct EdqAccumulator {
  double dot = 0;        // Σ Δ·u
  double u_squared = 0;  // Σ u²
  int64_t updated = 0;   // #{u ≠ 0}
  int64_t lost = 0;      // #{u ≠ 0 and Δ == 0}, i.e. θ_new == θ_old
  COLLAGE_HD void add(EdqTerm term) {
    const double u = term.u;
    dot += term.delta * u;
    u_squared += u * u;
    updated += u != 0;
    lost += (u != 0) & (term.delta == 0);
  }
};

// Δ = θ_new − θ_old, exact in double (both are bf16).
COLLAGE_HD inline double bf16_change(bfloat after, bfloat before) {
  return double(to_f32(after)) - double(to_f32(before));
}

// The EDQ term of one element: u, and Δ from the weights before and after (bf16 θ, or the
// fp32 master). bf16_lanes.h overloads both for lane vectors.
COLLAGE_HD inline EdqTerm edq_term(bfloat u, bfloat after, bfloat before) {
  return {to_f32(u), bf16_change(after, before)};
}
COLLAGE_HD inline EdqTerm edq_term(float u, float after, float before) {
  return {u, double(after) - double(before)};
}

// ---- one step of one element, per strategy ----

// bf16: state {m, v}.
template <typename B>
COLLAGE_HD inline auto step_bf16(B& theta, B g, B& m, B& v, const AdamScalars& s) {
  m = first_moment(m, g, s);
  v = second_moment(v, g, s);
  const B u = adamw_update(m, v, theta, s);
  const B before = theta;
  theta = add_rn(theta, u);
  return edq_term(u, theta, before);
}

// collage-light: state {m, v, δθ}.
template <typename B>
COLLAGE_HD inline auto step_collage_light(B& theta, B g, B& m, B& v, B& dtheta,
                                          const AdamScalars& s) {
  m = first_moment(m, g, s);
  v = second_moment(v, g, s);
  const B u = adamw_update(m, v, theta, s);
  const B before = theta;
  const McfOf<B> w = grow({theta, dtheta}, u);
  theta = w.x, dtheta = w.dx;
  return edq_term(u, theta, before);
}

// collage-plus: state {m, v, δθ, δv}; only the high parts θ and v are read by sqrt and by
// the model.
template <typename B>
COLLAGE_HD inline auto step_collage_plus(B& theta, B g, B& m, B& v, B& dtheta, B& dv,
                                         const AdamScalars& s, bool reference_quirk) {
  m = first_moment(m, g, s);
  const McfOf<B> second = second_moment_plus({v, dv}, g, s, reference_quirk);
  v = second.x, dv = second.dx;
  const B u = adamw_update(m, v, theta, s);
  const B before = theta;
  const McfOf<B> w = grow({theta, dtheta}, u);
  theta = w.x, dtheta = w.dx;
  return edq_term(u, theta, before);
}

// kahan: state {m, v, c}, AnyPrecisionAdamW's compensated update with u in place of its
// "−step_size·m/denom" (u already carries the decoupled weight decay):
//   c  = rn(c + u)             comp.addcdiv_(...)        the update joins the compensation
//   θ' = rn(θ + c)             p.add_(comp)
//   c  = rn(c + rn(θ − θ'))    comp.add_(temp.sub_(p))   what θ did not take stays in c
template <typename B>
COLLAGE_HD inline auto step_kahan(B& theta, B g, B& m, B& v, B& compensation,
                                  const AdamScalars& s) {
  m = first_moment(m, g, s);
  v = second_moment(v, g, s);
  const B u = adamw_update(m, v, theta, s);
  const B before = theta;
  compensation = add_rn(compensation, u);
  theta = add_rn(theta, compensation);
  compensation = add_rn(compensation, sub_rn(before, theta));
  return edq_term(u, theta, before);
}

// stochastic: state {m, v}; θ + u in fp32, then rounded stochastically to bf16 with the
// noise of element `index` (= rounding_offset + i) of step t. Index is int64_t, or
// LaneIndices (the indices of a Bf16Lanes).
template <typename B, typename Index>
COLLAGE_HD inline auto step_stochastic(B& theta, B g, B& m, B& v, const AdamScalars& s,
                                       uint64_t seed, int64_t t, Index index) {
  m = first_moment(m, g, s);
  v = second_moment(v, g, s);
  const B u = adamw_update(m, v, theta, s);
  const B before = theta;
  const auto sum = f32_add(to_f32(theta), to_f32(u));
  theta = round_stochastic(sum, rounding_noise16(seed, t, index));
  return edq_term(u, theta, before);
}

// fp32-master: state {master, m, v} fp32; the same lines as above with every rn dropped:
//   torch: m = fma(1−β1, g − m, m)          hf: m = m·β1; m = fma(1−β1, g, m)
//   v = v·β2; v = fma(1−β2, g·g, v)
//   torch: a = (m·(−lr/bc1)) / (sqrt(v)/sqrt(bc2) + eps)
//   hf:    a = (m·(−lr·sqrt(bc2)/bc1)) / (sqrt(v) + eps)
//   u = a − master·(lr·wd); master = master + u
// The caller stores θ = rn(master) (or master itself for fp32 storage).
template <typename F>
COLLAGE_HD inline auto step_fp32_master(F& master, F g, F& m, F& v, const AdamScalars& s) {
  if (s.hf_order) {
    m = f32_mul(m, s.beta1);
    m = f32_fma(s.one_minus_beta1, g, m);
  } else {
    m = f32_fma(s.one_minus_beta1, f32_sub(g, m), m);
  }
  v = f32_mul(v, s.beta2);
  v = f32_fma(s.one_minus_beta2, f32_mul(g, g), v);
  F a;
  if (s.hf_order) {
    const F denom = f32_add(f32_sqrt(v), s.eps);
    a = f32_div(f32_mul(m, s.neg_lr_sqrt_bc2_over_bc1), denom);
  } else {
    const F denom = f32_add(f32_div(f32_sqrt(v), s.sqrt_bc2), s.eps);
    a = f32_div(f32_mul(m, s.neg_lr_over_bc1), denom);
  }
  const F u = f32_sub(a, f32_mul(master, s.lr_wd));
  const F before = master;
  master = f32_add(master, u);
  return edq_term(u, master, before);
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
