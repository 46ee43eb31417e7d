#pragma once
// The probe of tests/cuda/turns_test.cpp (turns_probe.cu), built for the emulator and, with
// nvcc, for the GPU: the same declarations in both builds' namespaces.
#include <vector>

#include "backend/cuda/runtime/context.h"  // opens this build's inline namespace first

namespace collage::cuda {

// kTurnsProbeBlocks blocks of 4 warps add in turn to kTurnsProbeSums sums per warp, each sum a
// pair of floats per lane; sum s has the blocks s % kTurnsProbeBlocks down to 0 as
// contributors, in that order. Returns the sums (kTurnsProbeSums, 4 warps, 32 lanes, 2).
constexpr int kTurnsProbeBlocks = 8;
constexpr int kTurnsProbeSums = 24;

namespace emulated {
std::vector<float> run_turns_probe();
}
namespace device {  // only in builds with COLLAGE_HAVE_CUDA
std::vector<float> run_turns_probe();
}

}  // namespace collage::cuda
