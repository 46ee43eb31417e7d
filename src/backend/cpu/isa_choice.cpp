// The choice between a twice-compiled source's compilations (isa_choice.h).
#include "backend/cpu/isa_choice.h"

#include <cstdlib>

#include "core/error.h"

namespace collage::cpu {

std::string why_no_avx512() {
#ifdef COLLAGE_CPU_AVX512_COMPILATION  // defined on x86-64 only (CMakeLists.txt)
  // x86-64-v4's AVX-512 subsets, which the AVX-512 compilation may use anywhere. libgcc's
  // cpuid check also asks the OS (XGETBV) whether it saves the AVX-512 registers.
  __builtin_cpu_init();
  const bool runs = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return runs ? "" : "the CPU lacks AVX-512 F/BW/DQ/VL";
#else
  return "this build has no AVX-512 compilation (not x86-64)";
#endif
}

IsaChoice choose_isa(const char* variable, const std::string& baseline_text) {
  const char* value = std::getenv(variable);
  const std::string setting = value && *value ? value : "auto";
  if (setting != "auto" && setting != "avx512" && setting != "baseline") {
    fail("{}={}: unknown value (valid: auto, avx512, baseline)", variable, setting);
  }
  if (setting == "baseline") {
    return {CpuIsa::baseline, fmt::format("{} ({}=baseline)", baseline_text, variable)};
  }
  const std::string why_not = why_no_avx512();
  if (why_not.empty()) {
    return {CpuIsa::avx512, "AVX-512 lanes (" + setting + ": the CPU has AVX-512 F/BW/DQ/VL)"};
  }
  if (setting == "avx512") fail("{}=avx512: {} (use auto or baseline)", variable, why_not);
  return {CpuIsa::baseline, baseline_text + " (auto: " + why_not + ")"};
}

}  // namespace collage::cpu
