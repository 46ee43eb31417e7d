// runtime.h on a GPU through the CUDA runtime API (cudart). Never the driver API: linking
// libcuda would stop the executable from starting on machines without a driver.
#include <cuda_runtime_api.h>

#include "backend/cuda/device_query.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

void check(cudaError_t status, const char* what, size_t bytes = 0) {
  if (status == cudaSuccess) return;
  fail("cuda: {}{}: {} ({})", what, bytes ? fmt::format(" of {} bytes", bytes) : std::string(),
       cudaGetErrorString(status), int(status));
}

}  // namespace

void open_context(CudaContext& cx, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  cx.device = device;
  cx.sm_count = properties.multiProcessorCount;
  cx.max_shared_bytes = properties.sharedMemPerBlock;
  check(cudaStreamCreateWithFlags(&cx.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cx.gemm = create_gemm_engine(cx);
}

void close_context(CudaContext& cx) {
  if (!cx.stream) return;
  cudaStreamSynchronize(cx.stream);  // a destructor must not throw
  for (DeviceBuffer* buffer :
       {&cx.scratch.embedding_rows, &cx.scratch.attention_delta, &cx.scratch.column_partials,
        &cx.scratch.block_partials, &cx.scratch.rope_table}) {
    if (buffer->data) cudaFree(buffer->data);
    *buffer = {};
  }
  destroy_gemm_engine(cx, cx.gemm);
  cx.gemm = nullptr;
  cudaStreamDestroy(cx.stream);
  cx.stream = nullptr;
}

void* device_allocate(CudaContext&, size_t bytes) {
  void* pointer = nullptr;
  check(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes), "cudaMalloc", bytes);
  return pointer;
}

void device_release(CudaContext& cx, void* pointer) {
  if (!pointer) return;
  synchronize(cx);
  check(cudaFree(pointer), "cudaFree");
}

void upload(CudaContext& cx, void* device_destination, const void* host_source, size_t bytes) {
  // From pageable memory cudaMemcpyAsync returns once the source is staged, so the caller may
  // reuse it. (A pinned staging buffer would let the copy overlap; uploads are a few KB of
  // tokens per micro-batch.)
  if (bytes) {
    check(
        cudaMemcpyAsync(device_destination, host_source, bytes, cudaMemcpyHostToDevice, cx.stream),
        "upload", bytes);
  }
}

void download(CudaContext& cx, void* host_destination, const void* device_source, size_t bytes) {
  if (bytes) {
    check(
        cudaMemcpyAsync(host_destination, device_source, bytes, cudaMemcpyDeviceToHost, cx.stream),
        "download", bytes);
  }
  synchronize(cx);
}

void copy_on_device(CudaContext& cx, void* destination, const void* source, size_t bytes) {
  if (bytes) {
    check(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, cx.stream),
          "device copy", bytes);
  }
}

void fill_bytes(CudaContext& cx, void* destination, int byte, size_t bytes) {
  if (bytes) check(cudaMemsetAsync(destination, byte, bytes, cx.stream), "cudaMemsetAsync", bytes);
}

void synchronize(CudaContext& cx) {
  cx.synchronizations++;
  check(cudaStreamSynchronize(cx.stream), "a kernel or copy on the stream failed");
}

COLLAGE_CUDA_VARIANT_END

int usable_gpu_count(std::string& why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // Without a driver this is cudaErrorInsufficientDriver (35), not zero devices.
    why = fmt::format("the CUDA runtime reports {} ({})", cudaGetErrorString(status), int(status));
    cudaGetLastError();  // clear it
    return 0;
  }
  if (count == 0) why = "the CUDA runtime finds no GPU";
  return count;
}

std::string gpu_name(int device) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) return "unknown GPU";
  return fmt::format("{} ({} SMs, {:.0f} GiB)", properties.name, properties.multiProcessorCount,
                     properties.totalGlobalMem / double(1 << 30));
}

}  // namespace collage::cuda
