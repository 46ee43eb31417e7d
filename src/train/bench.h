#pragma once
// `collage bench`: time forward, backward and optimizer of one config's training step on
// synthetic tokens, next to the same step's matrix products run as plain fp32 sgemm on
// the same threads — the cost a GEMM-bound trainer cannot beat.
#include <string>

#include "config/config.h"

namespace collage {

struct BenchOptions {
  int warmup_steps = 1;
  int steps = 3;
};

struct BenchResult {
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, step_ms = 0;
  double tokens_per_s = 0;
  double model_gflop = 0;      // matmul FLOPs of one step (forward + backward), GFLOP
  double achieved_gflops = 0;  // model_gflop / step time
  double sgemm_ms = 0;         // the same GEMMs as plain fp32 sgemm
  double sgemm_gflops = 0;
};

BenchResult run_bench(const Config& config, const BenchOptions& options);
std::string format_bench(const Config& config, const BenchResult& result);

}  // namespace collage
