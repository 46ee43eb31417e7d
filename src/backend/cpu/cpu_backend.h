#pragma once
// Making the cpu backend (cpu_backend.cpp): OpenMP loops, OpenBLAS or oneDNN matmuls.
#include <memory>
#include <string>

#include "backend/backend.h"

namespace collage {

// The cpu backend (OpenMP + OpenBLAS, or oneDNN's matmuls). threads <= 0: OpenMP's default.
// cpu_gemm: parallel.cpu_gemm (auto | onednn | openblas; src/backend/cpu/onednn_gemm.h).
std::unique_ptr<Backend> make_cpu_backend(int threads = 0, const std::string& cpu_gemm = "auto");
// The same ops with fp32 storage and no rounding (tests: finite differences, references);
// auto keeps OpenBLAS, onednn runs oneDNN's fp32 matmuls.
std::unique_ptr<BackendT<float>> make_cpu_backend_fp32(int threads = 0,
                                                       const std::string& cpu_gemm = "auto");

}  // namespace collage
