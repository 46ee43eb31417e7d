#pragma once
// What every kernel file includes. One kernel source builds two ways:
//  - by nvcc, for the GPU (CMake's cuda backend, sm_80/sm_90), and
//  - by g++ as C++, against the host SIMT emulator (src/simt/simt.h), for the cuda-emulated
//    backend that CI runs (docs/ARCHITECTURE.md, "Host emulation of CUDA").
// So kernels use only what both provide: threadIdx/blockIdx/blockDim/gridDim, __syncthreads,
// __syncwarp, __shfl_*_sync, __ballot_sync, integer and float atomics, static __shared__
// arrays, dynamic shared memory through COLLAGE_DYNAMIC_SHARED, the math functions of
// <cmath> plus rsqrtf/__expf/__fdividef, 128-bit loads through Packed128, the tensor-core
// instructions of kernels/mma.cuh and the cp.async of kernels/async_copy.cuh (the only inline
// PTX), and launch() below instead of <<<>>>.
// No other inline PTX, no cooperative groups, no __constant__.
//
// The two builds put their symbols in different inline namespaces (collage::cuda::device and
// collage::cuda::emulated) so both can live in one executable; code inside either simply says
// collage::cuda::.
#include <cstddef>
#include <cstdint>
#include <source_location>

#include "backend/cuda/runtime/context.h"
#include "backend/cuda/runtime/runtime.h"
#include "numerics/bf16_math.h"
#include "numerics/elementwise_math.h"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
// extern __shared__ cannot be spelled the same way for the emulator: kernels write
// COLLAGE_DYNAMIC_SHARED(float, name); and get `float* name` (16-byte aligned).
#define COLLAGE_DYNAMIC_SHARED(T, name)              \
  extern __shared__ __align__(16) char name##_raw[]; \
  T* name = reinterpret_cast<T*>(name##_raw)
#else
#include "simt/simt.h"
#define COLLAGE_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::simt::dynamic_shared_memory())
#endif

// COLLAGE_UNROLL before a loop of constant trip count: nvcc unrolls it, so that arrays indexed
// by its counter (fragments, accumulators) stay in registers; g++ ignores it.
#if defined(__CUDACC__)
#define COLLAGE_UNROLL _Pragma("unroll")
#else
#define COLLAGE_UNROLL
#endif

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

using bf16_t = math::bfloat;  // __nv_bfloat16: the storage of parameters, grads, activations

// fp32 <-> bf16 as everywhere in collage: exact widening, round-to-nearest-even narrowing.
__device__ __forceinline__ float to_float(bf16_t x) { return math::to_f32(x); }
__device__ __forceinline__ bf16_t to_bf16(float x) { return math::rn(x); }
// Two values stored side by side, rounded as to_bf16 each: on the GPU one paired conversion
// (cvt.rn.bf16x2.f32, one F2FP) where two to_bf16 would be two, and a permute to pack them.
__device__ __forceinline__ void to_bf16_pair(bf16_t& first, bf16_t& second, float a, float b) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
  first = __low2bfloat16(pair);
  second = __high2bfloat16(pair);
#else
  first = to_bf16(a);
  second = to_bf16(b);
#endif
}

constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}
__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}
__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// 16 bytes of T moved with one 128-bit load or store (8 bf16, 4 floats): the pointer must be
// 16-byte aligned, which holds for arena tensors at offsets that are multiples of 16 bytes.
template <typename T>
struct alignas(16) Packed128 {
  static constexpr int size = 16 / sizeof(T);
  T values[size];
};
template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T* address) {
  return *reinterpret_cast<const Packed128<T>*>(address);
}
template <typename T>
__device__ __forceinline__ void store128(T* address, const Packed128<T>& value) {
  *reinterpret_cast<Packed128<T>*>(address) = value;
}
// W consecutive bf16 elements as fp32: one 128-bit access for W = 8, one element for W = 1.
// Kernels are templated on W and the launcher picks 8 when sizes and alignment allow.
template <int W>
struct Chunk {
  float v[W];
};
template <int W>
__device__ __forceinline__ Chunk<W> load_chunk(const bf16_t* p) {
  Chunk<W> chunk;
  if constexpr (W == Packed128<bf16_t>::size) {
    const Packed128<bf16_t> packed = load128(p);
    for (int k = 0; k < W; k++) chunk.v[k] = to_float(packed.values[k]);
  } else {
    static_assert(W == 1, "a chunk is one element or one Packed128");
    chunk.v[0] = to_float(*p);
  }
  return chunk;
}
template <int W>
__device__ __forceinline__ void store_chunk(bf16_t* p, const Chunk<W>& chunk) {
  if constexpr (W == Packed128<bf16_t>::size) {
    Packed128<bf16_t> packed;
    for (int k = 0; k < W; k += 2)
      to_bf16_pair(packed.values[k], packed.values[k + 1], chunk.v[k], chunk.v[k + 1]);
    store128(p, packed);
  } else {
    *p = to_bf16(chunk.v[0]);
  }
}
// Whether every pointer is 16-byte aligned (a launcher picks the Packed128 path only then).
inline bool aligned16(const void* pointer) {
  return (reinterpret_cast<uintptr_t>(pointer) & 15) == 0;
}
template <typename... Pointers>
bool aligned16(const void* first, Pointers... rest) {
  return aligned16(first) && aligned16(rest...);
}

// ceil(a / b) for launch shapes.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// COLLAGE_KERNEL_CHECK(condition, "printf format", args...): the argument checks of the
// exported entries; throws collage::Error with the formatted message. (Kernel files cannot use
// core/error.h: nvcc does not compile fmt's compile-time format checks.)
[[noreturn]] void throw_invalid_argument(const char* format, ...)
    __attribute__((format(printf, 1, 2)));
#define COLLAGE_KERNEL_CHECK(condition, ...)                                \
  do {                                                                      \
    if (!(condition)) ::collage::cuda::throw_invalid_argument(__VA_ARGS__); \
  } while (0)

// launch(cx, "op", kernel, grid, block, shared_bytes)(args...): the one way kernels are
// started, in place of kernel<<<grid, block, shared_bytes, stream>>>(args...). Counts the
// launch in cx.launches (and, under `collage bench --profile`, times it by the op name's
// family: runtime.h), queues it on cx.stream and checks it: a bad launch configuration
// throws collage::Error naming the op, the call site and the shape, so the trainer's "name the
// step, write no checkpoint" path runs (faults inside a kernel surface at the next
// synchronisation, as on a GPU).
[[noreturn]] void throw_launch_error(const char* op, const char* error, dim3 grid, dim3 block,
                                     size_t shared_bytes, const std::source_location& where);

template <typename... Params>
struct Launch {
  CudaContext& cx;
  const char* op;
  void (*kernel)(Params...);
  dim3 grid, block;
  size_t shared_bytes;
  std::source_location where;

  template <typename... Args>
  void operator()(Args... args) const {
    cx.launches++;
    if (cx.profile) profile_launch_begin(cx, op);  // `collage bench --profile` only
#if defined(__CUDACC__)
    // Over 48 KiB of dynamic shared memory a kernel must opt in (up to 227 KiB on sm_90).
    if (shared_bytes > (48u << 10)) {
      const cudaError_t status = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes));
      if (status != cudaSuccess)
        throw_launch_error(op, cudaGetErrorString(status), grid, block, shared_bytes, where);
    }
    kernel<<<grid, block, shared_bytes, cx.stream>>>(static_cast<Params>(args)...);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess)
      throw_launch_error(op, cudaGetErrorString(status), grid, block, shared_bytes, where);
#else
    if (const char* error = ::simt::launch(cx.stream, kernel, grid, block, shared_bytes,
                                           static_cast<Params>(args)...))
      throw_launch_error(op, error, grid, block, shared_bytes, where);
#endif
    if (cx.profile) profile_launch_end(cx);
  }
};

template <typename... Params>
Launch<Params...> launch(CudaContext& cx, const char* op, void (*kernel)(Params...), dim3 grid,
                         dim3 block, size_t shared_bytes = 0,
                         std::source_location where = std::source_location::current()) {
  return {cx, op, kernel, grid, block, shared_bytes, where};
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
