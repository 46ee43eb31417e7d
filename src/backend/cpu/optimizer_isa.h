#pragma once
// Which compilation of the cpu optimizer's element loop (optimizer_chunks.cpp), and of its
// gradient norm (gradient_squares.cpp), runs: AVX-512 where the build has that compilation and
// the CPU can run it, else the build's baseline (AVX2 in Release). Chosen once per process; the
// environment variable COLLAGE_CPU_OPTIMIZER=auto|avx512|baseline overrides the choice (to compare
// the two on one machine: docs/ARCHITECTURE.md, "The cpu optimizer"). Both give the same bits.
#include <string>
#include <vector>

#include "backend/cpu/gradient_squares.h"
#include "backend/cpu/isa_choice.h"
#include "backend/cpu/optimizer_chunks.h"
#include "backend/optimizer_step.h"

namespace collage::cpu {

struct OptimizerLoop {
  std::string name;  // "avx512" or "baseline", as COLLAGE_CPU_OPTIMIZER names it
  std::string isa;   // the lane registers: "AVX-512", "AVX2", or "none" (scalar)
  // optimizer_chunks.h's step_chunks of that compilation
  void (*step_chunks)(const OptimizerStep& step, bool fp32_storage, int threads,
                      double* partial_sums, ReciprocalDenominators& table) = nullptr;
  // gradient_squares.h's sum_squares_chunks of that compilation
  void (*sum_squares_chunks)(const uint16_t* x, int64_t n, int threads, double* partial) = nullptr;
};

// Every compilation this build has and this CPU can run, baseline first. The second entry's
// absence is explained by why_no_avx512() (isa_choice.h).
std::vector<OptimizerLoop> runnable_optimizer_loops();

// The loop optimizer_step runs, and a line for the log and `collage bench` saying which and why,
// e.g. "AVX-512 lanes (auto: the CPU has AVX-512 F/BW/DQ/VL)". Throws an Error for a
// COLLAGE_CPU_OPTIMIZER value that is unknown or names a loop the CPU cannot run.
const OptimizerLoop& chosen_optimizer_loop();
std::string optimizer_loop_description();

// 64-element blocks the AVX-512 loop has stepped with guarded rounding since the process
// started, and how many of them it redid exactly (docs/ARCHITECTURE.md, "The cpu optimizer").
// optimizer_loop_description() adds them once there are any; a share far above zero means
// values the fast rounding cannot take (NaN, ±inf, subnormals) fill the model or its state.
struct GuardedRoundingCounts {
  int64_t guarded = 0, redone = 0;
};
GuardedRoundingCounts guarded_rounding_counts();

}  // namespace collage::cpu
