#pragma once
// bf16_math.h on kLanes (64) elements at once, for the cpu optimizer loop (host only, AVX2 +
// FMA).
//
// collage_math.h and mcf_math.h are templates over the bf16 type B: the CUDA kernel and the
// scalar host code instantiate them with bfloat, the cpu loop with Bf16Lanes below. Every
// function here is the lane-wise twin of the scalar function of the same name in
// bf16_math.h and gives the same bits in each lane: the fp32 operations are the packed forms
// (vaddps, vdivps, vsqrtps, vfmadd...) of the scalar instructions the scalar code compiles
// to, IEEE-exact and correctly rounded alike, and the roundings are the same integer
// arithmetic on the fp32 bits. tests/optim/bf16_lanes_test.cpp checks each against the
// scalar one, NaN, ±inf, subnormals and ties included; lanes_step_test.cpp whole steps.
//
// Why explicit lanes instead of letting GCC vectorize the scalar loop: under IEEE semantics
// (no -ffast-math, which this project must not use) GCC 12 cannot. std::sqrt keeps a call
// to sqrtf for errno (-fmath-errno), floating-point work under a branch may not be
// speculated (-ftrapping-math), and `omp simd` reductions over the EDQ's mixed double/int
// sums fail to vectorize; so the element loop stayed scalar (up to 13x slower than
// fp32-master, which moves more bytes).
//
// Why 64 lanes (eight AVX2 registers) rather than 8: a strategy's step is one long chain of
// dependent roundings (collage-plus: ~35, ~8 cycles each), too long for the out-of-order
// window to overlap one group of elements with the next. Eight registers give every line
// eight independent chains; the values that do not fit the 16 registers wait in L1.
// Measured single-threaded on collage-plus: 8 lanes 14.5 ns/element, 16 lanes 5.6, 32 lanes
// 4.0, 64 lanes 3.3, 128 lanes 4.4 (the code outgrows the instruction cache).
//
// Layout: a lane holds its bf16 as the fp32 of the same value (low 16 bits zero), so to_f32
// is free and rn is an integer add and mask; bf16 storage is converted on load and store.
#if !(defined(__AVX2__) && defined(__FMA__))
#error "bf16_lanes.h needs AVX2 and FMA (-march=x86-64-v3); build the scalar path instead"
#endif
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "numerics/bf16_math.h"

namespace collage::math {

constexpr int kLaneRegisters = 8;           // AVX2 registers per lane vector
constexpr int kLanes = 8 * kLaneRegisters;  // elements per lane vector

// Calls f(k) for every register k of a lane vector, unrolled at compile time. As a plain
// loop GCC -O2 does not unroll it, and every operation then runs a loop over a lane vector
// kept in memory (several times slower).
template <typename F>
inline void for_each_register(const F& f) {
  [&]<int... K>(std::integer_sequence<int, K...>) { (f(K), ...); }
  (std::make_integer_sequence<int, kLaneRegisters>());
}

// kLanes fp32 values. Converts implicitly from a float (broadcast), so that the fp32 scalars
// of AdamScalars meet lane vectors in the templates exactly as they meet floats.
struct F32Lanes {
  __m256 r[kLaneRegisters];
  F32Lanes() = default;
  F32Lanes(float x) {
    for_each_register([&](int k) { r[k] = _mm256_set1_ps(x); });
  }
};

// kLanes bf16 values, each kept as the fp32 of the same value. Converts implicitly from a
// scalar bfloat (broadcast: β2's split (bh, bl) in Mult).
struct Bf16Lanes {
  __m256 r[kLaneRegisters];
  Bf16Lanes() = default;
  Bf16Lanes(bfloat x) {
    for_each_register([&](int k) { r[k] = _mm256_set1_ps(to_f32(x)); });
  }
};

// kLanes 32-bit unsigned integers (the stochastic rounding noise).
struct U32Lanes {
  __m256i r[kLaneRegisters];
};

// ---- loads and stores: kLanes consecutive elements, no alignment needed ----

inline Bf16Lanes load_bf16_lanes(const uint16_t* p) {
  Bf16Lanes x;
  for_each_register([&](int k) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * k));
    x.r[k] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  });
  return x;
}
inline void store_bf16_lanes(uint16_t* p, Bf16Lanes x) {
  for_each_register([&](int k) {
    const __m256i high = _mm256_srli_epi32(_mm256_castps_si256(x.r[k]), 16);  // ≤ 0xffff
    const __m128i bits =
        _mm_packus_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8 * k), bits);
  });
}
inline F32Lanes load_f32_lanes(const float* p) {
  F32Lanes x;
  for_each_register([&](int k) { x.r[k] = _mm256_loadu_ps(p + 8 * k); });
  return x;
}
inline void store_f32_lanes(float* p, F32Lanes x) {
  for_each_register([&](int k) { _mm256_storeu_ps(p + 8 * k, x.r[k]); });
}

// ---- the rounding model ----

inline F32Lanes to_f32(Bf16Lanes x) {
  F32Lanes out;
  for_each_register([&](int k) { out.r[k] = x.r[k]; });
  return out;
}

namespace lanes_detail {

// rn of bf16_math.h on one register: the same carry trick on the bits; NaN -> 0x7fff as a
// select on an unordered compare instead of a branch.
inline __m256 rn(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i carried =
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lowest_kept);
  const __m256 rounded =
      _mm256_castsi256_ps(_mm256_and_si256(carried, _mm256_set1_epi32(int(0xffff0000u))));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // all ones in NaN lanes
  return _mm256_blendv_ps(rounded, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff0000)), nan);
}

// op applied to each register of the operands.
template <typename Op, typename... Lanes>
inline F32Lanes each_register(const Op& op, const Lanes&... in) {
  F32Lanes out;
  for_each_register([&](int k) { out.r[k] = op(in.r[k]...); });
  return out;
}

}  // namespace lanes_detail

inline Bf16Lanes rn(F32Lanes x) {
  Bf16Lanes out;
  for_each_register([&](int k) { out.r[k] = lanes_detail::rn(x.r[k]); });
  return out;
}

// ---- one IEEE fp32 operation each, lane-wise ----
using lanes_detail::each_register;
inline F32Lanes f32_add(F32Lanes a, F32Lanes b) {
  return each_register([](__m256 x, __m256 y) { return _mm256_add_ps(x, y); }, a, b);
}
inline F32Lanes f32_sub(F32Lanes a, F32Lanes b) {
  return each_register([](__m256 x, __m256 y) { return _mm256_sub_ps(x, y); }, a, b);
}
inline F32Lanes f32_mul(F32Lanes a, F32Lanes b) {
  return each_register([](__m256 x, __m256 y) { return _mm256_mul_ps(x, y); }, a, b);
}
inline F32Lanes f32_div(F32Lanes a, F32Lanes b) {
  return each_register([](__m256 x, __m256 y) { return _mm256_div_ps(x, y); }, a, b);
}
inline F32Lanes f32_sqrt(F32Lanes a) {
  return each_register([](__m256 x) { return _mm256_sqrt_ps(x); }, a);
}
inline F32Lanes f32_fma(F32Lanes a, F32Lanes b, F32Lanes c) {
  return each_register([](__m256 x, __m256 y, __m256 z) { return _mm256_fmadd_ps(x, y, z); }, a, b,
                       c);
}
// −x flips the sign bit, as the scalar −x does (NaN included).
inline F32Lanes operator-(F32Lanes a) {
  return each_register([](__m256 x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }, a);
}

// ---- one line each (docs/PRECISION.md §2) ----
inline Bf16Lanes add_rn(Bf16Lanes a, Bf16Lanes b) { return rn(f32_add(to_f32(a), to_f32(b))); }
inline Bf16Lanes sub_rn(Bf16Lanes a, Bf16Lanes b) { return rn(f32_sub(to_f32(a), to_f32(b))); }
inline Bf16Lanes mul_rn(Bf16Lanes a, Bf16Lanes b) { return rn(f32_mul(to_f32(a), to_f32(b))); }
inline Bf16Lanes div_rn(Bf16Lanes a, Bf16Lanes b) { return rn(f32_div(to_f32(a), to_f32(b))); }
inline Bf16Lanes sqrt_rn(Bf16Lanes a) { return rn(f32_sqrt(to_f32(a))); }
inline Bf16Lanes fma_rn(Bf16Lanes a, Bf16Lanes b, Bf16Lanes c) {
  return rn(f32_fma(to_f32(a), to_f32(b), to_f32(c)));
}

// ---- stochastic rounding ----

// The element indices first, first+1, ..., first+kLanes−1 of one lane vector.
struct LaneIndices {
  int64_t first;
};

namespace lanes_detail {

// a·b mod 2^64 in each 64-bit lane. AVX2 has no 64-bit multiply: with a = ah·2^32 + al,
// b = bh·2^32 + bl, a·b mod 2^64 = al·bl + ((ah·bl + al·bh) mod 2^32)·2^32.
inline __m256i mul64(__m256i a, uint64_t b) {
  const __m256i b_lo = _mm256_set1_epi64x(int64_t(b & 0xffffffffu));
  const __m256i b_hi = _mm256_set1_epi64x(int64_t(b >> 32));
  const __m256i low = _mm256_mul_epu32(a, b_lo);  // al·bl, all 64 bits
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo), _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

// mix64 of bf16_math.h on four 64-bit lanes.
inline __m256i mix64(__m256i z) {
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ull);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94d049bb133111ebull);
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

}  // namespace lanes_detail

// rounding_noise16(seed, t, first + i) in lane i (indices wrap modulo 2^64, as in the scalar
// function's uint64_t(index)). The rounds keyed by (seed, t) are the same
// for every lane and run once, in scalar; the last round, keyed by the index, runs on 64-bit
// lanes, four at a time.
inline U32Lanes rounding_noise16(uint64_t seed, int64_t t, LaneIndices indices) {
  const uint64_t key = mix64(mix64(seed ^ 0x9e3779b97f4a7c15ull) + uint64_t(t));
  const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  U32Lanes noise;
  for_each_register([&](int k) {
    const __m256i base =
        _mm256_set1_epi64x(int64_t(key + uint64_t(indices.first) + uint64_t(8 * k)));
    const __m256i h0 = lanes_detail::mix64(_mm256_add_epi64(base, _mm256_setr_epi64x(0, 1, 2, 3)));
    const __m256i h1 = lanes_detail::mix64(_mm256_add_epi64(base, _mm256_setr_epi64x(4, 5, 6, 7)));
    // h >> 48 fits 32 bits: gather the low 32 bits of the four 64-bit lanes of each half.
    const __m256i n0 = _mm256_permutevar8x32_epi32(_mm256_srli_epi64(h0, 48), low_dwords);
    const __m256i n1 = _mm256_permutevar8x32_epi32(_mm256_srli_epi64(h1, 48), low_dwords);
    noise.r[k] = _mm256_inserti128_si256(n0, _mm256_castsi256_si128(n1), 1);
  });
  return noise;
}

// round_stochastic of bf16_math.h, lane-wise: add the noise to the bits and truncate; lanes
// holding ±inf or NaN take rn(x) instead (a select, not a branch).
inline Bf16Lanes round_stochastic(F32Lanes x, U32Lanes noise16) {
  Bf16Lanes out;
  const __m256i exponent_bits = _mm256_set1_epi32(0x7f800000);
  for_each_register([&](int k) {
    const __m256i u = _mm256_castps_si256(x.r[k]);
    const __m256i noise = _mm256_and_si256(noise16.r[k], _mm256_set1_epi32(0xffff));
    const __m256i truncated =
        _mm256_and_si256(_mm256_add_epi32(u, noise), _mm256_set1_epi32(int(0xffff0000u)));
    const __m256i special =
        _mm256_cmpeq_epi32(_mm256_and_si256(u, exponent_bits), exponent_bits);  // inf, NaN
    const __m256i rounded = _mm256_castps_si256(lanes_detail::rn(x.r[k]));
    out.r[k] = _mm256_castsi256_ps(_mm256_blendv_epi8(truncated, rounded, special));
  });
  return out;
}

}  // namespace collage::math
