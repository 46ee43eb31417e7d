#pragma once
// Model FLOPs and MFU (docs/ARCHITECTURE.md, "Model FLOPs and MFU"): the one count of a
// training step's useful arithmetic that the trainer's step line, `collage bench` and
// `collage plan` all use, and the peak it is measured against.
//
// The count is PaLM's (Chowdhery et al. 2022, appendix B), per token of a training step
// (forward + backward, no recomputation):
//
//   6·N + 12·L·T·C
//
// N: the parameters that multiply the token's hidden state, a multiply-add each (2 FLOPs)
// forward and two backward (input and weight gradients): every block's weights and biases,
// the layernorms and the output head. Tables that are only looked up (positions, token
// types, an untied input embedding) are not in N; a tied embedding counts once, as the head.
// 12·L·T·C: the attention products (Q·Kᵀ and P·V, 2·T·C FLOPs each per token and layer
// forward, twice that backward), over the whole T×T square as PaLM counts it, although a
// causal kernel skips the upper half: `plan --kernels` prices what the kernels really do.
// Encoders apply their heads to fewer rows than tokens: the MLM head to the
// data.max_predictions masked positions and the pooler and NSP classifier to one row of each
// sequence, so their share is counted per sequence, not per token.
#include <optional>
#include <string>

#include "config/config.h"

namespace collage {

struct ModelFlops {
  double body_parameters = 0;           // N at every position: blocks, layernorms, GPT's head
  double masked_head_parameters = 0;    // encoders: the MLM head, at max_predictions positions
  double sequence_head_parameters = 0;  // BERT: pooler + NSP, once per sequence
  int seq_len = 0;                      // T
  int masked_positions = 0;             // encoders: data.max_predictions
  double attention_per_token = 0;       // 12·L·T·C

  // Training FLOPs of one sequence of T tokens (forward + backward).
  double per_sequence() const;
  // per_sequence() / T: the figure to multiply by tokens/s.
  double per_token() const;
};

// The count for `config`'s model at its data.seq_len (and data.max_predictions).
ModelFlops model_flops(const Config& config);

// What "100%" means on the device a rank runs on.
struct DevicePeak {
  double flops = 0;       // FLOP/s; 0: unknown, so no MFU is reported
  std::string source;     // "A100 bf16 dense tensor-core peak (datasheet)", "cpu: measured ..."
  bool measured = false;  // measured on this machine (the CPU backends), not a datasheet's
};

// Datasheet bf16 dense (no sparsity) tensor-core peaks, matched on the CUDA device name
// ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"): A100 312 TFLOP/s, H100 SXM 989,
// H100 PCIe 756, H100 NVL 835, H200 989. flops 0 for any other GPU, its source saying so.
DevicePeak gpu_peak(const std::string& device_name);

// The peak of a rank's backend: the GPU's datasheet figure for cuda; for the backends that run
// on the CPU, the best rate of the GEMM engine they multiply with, measured now the way they run
// it (src/backend/cpu/gemm_peak.h, about half a second): cpu's as parallel.cpu_gemm resolves on
// this CPU (a oneDNN bf16 matmul where oneDNN multiplies bf16, else OpenBLAS fp32 sgemm),
// cuda-emulated's OpenBLAS sgemm. `source` names the engine, its rate and how it was measured.
DevicePeak backend_peak(const std::string& backend_name, const ParallelConfig& parallel,
                        int device);

// A step at `achieved` FLOP/s above a measured peak shows the peak was measured in a slow moment
// (a shared machine's neighbours, a start-up transient): the peak measured again, for the caller
// to keep if higher. Nothing when the peak is a datasheet's or was not outrun.
std::optional<DevicePeak> remeasure_if_outrun(const DevicePeak& peak, double achieved,
                                              const std::string& backend_name,
                                              const ParallelConfig& parallel, int device);

// "41.3 TFLOP/s", "87.2 GFLOP/s": a FLOP rate in the unit that reads best.
std::string format_flop_rate(double flops_per_second);

}  // namespace collage
