#pragma once
// `collage bench`: time the parts of one config's training step (zeroing the gradients,
// forward, backward, the gradient norm, the optimizer) on synthetic tokens, next to the same
// step's matrix products run as plain fp32 sgemm on the same threads — the cost a GEMM-bound
// trainer cannot beat (cpu backend). A queuing backend (cuda, cuda-emulated) also reports its
// kernel launches and host waits per step.
#include <string>
#include <vector>

#include "config/config.h"
#include "core/op_family.h"

namespace collage {

struct BenchOptions {
  int warmup_steps = 1;
  int steps = 3;
  // The timed steps' GPU time and launches by op family (Backend::start_profile): CUDA events
  // on cuda, the emulator's host time on cuda-emulated; the cpu backend has no kernels to time.
  bool profile = false;
};

struct BenchResult {
  int micro_batch = 0, seq_len = 0;      // the shape timed
  std::string backend;                   // the backend that ran (parallel.backend resolved)
  std::string backend_reason;            // why ("as configured", "auto: no GPU, ...")
  std::string gemm_engine;               // cpu: OpenBLAS or oneDNN, and why
  std::string optimizer_engine;          // cpu: the optimizer loop's ISA and why; blocks it redid
  std::string kernel_engine;             // cpu: the lane kernels' ISA and why
  double launches_per_step = 0;          // kernels and GEMMs queued (queuing backends)
  double synchronizations_per_step = 0;  // host waits for the device (queuing backends)
  // Mean ms of each part of the trainer's step; step_ms is their sum.
  double zero_ms = 0, forward_ms = 0, backward_ms = 0, norm_ms = 0, optimizer_ms = 0, step_ms = 0;
  double optimizer_gb = 0;  // bytes the optimizer step must move (kernel_costs.h), in GB
  double tokens_per_s = 0;
  double model_gflop = 0;      // model FLOPs of one step (model_flops.h: 6N + 12LTC), GFLOP
  double achieved_gflops = 0;  // model_gflop / step time
  double peak_gflops = 0;      // the device's peak (model_flops.h); 0: unknown
  std::string peak_source;     // what the peak is
  double sgemm_ms = 0;         // the step's GEMMs as plain fp32 sgemm (cpu backend only)
  double sgemm_gflops = 0;     // their FLOPs / sgemm_ms
  // --profile: each op family's ms and launches per timed step (empty: not profiled).
  std::vector<OpFamilyTime> profile;
};

BenchResult run_bench(const Config& config, const BenchOptions& options);
// The table of one or more runs of `config` at different shapes, a column each.
std::string format_bench(const Config& config, const std::vector<BenchResult>& results);
// --profile's table of one run: each op family's ms, share and launches per step (a note on
// cpu, which has no kernels to time).
std::string format_profile(const BenchResult& result);

}  // namespace collage
