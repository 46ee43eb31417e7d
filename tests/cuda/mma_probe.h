#pragma once
// The tensor-core probe of tests/cuda/mma_test.cpp (mma_probe.cu), built for the emulator and,
// with nvcc, for the GPU: the same declarations in both builds' namespaces.
#include <cstdint>
#include <vector>

#include "backend/cuda/runtime/context.h"  // opens this build's inline namespace first

namespace collage::cuda {

// Inputs as bf16 bits: a (16×16 row-major), at = aᵀ, bn (8×16) = bᵀ, bk (16×8) = b; c (16×8).
struct MmaProbeInput {
  std::vector<uint16_t> a, at, bn, bk;
  std::vector<float> c;
};
// Per lane: a via ldmatrix.x4 [0, 4), a via .x4.trans from aᵀ [4, 8), b via .x2 from bᵀ
// [8, 10), b via .x2.trans [10, 12), then d = a·b + c of the plain [12, 16) and transposed
// [16, 20) loads (fp32 bits).
constexpr int kMmaProbeWords = 20;

namespace emulated {
std::vector<uint32_t> run_mma_probe(const MmaProbeInput& in);
}
namespace device {  // only in builds with COLLAGE_HAVE_CUDA
std::vector<uint32_t> run_mma_probe(const MmaProbeInput& in);
}

}  // namespace collage::cuda
