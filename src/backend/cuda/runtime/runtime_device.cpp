// runtime.h on a GPU through the CUDA runtime API (cudart). Never the driver API: linking
// libcuda would stop the executable from starting on machines without a driver.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cuda/runtime/device_query.h"
#include "backend/cuda/runtime/gemm.h"
#include "backend/cuda/runtime/runtime.h"
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
  for (DeviceBuffer* buffer : cx.scratch.all()) {
    if (buffer->data) cudaFree(buffer->data);
    *buffer = {};
  }
  destroy_gemm_engine(cx, cx.gemm);
  cx.gemm = nullptr;
  if (cx.staging) cudaFreeHost(cx.staging);
  cx.staging = nullptr;
  cx.staging_bytes = cx.staging_used = 0;
  profile_release(cx);
  cudaStreamDestroy(cx.stream);
  cx.stream = nullptr;
}

void* device_allocate(CudaContext&, size_t bytes) {
  void* pointer = nullptr;
  check(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes), "cudaMalloc", bytes);
  return pointer;
}

void device_release(CudaContext&, void* pointer) {
  // cudaFree waits for the device first. Its status is not checked: release runs in
  // destructors, and an earlier kernel fault it might report surfaces at the next wait.
  if (pointer) cudaFree(pointer);
}

// Uploads up to this size go through pinned staging; larger ones (weights at the start or on
// resume) copy straight from pageable memory, which waits for the stream first.
constexpr size_t kStagedUploadLimit = size_t(16) << 20;

void upload(CudaContext& cx, void* device_destination, const void* host_source, size_t bytes) {
  if (!bytes) return;
  // From pageable memory, cudaMemcpyAsync waits for the stream before it copies: a host wait in
  // every micro-batch (the tokens and targets), stalling the host until the previous backward
  // has run. Copied first into pinned memory, the upload is queued like a kernel. The staging
  // buffer fills up between synchronisations (every micro-batch reads its loss) and only then
  // starts over, so no queued copy is still reading what is overwritten.
  if (bytes > kStagedUploadLimit) {
    check(
        cudaMemcpyAsync(device_destination, host_source, bytes, cudaMemcpyHostToDevice, cx.stream),
        "upload", bytes);
    return;
  }
  const size_t offset = (cx.staging_used + 255) / 256 * 256;
  if (offset + bytes > cx.staging_bytes) {
    synchronize(cx);  // every staged copy has run: the buffer may move or start over
    if (bytes > cx.staging_bytes) {
      if (cx.staging) cudaFreeHost(cx.staging);
      cx.staging = nullptr;
      cx.staging_bytes = 0;
      const size_t size = std::max(bytes, size_t(1) << 20);
      check(cudaMallocHost(reinterpret_cast<void**>(&cx.staging), size), "cudaMallocHost", size);
      cx.staging_bytes = size;
    }
    return upload(cx, device_destination, host_source, bytes);
  }
  std::memcpy(cx.staging + offset, host_source, bytes);
  check(cudaMemcpyAsync(device_destination, cx.staging + offset, bytes, cudaMemcpyHostToDevice,
                        cx.stream),
        "upload", bytes);
  cx.staging_used = offset + bytes;
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
  cx.staging_used = 0;  // no queued copy reads the staging buffer any more
}

// ---- `collage bench --profile` ----

// Launches recorded before the events are read and reused: the pool's size (2 events each).
constexpr size_t kProfiledLaunches = 4096;

struct LaunchProfile {
  std::vector<cudaEvent_t> events;  // 2k and 2k + 1 around launch k; created once, reused
  std::vector<int> families;        // launch k's family, since the last fold
  OpFamilyTotals totals;
};

namespace {

// Waits for the stream and adds the recorded launches' times to their families; the events
// are then free again. (Not counted in cx.synchronizations: it is the profile's wait.)
void fold(CudaContext& cx, LaunchProfile& p) {
  check(cudaStreamSynchronize(cx.stream), "a kernel or copy on the stream failed");
  for (size_t k = 0; k < p.families.size(); k++) {
    float ms = 0;
    // A pair a failed launch left without its stop event reads as an error: skipped.
    if (cudaEventElapsedTime(&ms, p.events[2 * k], p.events[2 * k + 1]) == cudaSuccess)
      p.totals.ms[size_t(p.families[k])] += ms;
  }
  p.families.clear();
}

}  // namespace

void profile_start(CudaContext& cx) {
  if (!cx.profile_pool) cx.profile_pool = new LaunchProfile;
  LaunchProfile& p = *cx.profile_pool;
  p.families.clear();
  p.totals = {};
  cx.profile = &p;
}

std::vector<OpFamilyTime> profile_stop(CudaContext& cx) {
  if (!cx.profile) return {};
  LaunchProfile& p = *cx.profile;
  cx.profile = nullptr;
  fold(cx, p);
  return p.totals.table();
}

void profile_launch_begin(CudaContext& cx, const char* op) {
  LaunchProfile& p = *cx.profile;
  if (p.families.size() == kProfiledLaunches) fold(cx, p);
  const size_t k = p.families.size();
  while (p.events.size() < 2 * (k + 1)) {
    cudaEvent_t event = nullptr;
    check(cudaEventCreate(&event), "cudaEventCreate");
    p.events.push_back(event);
  }
  const int family = int(op_family(op));
  p.families.push_back(family);
  p.totals.launches[size_t(family)]++;
  check(cudaEventRecord(p.events[2 * k], cx.stream), "cudaEventRecord");
}

void profile_launch_end(CudaContext& cx) {
  LaunchProfile& p = *cx.profile;
  check(cudaEventRecord(p.events[2 * (p.families.size() - 1) + 1], cx.stream), "cudaEventRecord");
}

void profile_release(CudaContext& cx) {
  cx.profile = nullptr;
  if (!cx.profile_pool) return;
  for (cudaEvent_t event : cx.profile_pool->events) cudaEventDestroy(event);
  delete cx.profile_pool;
  cx.profile_pool = nullptr;
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

std::string gpu_model_name(int device) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) return "";
  return properties.name;
}

}  // namespace collage::cuda
