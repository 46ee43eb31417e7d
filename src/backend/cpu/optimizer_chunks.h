#pragma once
// The cpu optimizer's element loop (optimizer_chunks.cpp), declared in the namespace of the
// compilation that includes this header (numerics/isa_namespace.h): collage::cpu::baseline for
// the build's own flags, collage::cpu::avx512 for the AVX-512 compilation. optimizer.cpp
// chooses one at run time.
#include <cstdint>

#include "backend/optimizer_step.h"
#include "numerics/collage_math.h"
#include "numerics/isa_namespace.h"

namespace collage::cpu {

// Elements per chunk: the unit the threads share and the EDQ's partial sums are formed over.
// Fixed, so the sums do not depend on the thread count.
constexpr int64_t kOptimizerChunk = 16384;
constexpr int kPartialSums = 6;  // per chunk, written by step_chunks

// One step's table of Adam's reciprocal denominators (numerics/collage_math.h,
// adam_direction), which lets the lane loop multiply where the scalar step divides. The
// caller owns the memory and keeps it across the step's tensors; step_chunks refills it when
// the scalars it depends on change (eps, the Adam order, and in the torch order sqrt(bc2),
// which changes every step until bias correction rounds to 1 in fp32).
struct ReciprocalDenominators {
  static constexpr int kEntries = 65536;  // one per bf16 bit pattern
  float* values = nullptr;                // kEntries, the caller's; null: divide instead
  bool filled = false, usable = false;
  float eps = 0, sqrt_bc2 = 0;  // what it was filled for
  bool hf_order = false;
};

inline namespace COLLAGE_ISA_NAMESPACE {

// Steps elements [0, step.n) of one tensor with `threads` OpenMP threads; chunk c (elements
// [c·kOptimizerChunk, (c+1)·kOptimizerChunk)) writes kPartialSums values from
// partial_sums[kPartialSums·c]: its EDQ sums Σ Δ·u, Σ u², #{u ≠ 0}, #{u ≠ 0, Δ = 0}, then the
// number of 64-element blocks it stepped with guarded rounding and how many of those it redid
// exactly (optimizer_chunks.cpp, Bf16Adam::guarded_in_place). fp32_storage: param and grad are
// float (the cpu-fp32 reference backend, fp32-master only); otherwise bf16. Arguments already
// checked. bf16 strategies with lane vectors use (and refill when stale) `table`.
void step_chunks(const OptimizerStep& step, bool fp32_storage, int threads, double* partial_sums,
                 ReciprocalDenominators& table);

// values[b] = f32_div(1, adam_denominator(bf16 with bits b, s)) for every b. False when a
// nonzero denominator's reciprocal overflowed (eps below 2^-127), and the table must not be used.
bool fill_reciprocal_denominators(const math::AdamScalars& s, float* values);

// The lane registers this compilation steps with: "AVX-512", "AVX2", or "none" (scalar).
const char* lane_isa();

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
