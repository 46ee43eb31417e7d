#include "dist/backend_choice.h"

#include <memory>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#if defined(COLLAGE_HAVE_CUDA)
#include "backend/cuda/runtime/device_query.h"
#endif

namespace collage {
namespace cuda {
// The two builds of the cuda backend (backend/cuda/cuda_backend.cpp), named explicitly here.
inline namespace emulated {
std::unique_ptr<Backend> make_backend(const std::string& name, int device);
}
#if defined(COLLAGE_HAVE_CUDA)
inline namespace device {
std::unique_ptr<Backend> make_backend(const std::string& name, int device);
}
#endif
}  // namespace cuda

bool cuda_built() {
#if defined(COLLAGE_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
#if defined(COLLAGE_HAVE_CUDA)
  std::string why;
  const int count = cuda::usable_gpu_count(why);
  COLLAGE_CHECK(count > 0,
                "parallel.backend: cuda needs a GPU, but {}. Use 'auto' (the cpu when there is no "
                "GPU), 'cpu', or 'cuda-emulated' (the cuda kernels on the CPU, slowly)",
                why);
  COLLAGE_CHECK(device >= 0 && device < count, "cuda: GPU {} does not exist ({} usable)", device,
                count);
  return cuda::device::make_backend("cuda", device);
#else
  (void)device;
  fail(
      "parallel.backend: cuda: this collage was built without CUDA (CMake found no nvcc). "
      "Rebuild on a machine with the CUDA toolkit, or use 'cpu' or 'cuda-emulated'");
#endif
}

std::unique_ptr<Backend> make_cuda_emulated_backend() {
  return cuda::emulated::make_backend("cuda-emulated", 0);
}

BackendChoice choose_backend(const std::string& requested) {
  if (requested != "auto") return {requested, "as configured"};
#if defined(COLLAGE_HAVE_CUDA)
  std::string why;
  if (cuda::usable_gpu_count(why) > 0) return {"cuda", "auto: found " + cuda::gpu_name(0)};
  return {"cpu", "auto: no GPU, " + why};
#else
  return {"cpu", "auto: this build has no CUDA"};
#endif
}

std::string cuda_device_name(int device) {
#if defined(COLLAGE_HAVE_CUDA)
  return cuda::gpu_model_name(device);
#else
  (void)device;
  return "";
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads, int device,
                                      const std::string& cpu_gemm) {
  if (name == "cpu") return make_cpu_backend(threads, cpu_gemm);
  if (name == "cuda") return make_cuda_backend(device);
  if (name == "cuda-emulated") return make_cuda_emulated_backend();
  fail("parallel.backend: '{}' is not a backend (auto, cpu, cuda, cuda-emulated)", name);
}

}  // namespace collage
