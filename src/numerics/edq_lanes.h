#pragma once
// The EDQ terms of a lane vector (bf16_lanes.h) and their sums: collage_math.h's edq_term
// and EdqAccumulator for kLanes elements at once (host only, AVX2).
#include <immintrin.h>

#include <cstdint>

#include "numerics/bf16_lanes.h"

namespace collage::math {

// u and the values before/after of kLanes elements; Δ = after − before is formed in double
// by the accumulator, exactly as edq_term does for one element.
struct EdqLanesTerm {
  F32Lanes u, after, before;
};
inline EdqLanesTerm edq_term(Bf16Lanes u, Bf16Lanes after, Bf16Lanes before) {
  return {to_f32(u), to_f32(after), to_f32(before)};
}
inline EdqLanesTerm edq_term(F32Lanes u, F32Lanes after, F32Lanes before) {
  return {u, after, before};
}

// EdqAccumulator over lane vectors: Σ Δ·u and Σ u² in kLanes double partial sums (lane i
// sums elements kLanes·j + i), combined in a fixed order by the totals, so a given sequence
// of terms always gives the same bits. Each term is the scalar one: Δ = double(after) −
// double(before), Δ·u and u·u in double, no fma; u ≠ 0 holds for NaN, Δ == 0 for ±0 but not
// for inf − inf.
struct EdqLanesAccumulator {
  static constexpr int kQuads = kLanes / 4;  // registers of 4 doubles
  __m256d dot[kQuads], u_squared[kQuads];
  int64_t updated = 0, lost = 0;

  EdqLanesAccumulator() {
    for (int q = 0; q < kQuads; q++) dot[q] = u_squared[q] = _mm256_setzero_pd();
  }

  void add(const EdqLanesTerm& term) {
    for_each_register([&](int k) {
      const __m256 u = term.u.r[k];
      const unsigned u_nonzero =
          unsigned(_mm256_movemask_ps(_mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
      unsigned delta_zero = 0;
      auto add_half = [&](int half) {  // lanes 0-3 or 4-7 of register k
        const int q = 2 * k + half;
        const __m256d u_d = _mm256_cvtps_pd(half_of(u, half));
        const __m256d delta = _mm256_sub_pd(_mm256_cvtps_pd(half_of(term.after.r[k], half)),
                                            _mm256_cvtps_pd(half_of(term.before.r[k], half)));
        dot[q] = _mm256_add_pd(dot[q], _mm256_mul_pd(delta, u_d));
        u_squared[q] = _mm256_add_pd(u_squared[q], _mm256_mul_pd(u_d, u_d));
        const __m256d is_zero = _mm256_cmp_pd(delta, _mm256_setzero_pd(), _CMP_EQ_OQ);
        delta_zero |= unsigned(_mm256_movemask_pd(is_zero)) << (4 * half);
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
  static __m128 half_of(__m256 x, int half) {
    return half ? _mm256_extractf128_ps(x, 1) : _mm256_castps256_ps128(x);
  }
  static double lane_sum(const __m256d (&sums)[kQuads]) {
    alignas(32) double lanes[kLanes];
    for (int q = 0; q < kQuads; q++) _mm256_store_pd(lanes + 4 * q, sums[q]);
    double total = 0;
    for (double x : lanes) total += x;
    return total;
  }
};

}  // namespace collage::math
