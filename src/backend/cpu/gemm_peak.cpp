// The cpu backend's GEMM peak (gemm_peak.h).
#include "backend/cpu/gemm_peak.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/cpu/storage.h"

namespace collage::cpu {
namespace {

constexpr int kSize = 1024;  // multiply-adds per thread: kSize³ (gemm_peak.h says why)

std::string plural(int threads) {
  return fmt::format("{} thread{}", threads, threads == 1 ? "" : "s");
}

struct Timing {
  double best_seconds;
  int repetitions;  // timed, after the warm-up
};

// `run` once untimed (it warms the caches and the OpenMP threads, and creates oneDNN's
// primitive), then timed: at least 3 and at most 10 times, stopping once 0.25 s were timed, so
// that the measurement takes a few tenths of a second whether a repetition takes milliseconds
// (AMX) or 70 ms (bf16 emulated on AVX-512: 59 GFLOP/s on 2 threads of the development VM). The
// best repetition is the one the machine least disturbed.
template <typename Run>
Timing time_best(Run run) {
  run();
  Timing timing{1e30, 0};
  double timed = 0;
  while (timing.repetitions < 10 && (timing.repetitions < 3 || timed < 0.25)) {
    const auto start = std::chrono::steady_clock::now();
    run();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    timing.best_seconds = std::min(timing.best_seconds, seconds);
    timing.repetitions++;
    timed += seconds;
  }
  return timing;
}

// As matmul.cpp multiplies: OpenMP threads, each calling a single-threaded sgemm on its own
// operands. OpenBLAS's own thread pool would compete with the OpenMP threads a training has
// left spinning and measure half the machine.
GemmPeak measure_sgemm(int threads) {
  constexpr int n = kSize;
  const int previous_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  std::vector<std::vector<float>> buffers(3 * threads, std::vector<float>(size_t(n) * n, 0.5f));
  const Timing timing = time_best([&] {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, buffers[3 * t].data(),
                  n, buffers[3 * t + 1].data(), n, 0.0f, buffers[3 * t + 2].data(), n);
    }
  });
  openblas_set_num_threads(previous_threads);
  GemmPeak peak;
  peak.engine = GemmEngine::openblas_sgemm;
  peak.flops = 2.0 * n * n * n * threads / timing.best_seconds;
  peak.measurement =
      fmt::format("{}^3 per thread, {}, best of {}", n, plural(threads), timing.repetitions);
  return peak;
}

// As the backend's oneDNN matmuls run: one primitive over all `threads` (OnednnGemm sets
// OpenMP's thread count for the call), operands of storage type S, fp32 accumulation, S out.
template <typename S>
GemmPeak measure_onednn(GemmEngine engine, int threads) {
  const int64_t M = int64_t(kSize) * threads, N = kSize, K = kSize;
  S value;
  store(value, 0.5f);
  const std::vector<S> a(size_t(M * K), value), b(size_t(K * N), value);  // (M, K), (K, N)
  std::vector<S> c(size_t(M * N));                                        // (M, N)
  OnednnGemm gemm(threads);
  const Timing timing = time_best([&] {
    gemm.matmul<S>(M, N, K, {a.data(), K, 1}, {b.data(), N, 1}, nullptr, {c.data(), N, 1},
                   /*accumulate=*/false);
  });
  GemmPeak peak;
  peak.engine = engine;
  peak.flops = 2.0 * double(M) * N * K / timing.best_seconds;
  peak.measurement = fmt::format("{}x{}x{}, {}^3 per thread, {}, ISA {}, best of {}", M, N, K,
                                 kSize, plural(threads), onednn_support().isa, timing.repetitions);
  return peak;
}

}  // namespace

GemmEngine gemm_engine(const CpuGemmChoice& choice, bool bf16_storage) {
  if (!choice.onednn) return GemmEngine::openblas_sgemm;
  return bf16_storage ? GemmEngine::onednn_bf16 : GemmEngine::onednn_f32;
}

const char* gemm_engine_name(GemmEngine engine) {
  switch (engine) {
    case GemmEngine::onednn_bf16:
      return "oneDNN bf16 matmul";
    case GemmEngine::onednn_f32:
      return "oneDNN f32 matmul";
    case GemmEngine::openblas_sgemm:
      break;
  }
  return "OpenBLAS fp32 sgemm";
}

GemmPeak measure_gemm_peak(GemmEngine engine, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  switch (engine) {
    case GemmEngine::onednn_bf16:
      return measure_onednn<bf16>(engine, threads);
    case GemmEngine::onednn_f32:
      return measure_onednn<float>(engine, threads);
    case GemmEngine::openblas_sgemm:
      break;
  }
  return measure_sgemm(threads);
}

}  // namespace collage::cpu
