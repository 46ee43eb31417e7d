#include "plan/model_flops.h"

#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/cpu/gemm_peak.h"
#include "backend/cpu/onednn_gemm.h"
#include "dist/backend_choice.h"
#include "model/model_family.h"

namespace collage {

double ModelFlops::per_sequence() const {
  return 6 * (body_parameters * seq_len + masked_head_parameters * masked_positions +
              sequence_head_parameters) +
         attention_per_token * seq_len;
}

double ModelFlops::per_token() const { return per_sequence() / seq_len; }

ModelFlops model_flops(const Config& config) {
  const ModelConfig& m = config.model;
  // Which parameters run where is the model family's to say (src/model/*_family.cpp).
  const MultipliedParameters parameters = model_family(m).multiplied_parameters(m);
  ModelFlops f;
  f.seq_len = config.data.seq_len;
  f.attention_per_token = 12.0 * m.n_layer * f.seq_len * m.hidden_size;
  f.body_parameters = parameters.body;
  f.masked_head_parameters = parameters.masked_head;
  f.sequence_head_parameters = parameters.sequence_head;
  if (parameters.masked_head > 0) f.masked_positions = config.data.max_predictions;
  return f;
}

DevicePeak gpu_peak(const std::string& device_name) {
  struct Entry {
    const char* match;  // in the CUDA device name
    const char* label;
    double flops;
  };
  // Most specific first: "H100 PCIe" and "H100 NVL" before any other H100.
  static const Entry table[] = {
      {"A100", "A100", 312e12},         {"H100 PCIe", "H100 PCIe", 756e12},
      {"H100 NVL", "H100 NVL", 835e12}, {"H100", "H100 SXM", 989e12},
      {"H200", "H200", 989e12},
  };
  for (const Entry& e : table) {
    if (device_name.find(e.match) != std::string::npos)
      return {e.flops, fmt::format("{} bf16 dense tensor-core peak {:.0f} TFLOP/s (datasheet)",
                                   e.label, e.flops / 1e12)};
  }
  return {0, fmt::format("no bf16 peak is known for '{}' (collage knows A100, H100 and H200); "
                         "MFU is not reported",
                         device_name.empty() ? "this GPU" : device_name)};
}

DevicePeak backend_peak(const std::string& backend_name, const ParallelConfig& parallel,
                        int device) {
  if (backend_name == "cuda") return gpu_peak(cuda_device_name(device));
  // cuda-emulated's kernels run on the CPU and its cuBLASLt calls become OpenBLAS sgemm
  // (src/backend/cuda/runtime/gemm_emulated.cpp); the cpu backend (bf16 storage) multiplies
  // with the engine parallel.cpu_gemm resolves to on this CPU, as make_cpu_backend does.
  const cpu::GemmEngine engine =
      backend_name == "cpu"
          ? cpu::gemm_engine(cpu::choose_cpu_gemm(parallel.cpu_gemm, /*bf16_storage=*/true), true)
          : cpu::GemmEngine::openblas_sgemm;
  const cpu::GemmPeak peak = cpu::measure_gemm_peak(engine, parallel.threads);
  return {peak.flops,
          fmt::format("cpu: {} measured at {} ({})", cpu::gemm_engine_name(engine),
                      format_flop_rate(peak.flops), peak.measurement),
          /*measured=*/true};
}

std::optional<DevicePeak> remeasure_if_outrun(const DevicePeak& peak, double achieved,
                                              const std::string& backend_name,
                                              const ParallelConfig& parallel, int device) {
  if (!peak.measured || achieved <= peak.flops) return std::nullopt;
  return backend_peak(backend_name, parallel, device);
}

std::string format_flop_rate(double flops_per_second) {
  if (flops_per_second >= 1e12) return fmt::format("{:.1f} TFLOP/s", flops_per_second / 1e12);
  return fmt::format("{:.1f} GFLOP/s", flops_per_second / 1e9);
}

}  // namespace collage
