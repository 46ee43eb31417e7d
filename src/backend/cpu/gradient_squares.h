#pragma once
// Σ g² over a bf16 gradient: the gradient norm, which the trainer needs before every update
// (clipping scales the gradient by it). The threads share fixed chunks, and each chunk is summed
// in one fixed order, the one below, so the result depends on neither the thread count nor the ISA.
//
// gradient_squares.cpp is compiled twice, like the optimizer's element loop (optimizer_chunks.h):
// with the build's flags, and on x86-64 once more for AVX-512 in namespace avx512
// (numerics/isa_namespace.h). optimizer.cpp picks a compilation together with the optimizer's
// loop (optimizer_isa.h). Both give the same bits.
#include <cstdint>

#include "numerics/isa_namespace.h"

namespace collage::cpu {

// Elements per chunk: the unit the threads share.
constexpr int64_t kSquaresChunk = 16384;
// The order within a chunk. Lane k (0 ≤ k < 16) sums in double, in element order, the squares
// of the elements at offsets ≡ k (mod 16) of the chunk's whole groups of 16. The elements after
// the last whole group go into lane 0, in order. The chunk's sum is ((0 + lane 0) + lane 1) + ...
// + lane 15. That is the order GCC 12 chose (-O2 -march=x86-64-v3) for the `omp simd` reduction
// this replaced, so the gradient norm kept its bits.
constexpr int kSquaresLanes = 16;

inline namespace COLLAGE_ISA_NAMESPACE {

// partial[c] = Σ x[i]² over chunk c (elements [c·kSquaresChunk, (c+1)·kSquaresChunk) ∩ [0, n)),
// x being bf16 bit patterns, in the order above; `threads` OpenMP threads share the chunks.
void sum_squares_chunks(const uint16_t* x, int64_t n, int threads, double* partial);

}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
