#pragma once
// The cpu optimizer's element loop (optimizer_chunks.cpp), declared in the namespace of the
// compilation that includes this header (numerics/isa_namespace.h): collage::cpu::baseline for
// the build's own flags, collage::cpu::avx512 for the AVX-512 compilation. optimizer.cpp
// chooses one at run time.
#include <cstdint>

#include "backend/optimizer_step.h"
#include "numerics/isa_namespace.h"

namespace collage::cpu {

// Elements per chunk: the unit the threads share and the EDQ's partial sums are formed over.
// Fixed, so the sums do not depend on the thread count.
constexpr int64_t kOptimizerChunk = 16384;

inline namespace COLLAGE_ISA_NAMESPACE {

// Steps elements [0, step.n) of one tensor with `threads` OpenMP threads; chunk c (elements
// [c·kOptimizerChunk, (c+1)·kOptimizerChunk)) writes its EDQ sums to partial_sums[4c..4c+3]:
// Σ Δ·u, Σ u², #{u ≠ 0}, #{u ≠ 0, Δ = 0}. fp32_storage: param and grad are float (the
// cpu-fp32 reference backend, fp32-master only); otherwise bf16. Arguments already checked.
void step_chunks(const OptimizerStep& step, bool fp32_storage, int threads, double* partial_sums);

// The lane registers this compilation steps with: "AVX-512", "AVX2", or "none" (scalar).
const char* lane_isa();

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
