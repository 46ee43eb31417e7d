#pragma once
// The EDQ terms of a lane vector (bf16_lanes.h) and their sums: collage_math.h's edq_term
// and EdqAccumulator for kLanes elements at once (host only; AVX2 or AVX-512).
#include <cstdint>

#include "numerics/bf16_lanes.h"
#include "numerics/isa_namespace.h"

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {

// u and the values before/after of kLanes elements; Δ = after − before is formed in double
// by the accumulator, exactly as edq_term does for one element.
struct EdqLanesTerm {
  F32Lanes u, after, before;
};
template <LaneRounding R>
inline EdqLanesTerm edq_term(Bf16LanesOf<R> u, Bf16LanesOf<R> after, Bf16LanesOf<R> before) {
  return {same_lanes<F32Lanes>(u), same_lanes<F32Lanes>(after), same_lanes<F32Lanes>(before)};
}
template <LaneRounding R>
inline EdqLanesTerm edq_term(F32LanesOf<R> u, F32LanesOf<R> after, F32LanesOf<R> before) {
  return {same_lanes<F32Lanes>(u), same_lanes<F32Lanes>(after), same_lanes<F32Lanes>(before)};
}

// EdqAccumulator over lane vectors: Σ Δ·u and Σ u² in kLanes double partial sums (lane i
// sums elements kLanes·j + i), combined in a fixed order by the totals, so a given sequence
// of terms always gives the same bits, on AVX2 and AVX-512 alike. Each term is the scalar
// one: Δ = double(after) − double(before), Δ·u in double, no fma; u ≠ 0 holds for NaN, Δ == 0
// for ±0 but not for inf − inf. Two shortcuts with the same results: u² is exact in double
// (u is a bf16: 16 significant bits, far from double's range limits), so fma(u, u, sum) rounds
// once, as sum + u·u does; and Δ == 0 is tested on the fp32 difference, which is 0 exactly
// where the double one is: for finite values only when after == before (gradual underflow
// makes a difference of distinct floats nonzero; MXCSR's flush-to-zero stays off, as the
// guarded rounding needs too), and inf − inf and NaN are NaN in both.
struct EdqLanesAccumulator {
  static constexpr int kHalf = reg::kWidth / 2;            // doubles per double register
  static constexpr int kDoubleRegisters = kLanes / kHalf;  // register 2k + h: half h of k
  reg::F64 dot[kDoubleRegisters], u_squared[kDoubleRegisters];
  int64_t updated = 0, lost = 0;

  EdqLanesAccumulator() {
    for (int q = 0; q < kDoubleRegisters; q++) dot[q] = u_squared[q] = reg::zero_f64();
  }

  void add(const EdqLanesTerm& term) {
    for_each_register([&](int k) {
      const unsigned u_nonzero = reg::nonzero_bits(term.u.r[k]);
      const unsigned delta_zero = reg::zero_bits(reg::sub(term.after.r[k], term.before.r[k]));
      auto add_half = [&](int half) {
        const int q = 2 * k + half;
        const reg::F64 u = reg::widen_half(term.u.r[k], half);
        const reg::F64 delta = reg::sub(reg::widen_half(term.after.r[k], half),
                                        reg::widen_half(term.before.r[k], half));
        dot[q] = reg::add(dot[q], reg::mul(delta, u));
        u_squared[q] = reg::fma(u, u, u_squared[q]);
      };
      add_half(0), add_half(1);
      updated += __builtin_popcount(u_nonzero);
      lost += __builtin_popcount(u_nonzero & delta_zero);
    });
  }

  // The lane sums added in lane order: ((lane 0 + lane 1) + lane 2) + ...
  double dot_total() const { return lane_sum(dot); }
  double u_squared_total() const { return lane_sum(u_squared); }

 private:
  static double lane_sum(const reg::F64 (&sums)[kDoubleRegisters]) {
    double lanes[kLanes];
    for (int q = 0; q < kDoubleRegisters; q++) reg::store_f64(lanes + kHalf * q, sums[q]);
    double total = 0;
    for (double x : lanes) total += x;
    return total;
  }
};

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
