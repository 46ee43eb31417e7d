#include "plan/model_flops.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/backend.h"
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

DevicePeak measure_cpu_peak(int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  // As the cpu backend multiplies (src/backend/cpu/gemm.h): OpenMP threads, each calling a
  // single-threaded sgemm on its own operands. OpenBLAS's own thread pool would compete with
  // the OpenMP threads a training has left spinning and measure half the machine.
  constexpr int n = 1024;
  const int previous_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  std::vector<std::vector<float>> buffers(3 * threads, std::vector<float>(size_t(n) * n, 0.5f));
  double best_seconds = 1e30;
  for (int repeat = 0; repeat < 11; repeat++) {  // the first warms the caches and the threads
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, buffers[3 * t].data(),
                  n, buffers[3 * t + 1].data(), n, 0.0f, buffers[3 * t + 2].data(), n);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (repeat > 0) best_seconds = std::min(best_seconds, seconds);
  }
  openblas_set_num_threads(previous_threads);
  const double flops = 2.0 * n * n * n * threads / best_seconds;
  return {flops, fmt::format("cpu: OpenBLAS fp32 sgemm measured at {} ({}^3 per thread, {} "
                             "thread{})",
                             format_flop_rate(flops), n, threads, threads == 1 ? "" : "s")};
}

DevicePeak backend_peak(const std::string& backend_name, int threads, int device) {
  if (backend_name == "cuda") return gpu_peak(cuda_device_name(device));
  return measure_cpu_peak(threads);  // cpu, and cuda-emulated's kernels run on the CPU
}

std::string format_flop_rate(double flops_per_second) {
  if (flops_per_second >= 1e12) return fmt::format("{:.1f} TFLOP/s", flops_per_second / 1e12);
  return fmt::format("{:.1f} GFLOP/s", flops_per_second / 1e9);
}

}  // namespace collage
