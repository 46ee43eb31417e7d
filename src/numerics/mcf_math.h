#pragma once
// Multi-component floats (docs/PRECISION.md §3): a value kept as the unevaluated sum x + δx of
// two bf16 numbers, |δx| ≤ ½ ulp(x), and the bf16 operations that maintain it. Every line is one
// rounded operation of bf16_math.h, written as in docs/PRECISION.md §3.
//
// What each guarantees (checked against float64 in tests/optim/mcf_math_test.cpp):
//  - fast2sum(a, b): s + e == a + b exactly when exponent(a) ≥ exponent(b) (so in particular
//    when |a| ≥ |b|) or a == 0. When b's exponent is larger, e can be wrong: for
//    a = 2^-9 + 2^-16, b = 1 it returns (1, 2^-8) instead of (1, 2^-9 + 2^-16).
//  - two_prod(a, b): p + e == a·b exactly when the product's lowest bit is on the bf16 grid
//    (exponent(a) + exponent(b) ≥ −119) and p does not overflow.
//  - grow((x, δx), u): its first error term is fast2sum(x, u)'s (the 3-operation Fast2Sum
//    form, not the 6-operation 2Sum), so it is exact under fast2sum's condition on (x, u):
//    exponent(x) ≥ exponent(u) (e.g. |u| ≤ |x|, the optimizer's usual case) or x == 0. Then
//    x' + δx' == s + rn(δx + e) with s = rn(x + u), e = x + u − s: the only rounding is
//    of δx + e, at δ's scale (≤ ½ ulp(δx + e)); it is error-free when δx + e is a bf16
//    (e.g. δx == 0). The result is renormalised, |δx'| ≤ ½ ulp(x'). With |u| > |x| > 0
//    in a higher binade the error of x + u may be lost (see fast2sum).
//  - mult((x, δx), (bh, bl)) for a renormalised input, bh ∈ [0.5, 1], |bl| ≤ ½ ulp(bh), no
//    underflow: x·bh is split exactly (two_prod); δx·bh, x·bl and their sums are rounded
//    at δ's scale, so |x' + δx' − (x + δx)(bh + bl)| ≤ 5·2^-16·|x| (one plain bf16
//    rounding may cost 2^-8·|x|), renormalised; error-free when δx == 0 and bl == 0.
//
// Each function is a template over the bf16 type B: bfloat (CUDA kernel, scalar host code)
// or Bf16Lanes (the cpu loop, 64 elements per call; bf16_lanes.h). Same lines, same bits.
#include "numerics/bf16_math.h"
#include "numerics/isa_namespace.h"

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {

// The value x + dx. B is bfloat, or Bf16Lanes (bf16_lanes.h: many values at once, host).
template <typename B>
struct McfOf {
  B x;
  B dx;
};
using Mcf = McfOf<bfloat>;

// Fast2Sum(a, b): s = rn(a+b); e = rn(b − rn(s−a)). Both differences are bf16 under the
// condition above, so their roundings are written rn_expect_exact (bf16_math.h): the same bits.
template <typename B>
COLLAGE_HD inline McfOf<B> fast2sum(B a, B b) {
  const B s = add_rn(a, b);
  const B e = sub_rn_expect_exact(b, sub_rn_expect_exact(s, a));
  return {s, e};
}

// TwoProd(a, b) with FMA: p = rn(a·b); e = rn(fma(a, b, −p)).
template <typename B>
COLLAGE_HD inline McfOf<B> two_prod(B a, B b) {
  const B p = mul_rn(a, b);
  const B e = rn_expect_exact(f32_fma(to_f32(a), to_f32(b), -to_f32(p)));
  return {p, e};
}

// Grow((x, δx), u): add a bf16 value to an MCF, then renormalise with fast2sum(s, δx), whose
// error terms are bf16 (there δx is about an ulp of s at most, unless x + u cancels). The first
// Fast2Sum(x, u) is written out with plain rn: in training, u outgrows weights near zero often
// enough that the cpu loop would redo blocks exactly (bf16_lanes.h) more than it gained
// (collage-plus, 120 steps of the demo GPT: 19% of the blocks; none so).
template <typename B>
COLLAGE_HD inline McfOf<B> grow(McfOf<B> v, B u) {
  const B s = add_rn(v.x, u);
  const B dx = add_rn(v.dx, sub_rn(u, sub_rn(s, v.x)));  // the rounding error of x+u joins δx
  return fast2sum(s, dx);
}

// Mult((x, δx), (bh, bl)): multiply an MCF by a constant split into two bf16 parts,
// bh = rn(β), bl = rn(β − bh) (scalars, the same for every element).
template <typename B>
COLLAGE_HD inline McfOf<B> mult(McfOf<B> v, bfloat bh, bfloat bl) {
  const McfOf<B> product = two_prod(v.x, B(bh));  // x·bh = p + e exactly
  B dx = mul_rn(v.dx, B(bh));
  dx = fma_rn(v.x, B(bl), dx);  // x·bl added to δx
  dx = add_rn(dx, product.dx);
  return fast2sum(product.x, dx);
}

// The published reference implementation's in-place Mult (docs/PRECISION.md §8, behind
// optimizer.collage_plus_reference_quirk): x is overwritten by p after the first line, so
// later lines read p where the text says x, e is not the product error, and the final
// renormalisation subtracts rn(x' − x') = 0. Leaves the second moment too small.
template <typename B>
COLLAGE_HD inline McfOf<B> mult_reference_quirk(McfOf<B> v, bfloat bh, bfloat bl) {
  const B p = mul_rn(v.x, B(bh));                              // x := p from here on
  const B e = rn(f32_fma(to_f32(p), to_f32(bh), -to_f32(p)));  // ≈ −(1−bh)·p
  B dx = mul_rn(v.dx, B(bh));
  dx = fma_rn(p, B(bl), dx);  // p·bl, not x·bl
  dx = add_rn(dx, e);
  const B x = add_rn(p, dx);
  return {x, dx};  // δx − rn(x' − x') = δx: no renormalisation
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
