#pragma once
// Which compilation of a twice-compiled part of the cpu backend runs: the optimizer's element
// loop (optimizer_isa.h) and the lane kernels (lane_kernels.h) are each one source compiled with
// the build's flags (AVX2 in Release) and, on x86-64, once more for AVX-512
// (docs/ARCHITECTURE.md, "One source, two ISAs"). Both compilations give the same bits; the
// AVX-512 one runs where the CPU can run it, unless an environment variable says otherwise.
#include <string>

namespace collage::cpu {

enum class CpuIsa { baseline, avx512 };

// "" when this build has an AVX-512 compilation and the CPU runs it (AVX-512 F/BW/DQ/VL, with
// registers the OS saves); otherwise why not.
std::string why_no_avx512();

struct IsaChoice {
  CpuIsa isa = CpuIsa::baseline;
  std::string description;  // e.g. "AVX-512 lanes (auto: the CPU has AVX-512 F/BW/DQ/VL)"
};

// The choice that environment variable `variable` makes: auto (the default; also when unset or
// empty) and avx512 take AVX-512 where why_no_avx512() is "", baseline takes the baseline,
// described as `baseline_text` ("AVX2 lanes"). Throws an Error naming the variable for an
// unknown value, or for avx512 where the AVX-512 compilation cannot run.
IsaChoice choose_isa(const char* variable, const std::string& baseline_text);

}  // namespace collage::cpu
