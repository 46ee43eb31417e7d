// runtime.h on the host SIMT emulator (src/simt): device memory is the emulator's protected
// host memory, the stream its in-order queue. A kernel fault or a failed queued function
// comes back from simt::synchronize as a message, thrown here as collage::Error.
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

#include "backend/cuda/runtime/gemm.h"
#include "backend/cuda/runtime/runtime.h"
#include "core/error.h"
#include "simt/simt.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

void open_context(CudaContext& cx, int device) {
  COLLAGE_CHECK(device == 0, "cuda-emulated: there is one emulated device, not device {}", device);
  cx.device = 0;
  cx.sm_count = 1;  // blocks run one after another
  cx.max_shared_bytes = 48 << 10;
  cx.stream = simt::create_stream();
  cx.gemm = create_gemm_engine(cx);
}

void close_context(CudaContext& cx) {
  if (!cx.stream) return;
  simt::synchronize(cx.stream);  // a destructor must not throw: errors were reported before
  for (DeviceBuffer* buffer : cx.scratch.all()) {
    if (buffer->data) simt::device_free(buffer->data);
    *buffer = {};
  }
  destroy_gemm_engine(cx, cx.gemm);
  cx.gemm = nullptr;
  profile_release(cx);
  simt::destroy_stream(cx.stream);
  cx.stream = nullptr;
}

void* device_allocate(CudaContext&, size_t bytes) {
  void* pointer = simt::device_malloc(bytes == 0 ? 1 : bytes);
  COLLAGE_CHECK(pointer, "cuda-emulated: cannot allocate {} bytes of device memory", bytes);
  return pointer;
}

void device_release(CudaContext&, void* pointer) {
  simt::device_free(pointer);  // runs what is queued first, as cudaFree waits for the device
}

void upload(CudaContext& cx, void* device_destination, const void* host_source, size_t bytes) {
  if (bytes) simt::memcpy_async(cx.stream, device_destination, host_source, bytes);
}

void download(CudaContext& cx, void* host_destination, const void* device_source, size_t bytes) {
  if (bytes) simt::memcpy_async(cx.stream, host_destination, device_source, bytes);
  synchronize(cx);
}

void copy_on_device(CudaContext& cx, void* destination, const void* source, size_t bytes) {
  if (bytes) simt::memcpy_async(cx.stream, destination, source, bytes);
}

void fill_bytes(CudaContext& cx, void* destination, int byte, size_t bytes) {
  if (bytes) simt::memset_async(cx.stream, destination, byte, bytes);
}

void synchronize(CudaContext& cx) {
  cx.synchronizations++;
  if (const char* error = simt::synchronize(cx.stream)) fail("cuda-emulated: {}", error);
}

// ---- `collage bench --profile` ----
// The emulator's host time of each launch: timestamps taken by functions queued on the stream
// before and after it, so they bracket the launch's run in stream order, at once or deferred.

constexpr size_t kProfiledLaunches = 4096;  // launches recorded before they are summed

struct LaunchProfile {
  using Clock = std::chrono::steady_clock;
  std::deque<std::array<Clock::time_point, 2>> stamps;  // launch k's start and stop (stable)
  std::vector<int> families;                            // launch k's family, since the last fold
  OpFamilyTotals totals;
};

namespace {

// Runs what is queued and adds the recorded launches' times to their families.
void fold(CudaContext& cx, LaunchProfile& p) {
  if (const char* error = simt::synchronize(cx.stream)) fail("cuda-emulated: {}", error);
  for (size_t k = 0; k < p.families.size(); k++) {
    const auto [start, stop] = p.stamps[k];
    if (stop > start)  // a refused launch queued no stop
      p.totals.ms[size_t(p.families[k])] +=
          std::chrono::duration<double, std::milli>(stop - start).count();
  }
  p.families.clear();
  p.stamps.clear();
}

void stamp(CudaContext& cx, LaunchProfile::Clock::time_point* slot) {
  simt::enqueue(cx.stream, [slot] { *slot = LaunchProfile::Clock::now(); });
}

}  // namespace

void profile_start(CudaContext& cx) {
  if (!cx.profile_pool) cx.profile_pool = new LaunchProfile;
  LaunchProfile& p = *cx.profile_pool;
  p.families.clear();
  p.stamps.clear();
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
  const int family = int(op_family(op));
  p.families.push_back(family);
  p.totals.launches[size_t(family)]++;
  p.stamps.push_back({});
  stamp(cx, &p.stamps.back()[0]);
}

void profile_launch_end(CudaContext& cx) { stamp(cx, &cx.profile->stamps.back()[1]); }

void profile_release(CudaContext& cx) {
  cx.profile = nullptr;
  delete cx.profile_pool;
  cx.profile_pool = nullptr;
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
