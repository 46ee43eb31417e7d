#pragma once
// Choosing and making the backend a rank computes on, by its `parallel.backend` name
// (backend_choice.cpp): the cpu backend, the cuda backend on the rank's GPU, or the cuda
// backend's kernels on the host SIMT emulator. It sits above both backends, which know nothing
// of each other.
#include <memory>
#include <string>

#include "backend/backend.h"

namespace collage {

// The cuda backend on GPU `device` (backend/cuda/); throws Error when this build has no CUDA
// or no GPU can be used (the message says why).
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// The same host code and kernels run on the CPU by the host SIMT emulator (src/simt/): slow,
// for tests and for checking kernels without a GPU. Always built.
std::unique_ptr<Backend> make_cuda_emulated_backend();
// Whether this build has the GPU cuda backend (CMake found nvcc).
bool cuda_built();

// parallel.backend resolved: "auto" becomes "cuda" when a GPU can be used and "cpu"
// otherwise; `reason` says why, for the log.
struct BackendChoice {
  std::string name;    // cpu | cuda | cuda-emulated
  std::string reason;  // "auto: no GPU, the CUDA runtime reports ..."
};
BackendChoice choose_backend(const std::string& requested);
// The backend of a resolved name (cpu | cuda | cuda-emulated); cpu threads as make_cpu_backend,
// `device` the GPU for cuda (a rank's node-local rank).
// cpu_gemm: parallel.cpu_gemm, for cpu.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0, int device = 0,
                                      const std::string& cpu_gemm = "auto");
// The CUDA device's name ("NVIDIA A100-SXM4-80GB"); "" without CUDA or without a GPU.
std::string cuda_device_name(int device);

}  // namespace collage
