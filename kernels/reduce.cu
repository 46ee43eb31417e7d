// The reductions whose result the host reads (src/backend/backend.h): sum (Σ x over fp32, the
// loss) and sum_squares (Σ x² over bf16, the gradient norm), in double like the cpu's
// chunked_sum (src/backend/cpu/elementwise.cpp).
//
// Deterministic two passes, no atomics: a number of blocks derived from n only (at most
// kMaxReduceBlocks) each sums a grid-stride share of x in double and writes its partial to
// cx.scratch.block_partials; then one block adds the partials in a fixed order and overwrites
// *result. The order of the additions depends on n and on whether x is 16-byte aligned (the
// 128-bit path), never on the device.
#include <algorithm>

#include "backend/cuda/runtime/runtime.h"
#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kReduceThreads = 256;
constexpr int64_t kMaxReduceBlocks = 512;
// A block for every this many elements (8 per thread) until kMaxReduceBlocks.
constexpr int64_t kElementsPerBlock = 8 * kReduceThreads;

struct Widen {  // sum: x as double
  __device__ double operator()(float x) const { return double(x); }
};
struct Square {  // sum_squares: x widened to double, then squared (exact: 8-bit significands)
  __device__ double operator()(bf16_t x) const {
    const double d = double(to_float(x));
    return d * d;
  }
};

// The sum over the block of every thread's value, in a fixed tree order; valid in thread 0.
// warp_sums: the kernel's shared (kReduceThreads / kWarpSize).
__device__ double block_sum(double value, double* warp_sums) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  value = warp_sum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = 0.0;
  if (warp == 0) {
    if (lane < int(blockDim.x / kWarpSize)) value = warp_sums[lane];
    value = warp_sum(value);
  }
  return value;
}

// partials[block] = Σ term(x[i]) over this block's share of x (n), in double. Elements
// [0, vector_groups · P) are read as Packed128 groups of P (vector_groups is 0 unless x is
// 16-byte aligned), the rest one at a time; both grid-stride.
template <typename T, typename Term>
__global__ void block_partials_kernel(double* partials, const T* x, int64_t n,
                                      int64_t vector_groups, Term term) {
  constexpr int P = Packed128<T>::size;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  double acc = 0.0;
  for (int64_t group = first; group < vector_groups; group += stride) {
    const Packed128<T> packed = load128(x + group * P);
    for (int k = 0; k < P; k++) acc += term(packed.values[k]);
  }
  for (int64_t i = vector_groups * P + first; i < n; i += stride) acc += term(x[i]);
  __shared__ double warp_sums[kReduceThreads / kWarpSize];
  acc = block_sum(acc, warp_sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// *result = Σ partials (count), one block: thread t adds partials t, t + blockDim, ... in
// order, then the block's tree.
__global__ void final_sum_kernel(double* result, const double* partials, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  __shared__ double warp_sums[kReduceThreads / kWarpSize];
  acc = block_sum(acc, warp_sums);
  if (threadIdx.x == 0) *result = acc;
}

template <typename T, typename Term>
void reduce(CudaContext& cx, const char* op, double* result, const T* x, int64_t n, Term term) {
  // n and x: checked by the contract (backend_contract.h); `result` is the backend's own slot.
  COLLAGE_KERNEL_CHECK(result, "%s: null result (n = %lld)", op, static_cast<long long>(n));
  const int blocks = int(std::min(ceil_div(n, kElementsPerBlock), kMaxReduceBlocks));
  // Always room for the most blocks: the buffer then never grows between two reductions
  // (growing waits for the stream; runtime.h).
  double* partials = scratch<double>(cx, cx.scratch.block_partials, kMaxReduceBlocks);
  if (blocks > 0) {
    const int64_t vector_groups = aligned16(x) ? n / Packed128<T>::size : 0;
    launch(cx, op, block_partials_kernel<T, Term>, dim3(blocks), dim3(kReduceThreads))(
        partials, x, n, vector_groups, term);
  }
  // With n = 0 there are no partials and the result is 0.
  launch(cx, op, final_sum_kernel, dim3(1), dim3(kReduceThreads))(result, partials, blocks);
}

}  // namespace

void sum(CudaContext& cx, double* result, const float* x, int64_t n) {
  reduce(cx, "sum", result, x, n, Widen{});
}

void sum_squares(CudaContext& cx, double* result, const bf16_t* x, int64_t n) {
  reduce(cx, "sum_squares", result, x, n, Square{});
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
