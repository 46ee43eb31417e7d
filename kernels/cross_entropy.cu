// Softmax cross-entropy over the first V of Vp logit columns (the rest is vocab padding), fused:
// the probabilities are never stored (src/backend/backend.h). The cpu version is
// src/backend/cpu/cross_entropy.cpp; this follows its math: an online max / Σ exp with
// math::exp_approx, lse = max + logf(Σ exp(x − max)), loss = lse − x[target], and in the
// backward dx[j] += (exp_approx(x[j] − lse) − [j == target])·dloss with the same expressions.
// The Σ exp is formed in a different order (per thread, then across the block), so losses and
// gradients agree with the cpu to rounding, not bits (tests/cuda/cross_entropy_test.cpp).
//
// One block per row. Both kernels first compute the row's statistics (row_statistics: the max,
// Σ exp(x − max) and the target's logit), then use them; the backward recomputes them rather
// than keeping state between the calls. Targets are checked by the model on the host: here a
// target < 0 is ignored (loss 0, no gradient), and so is a target ≥ V (the kernel cannot
// throw; it must only not read outside the row).
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/kernels.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kCrossEntropyThreads = 256;
constexpr int kCrossEntropyWarps = kCrossEntropyThreads / kWarpSize;
constexpr int kVector = Packed128<bf16_t>::size;  // 8 bf16 in one 128-bit access
// row_statistics' shared memory: the warps' maxima and sums, then the row's three values.
constexpr int kStatisticsShared = 2 * kCrossEntropyWarps + 3;

// The statistics of one row (or of one shard of a row's columns).
struct RowStatistics {
  float max;           // max_j x[j]
  float sum_exp;       // Σ_j exp_approx(x[j] − max)
  float target_logit;  // x[target] if the target is among the columns, else 0
};

// (max, Σ exp(x − max)) after adding the pair (other_max, other_sum): both sums rescaled to the
// larger max. A side with max −inf has sum 0 and is skipped rather than scaled by
// exp_approx(−inf − −inf) = NaN.
__device__ __forceinline__ void combine(float& max, float& sum, float other_max, float other_sum) {
  const float m = fmaxf(max, other_max);
  const float mine = max == m ? sum : sum * math::exp_approx(max - m);
  const float theirs = other_max == m ? other_sum : other_sum * math::exp_approx(other_max - m);
  max = m;
  sum = mine + theirs;
}

// Folds n consecutive values into the running (max, sum): their max first, then the running
// sum rescaled to the new max once, then the values' exps added in order (like the cpu's
// chunks, src/backend/cpu/cross_entropy.cpp).
template <int n>
__device__ __forceinline__ void fold(float& max, float& sum, const float (&x)[n], int valid) {
  float chunk_max = max;
  for (int k = 0; k < n && k < valid; k++) chunk_max = fmaxf(chunk_max, x[k]);
  if (chunk_max > max) {
    sum = sum == 0.0f ? 0.0f : sum * math::exp_approx(max - chunk_max);
    max = chunk_max;
  }
  for (int k = 0; k < n && k < valid; k++) sum += math::exp_approx(x[k] - max);
}

// The statistics of row x (V columns used), by the whole block; valid in every thread.
// kVectorized: columns in Packed128 groups of 8 (x 16-byte aligned). shared: the kernel's
// kStatisticsShared floats.
//
// This is a stage of its own on purpose: a vocab-parallel (tensor-parallel) version runs it on
// its shard of the columns, all-reduces the three values across the ranks (max; Σ exp rescaled
// to the global max with combine(); the target logit summed, every rank but the owner giving
// 0), and then runs the loss / gradient stage below with the global statistics.
template <bool kVectorized>
__device__ RowStatistics row_statistics(const bf16_t* x, int V, int target, float* shared) {
  float* warp_max = shared;                         // (warps)
  float* warp_sums = shared + kCrossEntropyWarps;   // (warps)
  float* result = shared + 2 * kCrossEntropyWarps;  // max, Σ exp, target logit
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  float max = -INFINITY, sum = 0.0f;
  if constexpr (kVectorized) {
    for (int j = tid * kVector; j < V; j += blockDim.x * kVector) {
      const Packed128<bf16_t> packed = load128(x + j);
      float values[kVector];
      for (int k = 0; k < kVector; k++) values[k] = to_float(packed.values[k]);
      fold(max, sum, values, V - j);  // the last group may reach into the padding
    }
  } else {
    for (int j = tid; j < V; j += blockDim.x) {
      const float values[1] = {to_float(x[j])};
      fold(max, sum, values, 1);
    }
  }
  // Across the warp (a fixed butterfly), then across the warps in order.
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    combine(max, sum, other_max, other_sum);
  }
  if (lane == 0) warp_max[warp] = max, warp_sums[warp] = sum;
  __syncthreads();
  if (tid == 0) {
    float row_max = warp_max[0], row_sum = warp_sums[0];
    for (int w = 1; w < int(blockDim.x / kWarpSize); w++)
      combine(row_max, row_sum, warp_max[w], warp_sums[w]);
    result[0] = row_max, result[1] = row_sum;
    result[2] = target >= 0 && target < V ? to_float(x[target]) : 0.0f;
  }
  __syncthreads();
  return {result[0], result[1], result[2]};
}

// log Σ exp over the row from its statistics, as the cpu: max + log(Σ exp(x − max)).
__device__ __forceinline__ float log_sum_exp(const RowStatistics& s) {
  return s.max + logf(s.sum_exp);
}

// losses (N): block `row` computes losses[row] from logits (N, Vp).
template <bool kVectorized>
__global__ void cross_entropy_forward_kernel(float* losses, const bf16_t* logits,
                                             const int32_t* targets, int V, int Vp) {
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  if (target < 0 || target >= V) {  // ignored (the whole block leaves together)
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  __shared__ float statistics_shared[kStatisticsShared];
  const RowStatistics s =
      row_statistics<kVectorized>(logits + row * Vp, V, target, statistics_shared);
  if (threadIdx.x == 0) losses[row] = log_sum_exp(s) - s.target_logit;
}

// dlogits (N, Vp) += (softmax − onehot(target))·dloss in columns j < V of block `row`'s row.
template <bool kVectorized>
__global__ void cross_entropy_backward_kernel(bf16_t* dlogits, const bf16_t* logits,
                                              const int32_t* targets, int V, int Vp, float dloss) {
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  if (target < 0 || target >= V) return;  // ignored rows get nothing
  const bf16_t* x = logits + row * Vp;    // (Vp)
  bf16_t* dx = dlogits + row * Vp;        // (Vp)
  __shared__ float statistics_shared[kStatisticsShared];
  const float lse = log_sum_exp(row_statistics<kVectorized>(x, V, target, statistics_shared));
  // The cpu's expressions: exp_approx(x − lse)·dloss, and (exp_approx(x − lse) − 1)·dloss at
  // the target.
  auto gradient = [&](int j, float x_j, float dx_j) {
    const float p = math::exp_approx(x_j - lse);
    return dx_j + (j == target ? p - 1.0f : p) * dloss;
  };
  int scalar_begin = 0;  // columns from here on go one at a time
  if constexpr (kVectorized) {
    const int groups = V / kVector;  // whole groups only: the padding columns are not written
    for (int group = threadIdx.x; group < groups; group += blockDim.x) {
      const int j = group * kVector;
      const Packed128<bf16_t> xs = load128(x + j);
      Packed128<bf16_t> ds = load128(dx + j);
      for (int k = 0; k < kVector; k++)
        ds.values[k] = to_bf16(gradient(j + k, to_float(xs.values[k]), to_float(ds.values[k])));
      store128(dx + j, ds);
    }
    scalar_begin = groups * kVector;
  }
  for (int j = scalar_begin + int(threadIdx.x); j < V; j += blockDim.x)
    dx[j] = to_bf16(gradient(j, to_float(x[j]), to_float(dx[j])));
}

void check_shape(const char* op, int64_t N, int V, int Vp) {
  COLLAGE_KERNEL_CHECK(N >= 0 && N <= INT32_MAX && V >= 1 && Vp >= V,
                       "%s: bad shape N = %lld, V = %d, Vp = %d (need 1 <= V <= Vp)", op,
                       static_cast<long long>(N), V, Vp);
}

}  // namespace

void cross_entropy_forward(CudaContext& cx, float* losses, const bf16_t* logits,
                           const int32_t* targets, int64_t N, int V, int Vp) {
  check_shape("cross_entropy_forward", N, V, Vp);
  if (N == 0) return;
  COLLAGE_KERNEL_CHECK(losses && logits && targets,
                       "cross_entropy_forward: null tensor (N = %lld, V = %d, Vp = %d)",
                       static_cast<long long>(N), V, Vp);
  // 128-bit loads need every row start 16-byte aligned: Vp a multiple of 8.
  if (Vp % kVector == 0 && aligned16(logits)) {
    launch(cx, "cross_entropy_forward", cross_entropy_forward_kernel<true>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(losses, logits, targets, V, Vp);
  } else {
    launch(cx, "cross_entropy_forward", cross_entropy_forward_kernel<false>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(losses, logits, targets, V, Vp);
  }
}

void cross_entropy_backward(CudaContext& cx, bf16_t* dlogits, const bf16_t* logits,
                            const int32_t* targets, int64_t N, int V, int Vp, float dloss) {
  check_shape("cross_entropy_backward", N, V, Vp);
  if (!dlogits || N == 0) return;  // null gradient: not computed
  COLLAGE_KERNEL_CHECK(logits && targets,
                       "cross_entropy_backward: null logits or targets (N = %lld, V = %d, Vp = %d)",
                       static_cast<long long>(N), V, Vp);
  if (Vp % kVector == 0 && aligned16(logits, dlogits)) {
    launch(cx, "cross_entropy_backward", cross_entropy_backward_kernel<true>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(dlogits, logits, targets, V, Vp, dloss);
  } else {
    launch(cx, "cross_entropy_backward", cross_entropy_backward_kernel<false>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(dlogits, logits, targets, V, Vp, dloss);
  }
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
