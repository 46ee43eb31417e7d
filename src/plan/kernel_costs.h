#pragma once
// An analytical cost model of one training step (`collage plan --kernels`): every Backend op
// the GPT calls (src/model/gpt.cpp, docs/ARCHITECTURE.md "One training step"), with the
// MINIMAL bytes it must move (each input read once, each output written once; accumulating
// outputs read and written) and the FLOPs it must do, and the lower-bound time
// max(bytes / bandwidth, FLOPs / peak) on a given GPU. No backend is constructed.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "numerics/precision.h"

namespace collage {

enum class KernelPhase { forward, backward, step };  // per micro-batch, per micro-batch, per step

// One op at one call site of the model, over all its calls in its phase (per micro-batch for
// forward and backward, per optimizer step for the rest). Every call of a row has the same
// shape (or, for the optimizer, the same bytes per FLOP), so the row's lower bound is
// max(bytes / bandwidth, flops / peak) of its totals.
struct KernelCost {
  std::string name;  // "matmul_forward qkv"
  KernelPhase phase = KernelPhase::forward;
  int64_t calls = 0;
  double bytes = 0;           // all calls
  double flops = 0;           // all calls
  bool tensor_cores = false;  // priced at the bf16 tensor-core peak, else the fp32 peak
  bool attention = false;     // the note prices these at tensor-core peak as well
};

struct GpuPeaks {
  std::string name;
  double bandwidth;     // bytes/s of device memory
  double tensor_flops;  // bf16 dense tensor-core FLOP/s
  double fp32_flops;    // fp32 non-tensor FLOP/s (an fma counts 2)
};

// Datasheet peaks: A100-SXM4-80GB (2.039 TB/s HBM2e), H100-SXM5 (3.35 TB/s HBM3).
std::vector<GpuPeaks> reference_gpus();

// Per-element FLOPs of the optimizer step of a strategy (src/numerics/collage_math.h, torch
// order; fp32 arithmetic only, fma = 2, conversions and integer ops not counted).
double optimizer_flops_per_parameter(Precision precision);
// Bytes the optimizer step moves per parameter: every state component, θ (except
// fp32-master, which writes θ = rn(master) without reading it) and g read once, every
// component and θ written once (backend/optimizer_step.h).
double optimizer_bytes_per_parameter(Precision precision);

// The rows of one step of `model` (tensor-parallel 1) at micro-batch B × sequence length T.
std::vector<KernelCost> kernel_costs(const ModelConfig& model, int B, int T, Precision precision);

// Lower bound of a row on a GPU, in seconds.
double lower_bound_seconds(const KernelCost& row, const GpuPeaks& gpu);

// The markdown table (MB, GFLOP, FLOP/B, µs on each GPU), per-phase totals, the step's lower
// bound with `micro_batches` forward+backward per optimizer step, and the notes.
std::string format_kernel_costs(const std::vector<KernelCost>& rows, int64_t tokens_per_micro_batch,
                                int micro_batches, const std::vector<GpuPeaks>& gpus);

}  // namespace collage
