// The cpu backend's optimizer step: the element loop of optimizer_chunks.cpp, in the
// compilation chosen for this CPU (optimizer_isa.h), then the EDQ's chunk sums added in chunk
// order, so θ, the state and the sums do not depend on the thread count or the ISA.
#include <atomic>
#include <string>

#include "backend/cpu/isa_choice.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/optimizer_chunks.h"
#include "backend/cpu/optimizer_isa.h"
#include "backend/cpu/storage.h"
#include "core/error.h"

namespace collage::cpu {

#ifdef COLLAGE_CPU_AVX512_COMPILATION
// optimizer_chunks.cpp compiled with -march=x86-64-v4 (CMakeLists.txt): the same functions,
// in namespace avx512.
namespace avx512 {
void step_chunks(const OptimizerStep& step, bool fp32_storage, int threads, double* partial_sums,
                 ReciprocalDenominators& table);
const char* lane_isa();
void sum_squares_chunks(const uint16_t* x, int64_t n, int threads, double* partial);
}  // namespace avx512
#endif

namespace {

// Every optimizer_step's blocks so far (guarded_rounding_counts).
std::atomic<int64_t> guarded_blocks{0}, redone_blocks{0};

OptimizerLoop baseline_loop() {
  return {"baseline", lane_isa(), &step_chunks, &sum_squares_chunks};
}

struct Choice {
  OptimizerLoop loop;
  std::string description;
};

Choice choose() {
  const std::vector<OptimizerLoop> loops = runnable_optimizer_loops();
  const OptimizerLoop& baseline = loops.front();
  const IsaChoice isa =
      choose_isa("COLLAGE_CPU_OPTIMIZER",
                 baseline.isa == "none" ? std::string("scalar steps") : baseline.isa + " lanes");
  return {isa.isa == CpuIsa::avx512 ? loops.back() : baseline, isa.description};
}

const Choice& choice() {
  static const Choice chosen = choose();
  return chosen;
}

}  // namespace

std::vector<OptimizerLoop> runnable_optimizer_loops() {
  std::vector<OptimizerLoop> loops{baseline_loop()};
#ifdef COLLAGE_CPU_AVX512_COMPILATION
  if (why_no_avx512().empty()) {
    loops.push_back(
        {"avx512", avx512::lane_isa(), &avx512::step_chunks, &avx512::sum_squares_chunks});
  }
#endif
  return loops;
}

const OptimizerLoop& chosen_optimizer_loop() { return choice().loop; }

std::string optimizer_loop_description() {
  const GuardedRoundingCounts blocks = guarded_rounding_counts();
  if (blocks.guarded == 0) return choice().description;
  return fmt::format("{}; guarded rounding redid {} of {} blocks exactly ({:.2f}%)",
                     choice().description, blocks.redone, blocks.guarded,
                     100.0 * double(blocks.redone) / double(blocks.guarded));
}

GuardedRoundingCounts guarded_rounding_counts() { return {guarded_blocks, redone_blocks}; }

template <typename S>
void optimizer_step(CpuContext& cx, const OptimizerStep& step) {
  const int64_t chunks = (step.n + kOptimizerChunk - 1) / kOptimizerChunk;
  cx.partial_sums.assign(size_t(kPartialSums * chunks), 0.0);
  if (cx.reciprocal_denominator_values.empty()) {
    cx.reciprocal_denominator_values.resize(ReciprocalDenominators::kEntries);
    cx.reciprocal_denominators.values = cx.reciprocal_denominator_values.data();
  }
  chosen_optimizer_loop().step_chunks(step, is_fp32_storage<S>, cx.threads, cx.partial_sums.data(),
                                      cx.reciprocal_denominators);
  const double* partial = cx.partial_sums.data();
  GuardedRoundingCounts blocks;
  for (int64_t c = 0; c < chunks; c++) {
    blocks.guarded += int64_t(partial[kPartialSums * c + 4]);
    blocks.redone += int64_t(partial[kPartialSums * c + 5]);
  }
  guarded_blocks += blocks.guarded, redone_blocks += blocks.redone;
  if (!step.edq) return;
  EdqSums total;
  for (int64_t c = 0; c < chunks; c++) {
    const double* sums = partial + kPartialSums * c;
    total.dot += sums[0];
    total.u_squared += sums[1];
    total.updated += int64_t(sums[2]);
    total.lost += int64_t(sums[3]);
  }
  *step.edq += total;
}

template void optimizer_step<bf16>(CpuContext&, const OptimizerStep&);
template void optimizer_step<float>(CpuContext&, const OptimizerStep&);

}  // namespace collage::cpu
