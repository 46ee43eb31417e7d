#pragma once
// One vector register of the cpu optimizer's lane vectors (bf16_lanes.h, edq_lanes.h), as the
// few operations those headers need: AVX2 (8 fp32 lanes) or AVX-512 (16), whichever the
// translation unit is compiled for. Everything above this file is written once for both; each
// function here has the same lane-wise result on either ISA, and bf16_lanes.h's comments say
// which scalar function of bf16_math.h each one twins.
//
// AVX-512 means x86-64-v4 (AVX512F, BW, DQ, VL): 64-bit integer multiplies (DQ) for the
// stochastic-rounding hash, 16-bit packing (BW), mask registers for selects.
#if !(defined(__AVX2__) && defined(__FMA__))
#error "lane_registers.h needs AVX2 and FMA (-march=x86-64-v3 or above)"
#endif
#include <immintrin.h>

#include <cstdint>

#include "numerics/isa_namespace.h"

namespace collage::math {
inline namespace COLLAGE_ISA_NAMESPACE {
namespace reg {

// The splitmix64 constants of bf16_math.h's mix64.
constexpr uint64_t kMix1 = 0xbf58476d1ce4e5b9ull, kMix2 = 0x94d049bb133111ebull;

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)

constexpr const char* kIsa = "AVX-512";
constexpr int kWidth = 16;  // fp32 lanes per register
using F32 = __m512;
using I32 = __m512i;
using F64 = __m512d;  // kWidth / 2 doubles: one half of an F32, widened

inline F32 broadcast(float x) { return _mm512_set1_ps(x); }
inline F32 add(F32 a, F32 b) { return _mm512_add_ps(a, b); }
inline F32 sub(F32 a, F32 b) { return _mm512_sub_ps(a, b); }
inline F32 mul(F32 a, F32 b) { return _mm512_mul_ps(a, b); }
inline F32 div(F32 a, F32 b) { return _mm512_div_ps(a, b); }
inline F32 sqrt(F32 a) { return _mm512_sqrt_ps(a); }
inline F32 fma(F32 a, F32 b, F32 c) { return _mm512_fmadd_ps(a, b, c); }
inline F32 bitwise_or(F32 a, F32 b) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
inline F32 negate(F32 a) {  // flips the sign bit, NaN included
  return _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(int(0x80000000u))));
}
inline F32 zero_f32() { return _mm512_setzero_ps(); }
// A mask register's bits as an integer, moved by a kmov that the compiler cannot see into.
// GCC 12 converts a __mmask16 to unsigned wrongly where it spills the mask: at -O1 with
// -mtune=rocketlake (the sanitized build on an Intel VM) it stored the mask with a 16-bit kmovw
// and read the slot back as 32 bits, so the upper half held whatever was on the stack, and the
// EDQ's count of updated elements came out 70% too high (tests/optim/cpu_strategy_step_test.cpp
// caught it). Every mask that this file turns into an integer goes through here.
inline unsigned mask_bits(__mmask16 mask) {
  unsigned bits;
  asm("kmovw %1, %0" : "=r"(bits) : "k"(mask));
  return bits;
}
// Whether any lane has a bit set in its low 16 bits (a lane that is not a bf16).
inline bool any_low_half(F32 x) {
  return mask_bits(_mm512_test_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(0xffff))) != 0;
}

// kWidth bf16 at p (no alignment needed) as the fp32 of the same value; store_bf16_pair is the
// way back, two registers at a time, which must hold bf16 values (low 16 bits zero).
inline F32 load_bf16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
// 2·kWidth bf16 at p into two registers, a's lanes then b's: one load, and one word permute each
// that puts word i of its half into the high half of lane i and zeroes the low halves. Loading
// each register alone takes a widening load and a shift: kahan's loop was 3% slower in cache on
// the Zen 5 VM, bf16's 2% (docs/ARCHITECTURE.md, "What is left on Zen 5").
inline void load_bf16_pair(const uint16_t* p, F32& a, F32& b) {
  const __m512i bits = _mm512_loadu_si512(p);
  const __mmask32 high_halves = 0xaaaaaaaau;
  const __m512i first_half =  // word 2i+1 <- word i
      _mm512_setr_epi32(0x00000, 0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x60000, 0x70000,
                        0x80000, 0x90000, 0xa0000, 0xb0000, 0xc0000, 0xd0000, 0xe0000, 0xf0000);
  const __m512i second_half = _mm512_add_epi32(first_half, _mm512_set1_epi32(0x100000));
  a = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(high_halves, first_half, bits));
  b = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(high_halves, second_half, bits));
}
// 2·kWidth bf16: a's lanes, then b's. One two-source word permute picks the high halves, where
// storing each register alone takes a shift and a narrowing move.
inline void store_bf16_pair(uint16_t* p, F32 a, F32 b) {
  const __m512i high_halves =
      _mm512_setr_epi32(0x00030001, 0x00070005, 0x000b0009, 0x000f000d, 0x00130011, 0x00170015,
                        0x001b0019, 0x001f001d, 0x00230021, 0x00270025, 0x002b0029, 0x002f002d,
                        0x00330031, 0x00370035, 0x003b0039, 0x003f003d);
  _mm512_storeu_si512(
      p, _mm512_permutex2var_epi16(_mm512_castps_si512(a), high_halves, _mm512_castps_si512(b)));
}
inline F32 load_f32(const float* p) { return _mm512_loadu_ps(p); }
inline void store_f32(float* p, F32 x) { _mm512_storeu_ps(p, x); }
// Lane i: table[b], where b is the 16 bits of the bf16 value x holds in lane i (x's high half).
inline F32 lookup_by_bf16(const float* table, F32 x) {
  return _mm512_i32gather_ps(_mm512_srli_epi32(_mm512_castps_si512(x), 16), table, 4);
}

// rn of bf16_math.h: the carry trick on the bits, u + 0x7fff + (bit 16 of u), the last 1 added
// under a mask; NaN lanes -> 0x7fff, merged by mask into the final `and`. Five instructions
// where AVX2 takes seven.
inline F32 rn(F32 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i below_half = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  const __mmask16 lowest_kept = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
  const __m512i carried =
      _mm512_mask_add_epi32(below_half, lowest_kept, below_half, _mm512_set1_epi32(1));
  const __mmask16 number = _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q);
  return _mm512_castsi512_ps(_mm512_mask_and_epi32(_mm512_set1_epi32(0x7fff0000), number, carried,
                                                   _mm512_set1_epi32(int(0xffff0000u))));
}

// rn for a finite normal x below 2^112 in magnitude, or ±0, in three instructions
// (docs/ARCHITECTURE.md, "The cpu optimizer"): g = RN(65535·x) is 65536·x − x rounded at the
// bf16 ulp of x scaled by 2^16, so 65536·x − g (one fma, exact) is x rounded to bf16, ties to
// even; the or puts back the sign of a −0 (the fma gives +0). Any other x raises a
// floating-point exception flag that guarded_flags() reports: a subnormal x DE (denormal
// operand), a larger x OE (g overflows), ±inf IE (inf − inf). NaN raises none: NaN inputs are
// found before (unusual_bits). tests/optim/bf16_lanes_test.cpp checks both halves of this.
inline F32 rn_normal(F32 x) {
  const __m512 g = _mm512_mul_ps(x, _mm512_set1_ps(65535.0f));
  const __m512 h = _mm512_fmsub_ps(_mm512_set1_ps(65536.0f), x, g);
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(  // h | (x & sign)
      _mm512_castps_si512(h), _mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)), 0xf8));
}
// Bit i set where lane i is NaN, ±inf or subnormal (one vfpclassps).
inline unsigned unusual_bits(F32 x) { return mask_bits(_mm512_fpclass_ps_mask(x, 0xb9)); }

// Lane i: mix64(base + i) >> 48, the last round of rounding_noise16 (bf16_math.h). mix64 ends
// with z ^ (z >> 31), which leaves bits 48..63 as they are (z >> 31 has no bits there), so the
// lanes skip it: the same 16 bits.
inline I32 noise16(uint64_t base) {
  auto mix64_high_bits = [](__m512i z) {
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                           _mm512_set1_epi64(int64_t(kMix1)));
    return _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                              _mm512_set1_epi64(int64_t(kMix2)));
  };
  const __m512i first = _mm512_set1_epi64(int64_t(base));
  const __m512i h0 =
      mix64_high_bits(_mm512_add_epi64(first, _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)));
  const __m512i h1 =
      mix64_high_bits(_mm512_add_epi64(first, _mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15)));
  // The high 32 bits of each 64-bit lane, h0's then h1's (dwords 1, 3, ..., 31 of the pair),
  // shifted down by 16: h >> 48.
  const __m512i high_dwords =
      _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_srli_epi32(_mm512_permutex2var_epi32(h0, high_dwords, h1), 16);
}

// round_stochastic of bf16_math.h, for noise16 below 2^16 (as noise16() makes it): add the noise
// to the bits and truncate. The scalar function sends ±inf and NaN through rn; truncating
// ±inf + noise gives ±inf too, so only NaN lanes need rn's answer, the canonical 0x7fff.
inline F32 round_stochastic(F32 x, I32 noise16) {
  const __m512i truncated = _mm512_and_si512(_mm512_add_epi32(_mm512_castps_si512(x), noise16),
                                             _mm512_set1_epi32(int(0xffff0000u)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(truncated, nan, _mm512_set1_epi32(0x7fff0000)));
}

// EDQ: half 0 or 1 of x (lanes 0..7, 8..15) widened to double, exactly.
inline F64 widen_half(F32 x, int half) {
  return _mm512_cvtps_pd(half ? _mm512_extractf32x8_ps(x, 1) : _mm512_castps512_ps256(x));
}
inline F64 zero_f64() { return _mm512_setzero_pd(); }
inline F64 add(F64 a, F64 b) { return _mm512_add_pd(a, b); }
inline F64 sub(F64 a, F64 b) { return _mm512_sub_pd(a, b); }
inline F64 mul(F64 a, F64 b) { return _mm512_mul_pd(a, b); }
inline F64 fma(F64 a, F64 b, F64 c) { return _mm512_fmadd_pd(a, b, c); }
inline void store_f64(double* p, F64 x) { _mm512_storeu_pd(p, x); }
// Bit i set where lane i is ≠ 0 (NaN included) / == 0 (±0; NaN not).
inline unsigned nonzero_bits(F32 x) {
  return mask_bits(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ));
}
inline unsigned zero_bits(F32 x) {
  return mask_bits(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ));
}

#else  // AVX2 + FMA

constexpr const char* kIsa = "AVX2";
constexpr int kWidth = 8;
using F32 = __m256;
using I32 = __m256i;
using F64 = __m256d;

inline F32 broadcast(float x) { return _mm256_set1_ps(x); }
inline F32 add(F32 a, F32 b) { return _mm256_add_ps(a, b); }
inline F32 sub(F32 a, F32 b) { return _mm256_sub_ps(a, b); }
inline F32 mul(F32 a, F32 b) { return _mm256_mul_ps(a, b); }
inline F32 div(F32 a, F32 b) { return _mm256_div_ps(a, b); }
inline F32 sqrt(F32 a) { return _mm256_sqrt_ps(a); }
inline F32 fma(F32 a, F32 b, F32 c) { return _mm256_fmadd_ps(a, b, c); }
inline F32 bitwise_or(F32 a, F32 b) { return _mm256_or_ps(a, b); }
inline F32 negate(F32 a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
inline F32 zero_f32() { return _mm256_setzero_ps(); }
inline bool any_low_half(F32 x) {
  return !_mm256_testz_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0xffff));
}

inline F32 load_bf16(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
// Each register alone: loading the pair with one qword permute and two word unpacks instead
// measured the same on the Zen 5 VM's AVX2 loop.
inline void load_bf16_pair(const uint16_t* p, F32& a, F32& b) {
  a = load_bf16(p), b = load_bf16(p + kWidth);
}
// Two registers: the packs interleave 128-bit halves (a0 b0 a1 b1), one permute orders them.
inline void store_bf16_pair(uint16_t* p, F32 a, F32 b) {
  const __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 16),
                                             _mm256_srli_epi32(_mm256_castps_si256(b), 16));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xd8));
}
inline F32 load_f32(const float* p) { return _mm256_loadu_ps(p); }
inline void store_f32(float* p, F32 x) { _mm256_storeu_ps(p, x); }
inline F32 lookup_by_bf16(const float* table, F32 x) {
  return _mm256_i32gather_ps(table, _mm256_srli_epi32(_mm256_castps_si256(x), 16), 4);
}

// rn: the carry trick; NaN -> 0x7fff as a select on an unordered compare.
inline F32 rn(F32 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i carried =
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lowest_kept);
  const __m256 rounded =
      _mm256_castsi256_ps(_mm256_and_si256(carried, _mm256_set1_epi32(int(0xffff0000u))));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // all ones in NaN lanes
  return _mm256_blendv_ps(rounded, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff0000)), nan);
}

// rn_normal as above; the sign goes back with an and and an or. The AVX2 loop uses it for
// collage-plus only (optimizer_chunks.cpp, Bf16Adam::Lanes says why).
inline F32 rn_normal(F32 x) {
  const __m256 g = _mm256_mul_ps(x, _mm256_set1_ps(65535.0f));
  const __m256 h = _mm256_fmsub_ps(_mm256_set1_ps(65536.0f), x, g);
  return _mm256_or_ps(h, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
}
// Bit i set where lane i is NaN. AVX2 has no vfpclassps; the guarded block finds ±inf by the
// IE that rn_normal raises, subnormals by the DE of its step 1's sum (optimizer_chunks.cpp).
inline unsigned unusual_bits(F32 x) {
  return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}

// AVX2 has no 64-bit multiply: with a = ah·2^32 + al, b = bh·2^32 + bl,
// a·b mod 2^64 = al·bl + ((ah·bl + al·bh) mod 2^32)·2^32.
inline __m256i mul64(__m256i a, uint64_t b) {
  const __m256i b_lo = _mm256_set1_epi64x(int64_t(b & 0xffffffffu));
  const __m256i b_hi = _mm256_set1_epi64x(int64_t(b >> 32));
  const __m256i low = _mm256_mul_epu32(a, b_lo);  // al·bl, all 64 bits
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo), _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

inline I32 noise16(uint64_t base) {
  auto mix64_high_bits = [](__m256i z) {
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), kMix1);
    return mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), kMix2);
  };
  const __m256i first = _mm256_set1_epi64x(int64_t(base));
  const __m256i h0 = mix64_high_bits(_mm256_add_epi64(first, _mm256_setr_epi64x(0, 1, 2, 3)));
  const __m256i h1 = mix64_high_bits(_mm256_add_epi64(first, _mm256_setr_epi64x(4, 5, 6, 7)));
  // h >> 48 fits 32 bits: gather the low 32 bits of the four 64-bit lanes of each half.
  const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m256i n0 = _mm256_permutevar8x32_epi32(_mm256_srli_epi64(h0, 48), low_dwords);
  const __m256i n1 = _mm256_permutevar8x32_epi32(_mm256_srli_epi64(h1, 48), low_dwords);
  return _mm256_inserti128_si256(n0, _mm256_castsi256_si128(n1), 1);
}

inline F32 round_stochastic(F32 x, I32 noise16) {
  const __m256i truncated = _mm256_and_si256(_mm256_add_epi32(_mm256_castps_si256(x), noise16),
                                             _mm256_set1_epi32(int(0xffff0000u)));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // all ones in NaN lanes
  return _mm256_blendv_ps(_mm256_castsi256_ps(truncated),
                          _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff0000)), nan);
}
inline F64 widen_half(F32 x, int half) {
  return _mm256_cvtps_pd(half ? _mm256_extractf128_ps(x, 1) : _mm256_castps256_ps128(x));
}
inline F64 zero_f64() { return _mm256_setzero_pd(); }
inline F64 add(F64 a, F64 b) { return _mm256_add_pd(a, b); }
inline F64 sub(F64 a, F64 b) { return _mm256_sub_pd(a, b); }
inline F64 mul(F64 a, F64 b) { return _mm256_mul_pd(a, b); }
inline F64 fma(F64 a, F64 b, F64 c) { return _mm256_fmadd_pd(a, b, c); }
inline void store_f64(double* p, F64 x) { _mm256_storeu_pd(p, x); }
inline unsigned nonzero_bits(F32 x) {
  return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
}
inline unsigned zero_bits(F32 x) {
  return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ)));
}

#endif

// ---- reading ahead ----
// One core's loads alone can leave DRAM's bandwidth unused, where the hardware prefetchers do
// not run far enough ahead of a latency this high (a VM's cores): on the 2-core Intel AMX
// development VM, summing the squares of 249 MB of gradients (gradient_squares.cpp) read
// 6.1 GB/s on one thread and 12 GB/s on two, and 19-20 GB/s on two with a software prefetch
// 4 KB ahead. Into L2 (T1): the line is used once, microseconds later. A prefetch never
// faults, so it may point past the end of an array.
constexpr int kPrefetchBytes = 4096;
inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(static_cast<const char*>(p) + kPrefetchBytes, 0, 2);
}

// ---- the exception flags that rn_normal raises (MXCSR, per thread) ----
// IE (invalid), DE (denormal operand) and OE (overflow); the others (precision, underflow,
// divide by zero) do not mean that an rn_normal was wrong. A guarded computation clears them,
// computes, stores its results, then reads them. The compiler does not treat floating-point
// operations as writing the flags, so only the stores keep that order: the read is an asm
// volatile that clobbers memory, so every store, and so every operation it stores the result
// of, comes before it. A result that is not stored may be computed after the read.
constexpr uint32_t kInvalidFlag = 0x1, kDenormalOperandFlag = 0x2, kOverflowFlag = 0x8;
constexpr uint32_t kGuardedFlags = kInvalidFlag | kDenormalOperandFlag | kOverflowFlag;
inline uint32_t read_mxcsr() {
  uint32_t csr;
  asm volatile("vstmxcsr %0" : "=m"(csr) : : "memory");
  return csr;
}
inline void write_mxcsr(uint32_t csr) { asm volatile("vldmxcsr %0" : : "m"(csr) : "memory"); }
inline void clear_guarded_flags() { write_mxcsr(read_mxcsr() & ~kGuardedFlags); }
inline uint32_t guarded_flags() { return read_mxcsr() & kGuardedFlags; }
// DE alone: a subnormal met since the flags were cleared (the guarded block's step 1).
inline bool denormal_operand_flag() { return read_mxcsr() & kDenormalOperandFlag; }

// ---- beside them, a flag of our own: values that were to be bf16 already ----
// rn_expect_exact on guarded lanes (bf16_lanes.h) keeps a value that its line's algorithm makes
// a bf16 (an error-free transformation's error term) instead of rounding it, and ORs the
// value's bits in here. A bit in some lane's low half then means that one of them was not a
// bf16, so rn would have changed it, and the guarded computation is redone exactly. Per thread,
// like MXCSR; within a block the compiler keeps it in a register.
inline thread_local F32 expected_exact_bits;
inline void clear_expected_exact() { expected_exact_bits = zero_f32(); }
inline void record_expected_exact(F32 x) {
  expected_exact_bits = bitwise_or(expected_exact_bits, x);
}
inline bool expected_exact_failed() { return any_low_half(expected_exact_bits); }

}  // namespace reg
}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::math
