#pragma once
// bf16_math.h on kLanes (64) elements at once, for the cpu optimizer loop (host only; AVX2 +
// FMA, or AVX-512: lane_registers.h).
//
// collage_math.h and mcf_math.h are templates over the bf16 type B: the CUDA kernel and the
// scalar host code instantiate them with bfloat, the cpu loop with Bf16Lanes below. Every
// function here is the lane-wise twin of the scalar function of the same name in
// bf16_math.h and gives the same bits in each lane: the fp32 operations are the packed forms
// (vaddps, vdivps, vsqrtps, vfmadd...) of the scalar instructions the scalar code compiles
// to, IEEE-exact and correctly rounded alike, and the roundings are the same integer
// arithmetic on the fp32 bits. tests/optim/bf16_lanes_test.cpp checks each against the
// scalar one, NaN, ±inf, subnormals and ties included; lanes_step_test.cpp whole steps;
// cpu_optimizer_isa_test.cpp the AVX-512 compilation against the baseline one.
//
// Why explicit lanes instead of letting GCC vectorize the scalar loop: under IEEE semantics
// (no -ffast-math, which this project must not use) GCC 12 cannot. std::sqrt keeps a call
// to sqrtf for errno (-fmath-errno), floating-point work under a branch may not be
// speculated (-ftrapping-math), and `omp simd` reductions over the EDQ's mixed double/int
// sums fail to vectorize; so the element loop stayed scalar (up to 13x slower than
// fp32-master, which moves more bytes).
//
// Why 64 lanes (eight AVX2 registers, four AVX-512 ones) rather than one register: a
// strategy's step is one long chain of dependent roundings (collage-plus: ~35, ~8 cycles
// each), too long for the out-of-order window to overlap one group of elements with the
// next. Several registers give every line independent chains; the values that do not fit
// the register file wait in L1. Measured single-threaded on collage-plus with AVX2: 8 lanes
// 14.5 ns/element, 16 lanes 5.6, 32 lanes 4.0, 64 lanes 3.3, 128 lanes 4.4 (the code outgrows
// the instruction cache). kLanes is the same on both ISAs, so the EDQ's lane sums
// (edq_lanes.h) are added in the same order and the two compilations give the same bits.
//
// Layout: a lane holds its bf16 as the fp32 of the same value (low 16 bits zero), so to_f32
// is free and rn works on fp32 registers; bf16 storage is converted on load and store.
#include <cstdint>
#include <utility>

#include "numerics/bf16_math.h"
#include "numerics/isa_namespace.h"
#include "numerics/lane_registers.h"

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {

constexpr int kLanes = 64;                            // elements per lane vector
constexpr int kLaneRegisters = kLanes / reg::kWidth;  // 8 (AVX2) or 4 (AVX-512)
static_assert(kLanes % (2 * reg::kWidth) == 0, "loads and stores go by pairs of registers");

// Calls f(k) for every register k of a lane vector, unrolled at compile time. As a plain
// loop GCC -O2 does not unroll it, and every operation then runs a loop over a lane vector
// kept in memory (several times slower).
template <typename F>
inline void for_each_register(const F& f) {
  [&]<int... K>(std::integer_sequence<int, K...>) { (f(K), ...); }
  (std::make_integer_sequence<int, kLaneRegisters>());
}

// How a lane vector's rn rounds. Both give rn's bits wherever they are used:
//   exact    reg::rn, integer arithmetic on the bits, right for every input;
//   guarded  reg::rn_normal, three instructions, right for the values training meets
//            (finite normal below 2^112, ±0). On any other value it raises an exception flag,
//            so the caller runs the block guarded first and redoes it exactly if a flag
//            is up (backend/cpu/optimizer_chunks.cpp, guarded_in_place; docs/ARCHITECTURE.md,
//            "The cpu optimizer"). rn_expect_exact does not round at all: it records the
//            value, and the caller redoes the block if one was not a bf16.
enum class LaneRounding { exact, guarded };

template <LaneRounding R>
struct Bf16LanesOf;

// kLanes fp32 values. Converts implicitly from a float (broadcast), so that the fp32 scalars
// of AdamScalars meet lane vectors in the templates exactly as they meet floats. The
// operations are friends defined here, found through their lane arguments, so a float
// argument beside a lane vector converts as it would for a plain function.
template <LaneRounding R>
struct F32LanesOf {
  reg::F32 r[kLaneRegisters];
  F32LanesOf() = default;
  F32LanesOf(float x) {
    for_each_register([&](int k) { r[k] = reg::broadcast(x); });
  }

  // op applied to each register of the operands.
  template <typename Op, typename... Lanes>
  static F32LanesOf each_register(const Op& op, const Lanes&... in) {
    F32LanesOf out;
    for_each_register([&](int k) { out.r[k] = op(in.r[k]...); });
    return out;
  }

  // ---- one IEEE fp32 operation each, lane-wise ----
  friend F32LanesOf f32_add(F32LanesOf a, F32LanesOf b) {
    return each_register([](reg::F32 x, reg::F32 y) { return reg::add(x, y); }, a, b);
  }
  friend F32LanesOf f32_sub(F32LanesOf a, F32LanesOf b) {
    return each_register([](reg::F32 x, reg::F32 y) { return reg::sub(x, y); }, a, b);
  }
  friend F32LanesOf f32_mul(F32LanesOf a, F32LanesOf b) {
    return each_register([](reg::F32 x, reg::F32 y) { return reg::mul(x, y); }, a, b);
  }
  friend F32LanesOf f32_div(F32LanesOf a, F32LanesOf b) {
    return each_register([](reg::F32 x, reg::F32 y) { return reg::div(x, y); }, a, b);
  }
  friend F32LanesOf f32_sqrt(F32LanesOf a) {
    return each_register([](reg::F32 x) { return reg::sqrt(x); }, a);
  }
  friend F32LanesOf f32_fma(F32LanesOf a, F32LanesOf b, F32LanesOf c) {
    return each_register([](reg::F32 x, reg::F32 y, reg::F32 z) { return reg::fma(x, y, z); }, a, b,
                         c);
  }
  // −x flips the sign bit, as the scalar −x does (NaN included).
  friend F32LanesOf operator-(F32LanesOf a) {
    return each_register([](reg::F32 x) { return reg::negate(x); }, a);
  }

  // ---- the rounding model ----
  friend Bf16LanesOf<R> rn(F32LanesOf x) {
    Bf16LanesOf<R> out;
    for_each_register([&](int k) {
      out.r[k] = R == LaneRounding::exact ? reg::rn(x.r[k]) : reg::rn_normal(x.r[k]);
    });
    return out;
  }
  // rn of a value its line makes a bf16 already (bf16_math.h): guarded lanes keep x as it is
  // and record its bits, which the caller checks with the flags (lane_registers.h,
  // expected_exact_bits); exact lanes round it.
  friend Bf16LanesOf<R> rn_expect_exact(F32LanesOf x) {
    if constexpr (R == LaneRounding::exact) {
      return rn(x);
    } else {
      Bf16LanesOf<R> out;
      for_each_register([&](int k) { reg::record_expected_exact(out.r[k] = x.r[k]); });
      return out;
    }
  }
};

// kLanes bf16 values, each kept as the fp32 of the same value. Converts implicitly from a
// scalar bfloat (broadcast: β2's split (bh, bl) in Mult).
template <LaneRounding R>
struct Bf16LanesOf {
  reg::F32 r[kLaneRegisters];
  Bf16LanesOf() = default;
  Bf16LanesOf(bfloat x) {
    for_each_register([&](int k) { r[k] = reg::broadcast(to_f32(x)); });
  }

  friend F32LanesOf<R> to_f32(Bf16LanesOf x) {
    F32LanesOf<R> out;
    for_each_register([&](int k) { out.r[k] = x.r[k]; });
    return out;
  }

  // ---- one line each (docs/PRECISION.md §2) ----
  friend Bf16LanesOf add_rn(Bf16LanesOf a, Bf16LanesOf b) {
    return rn(f32_add(to_f32(a), to_f32(b)));
  }
  friend Bf16LanesOf sub_rn(Bf16LanesOf a, Bf16LanesOf b) {
    return rn(f32_sub(to_f32(a), to_f32(b)));
  }
  friend Bf16LanesOf sub_rn_expect_exact(Bf16LanesOf a, Bf16LanesOf b) {
    return rn_expect_exact(f32_sub(to_f32(a), to_f32(b)));
  }
  friend Bf16LanesOf mul_rn(Bf16LanesOf a, Bf16LanesOf b) {
    return rn(f32_mul(to_f32(a), to_f32(b)));
  }
  friend Bf16LanesOf div_rn(Bf16LanesOf a, Bf16LanesOf b) {
    return rn(f32_div(to_f32(a), to_f32(b)));
  }
  friend Bf16LanesOf sqrt_rn(Bf16LanesOf a) { return rn(f32_sqrt(to_f32(a))); }
  friend Bf16LanesOf fma_rn(Bf16LanesOf a, Bf16LanesOf b, Bf16LanesOf c) {
    return rn(f32_fma(to_f32(a), to_f32(b), to_f32(c)));
  }

  // lookup_by_bf16 of bf16_math.h in every lane (a gather).
  friend F32LanesOf<R> lookup_by_bf16(const float* table, Bf16LanesOf x) {
    F32LanesOf<R> out;
    for_each_register([&](int k) { out.r[k] = reg::lookup_by_bf16(table, x.r[k]); });
    return out;
  }
};

using F32Lanes = F32LanesOf<LaneRounding::exact>;
using Bf16Lanes = Bf16LanesOf<LaneRounding::exact>;
using GuardedF32Lanes = F32LanesOf<LaneRounding::guarded>;
using GuardedBf16Lanes = Bf16LanesOf<LaneRounding::guarded>;

// The same registers under the other rounding (Lanes: F32LanesOf or Bf16LanesOf).
template <typename To, typename From>
inline To same_lanes(const From& x) {
  To out;
  for_each_register([&](int k) { out.r[k] = x.r[k]; });
  return out;
}

// kLanes 32-bit unsigned integers (the stochastic rounding noise).
struct U32Lanes {
  reg::I32 r[kLaneRegisters];
};

// ---- loads and stores: kLanes consecutive elements, no alignment needed ----

template <LaneRounding R = LaneRounding::exact>
inline Bf16LanesOf<R> load_bf16_lanes(const uint16_t* p) {
  Bf16LanesOf<R> x;
  for_each_register([&](int k) {
    if (k % 2 == 0) reg::load_bf16_pair(p + reg::kWidth * k, x.r[k], x.r[k + 1]);
  });
  return x;
}
template <LaneRounding R>
inline void store_bf16_lanes(uint16_t* p, Bf16LanesOf<R> x) {
  for_each_register([&](int k) {
    if (k % 2 == 0) reg::store_bf16_pair(p + reg::kWidth * k, x.r[k], x.r[k + 1]);
  });
}
template <LaneRounding R = LaneRounding::exact>
inline F32LanesOf<R> load_f32_lanes(const float* p) {
  F32LanesOf<R> x;
  for_each_register([&](int k) { x.r[k] = reg::load_f32(p + reg::kWidth * k); });
  return x;
}
template <LaneRounding R>
inline void store_f32_lanes(float* p, F32LanesOf<R> x) {
  for_each_register([&](int k) { reg::store_f32(p + reg::kWidth * k, x.r[k]); });
}

// ---- stochastic rounding ----

// The element indices first, first+1, ..., first+kLanes−1 of one lane vector.
struct LaneIndices {
  int64_t first;
};

// rounding_noise16(seed, t, first + i) in lane i (indices wrap modulo 2^64, as in the scalar
// function's uint64_t(index)). The rounds keyed by (seed, t) are the same for every lane and
// run once, in scalar; the last round, keyed by the index, runs on 64-bit lanes.
inline U32Lanes rounding_noise16(uint64_t seed, int64_t t, LaneIndices indices) {
  const uint64_t key = mix64(mix64(seed ^ 0x9e3779b97f4a7c15ull) + uint64_t(t));
  U32Lanes noise;
  for_each_register([&](int k) {
    noise.r[k] = reg::noise16(key + uint64_t(indices.first) + uint64_t(reg::kWidth * k));
  });
  return noise;
}

// round_stochastic of bf16_math.h, lane-wise, with the noise of rounding_noise16 (below 2^16):
// add the noise to the bits and truncate; NaN lanes become the canonical NaN (a select, not a
// branch), as rn(x) makes them in the scalar function.
template <LaneRounding R>
inline Bf16LanesOf<R> round_stochastic(F32LanesOf<R> x, U32Lanes noise16) {
  Bf16LanesOf<R> out;
  for_each_register([&](int k) { out.r[k] = reg::round_stochastic(x.r[k], noise16.r[k]); });
  return out;
}

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
