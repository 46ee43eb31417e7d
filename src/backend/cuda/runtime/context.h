#pragma once
// CudaContext: what every kernel launcher gets besides its tensors (like cpu/context.h): the
// stream, device properties, the GEMM engine, named device scratch and the launch and
// synchronisation counters that tests and `collage bench` read.
//
// The cuda backend's host code and kernels build twice: for the GPU (nvcc + cudart) and for
// the host SIMT emulator (g++, COLLAGE_EMULATED). The two builds live in one executable in
// different inline namespaces, collage::cuda::device and collage::cuda::emulated; inside a
// build, code says collage::cuda:: and gets its own.
#include <array>
#include <cstddef>
#include <cstdint>

#if defined(COLLAGE_EMULATED)
#define COLLAGE_CUDA_VARIANT_BEGIN inline namespace emulated {
namespace simt {
class Stream;
}
#else
#include <cuda_runtime_api.h>
#define COLLAGE_CUDA_VARIANT_BEGIN inline namespace device {
#endif
#define COLLAGE_CUDA_VARIANT_END }

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

#if defined(COLLAGE_EMULATED)
using Stream = ::simt::Stream*;
#else
using Stream = cudaStream_t;
#endif

// Device memory that grows to the largest request and is then reused (named scratch).
struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
};

// The backend's device scratch, one named buffer per use. A buffer holds one op's data only
// while that op's kernels run (in stream order); every size is set by the op's shapes, so
// scratch reaches its final size in the first training step and nothing is allocated after.
struct CudaScratch {
  DeviceBuffer embedding_rows;      // embedding_backward: (N) rows sorted by token, group starts
  DeviceBuffer attention_delta;     // attention_backward: (B, NH, T) fp32 D_i = Σ_j P_ij·dP_ij
  DeviceBuffer attention_dq;        // attention_backward (tensor cores): dq sums, turn counters
  DeviceBuffer column_partials;     // layernorm/bias backward: (row chunks, C) fp32 column sums
  DeviceBuffer block_partials;      // sum, sum_squares: per-block partial sums
  DeviceBuffer optimizer_tensors;   // optimizer_steps: the tensors of one launch, their chunks
  DeviceBuffer optimizer_partials;  // optimizer_steps: per-chunk EDQ partial sums
  DeviceBuffer rope_table;          // rope: (T, HS/2) cos then (T, HS/2) sin, fp32
  // Every buffer above, for close_context to free (one list, so a new buffer is not missed).
  std::array<DeviceBuffer*, 8> all() {
    return {&embedding_rows, &attention_delta,   &attention_dq,       &column_partials,
            &block_partials, &optimizer_tensors, &optimizer_partials, &rope_table};
  }
};

struct GemmEngine;  // gemm.h: cuBLASLt handle, workspace and cached algorithms (or the cpu GEMM)
// `collage bench --profile`'s record of every launch by op family (runtime.h, profile_*): CUDA
// event pairs on a GPU, host timestamps in the emulator's stream order.
struct LaunchProfile;

struct CudaContext {
  Stream stream{};
  int device = 0;
  int sm_count = 1;
  size_t max_shared_bytes = 48 << 10;  // per block without an opt-in
  GemmEngine* gemm = nullptr;
  CudaScratch scratch;
  // Pinned host memory the GPU build stages small uploads through (runtime_device.cpp), so
  // that queuing the tokens does not wait for the stream; filled from the start after every
  // synchronisation, when no queued copy can still be reading it.
  char* staging = nullptr;
  size_t staging_bytes = 0, staging_used = 0;
  int64_t launches = 0;          // kernels started (launch() in kernels/common.cuh counts)
  int64_t synchronizations = 0;  // host waits for the stream (runtime.h counts)
  // Non-null only between profile_start and profile_stop (runtime.h): launch() and gemm() then
  // record each launch's time by family. Null (always, outside `bench --profile`): nothing.
  LaunchProfile* profile = nullptr;
  LaunchProfile* profile_pool = nullptr;  // its events, kept for the next profile_start
  // The (T, HS, base) whose rope table is in scratch.rope_table (built once per shape).
  int rope_T = 0, rope_HS = 0;
  float rope_base = 0;
};

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
