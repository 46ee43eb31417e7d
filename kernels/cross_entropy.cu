// Softmax cross-entropy over the first V of Vp logit columns (the rest is vocab padding), fused:
// the probabilities are never stored (src/backend/backend.h). The cpu version is
// src/backend/cpu/cross_entropy.cpp; this follows its math: an online max / Σ exp with
// math::exp_approx, lse = max + logf(Σ exp(x − max)), loss = lse − x[target], and in the
// backward dx[j] += (exp_approx(x[j] − lse) − [j == target])·dloss with the same expressions.
// The Σ exp is formed in a different order (per thread, then across the block), so losses and
// gradients agree with the cpu to rounding, not bits (tests/cuda/cross_entropy_test.cpp).
//
// The vocab-parallel stages at the end of this file (cross_entropy_shard_*, tensor parallelism,
// docs/PARALLEL.md §3) take the same math apart so that the caller can all-reduce between them:
// the max of a shard's columns, then Σ exp_approx(x − max) with the global max (no online
// rescaling), then lse = max + logf(Σ) and the loss, and the backward from the saved lse. The
// max, the loss and the backward compute exactly what the cpu computes from the same inputs
// (max is exact; the other two are elementwise); only the Σ exp is summed in another order.
//
// One block per row. Both fused kernels first compute the row's statistics (row_statistics: the
// max, Σ exp(x − max) and the target's logit), then use them; the backward recomputes them rather
// than keeping state between the calls. Targets are checked by the model on the host: here a
// target < 0 is ignored (loss 0, no gradient), and so is a target ≥ V (the kernel cannot
// throw; it must only not read outside the row). Shapes and pointers are checked by the
// Backend contract (src/backend/backend_contract.h) before any entry here runs.
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
// The vocab-parallel (tensor-parallel) version does not use it: it needs the global max before
// the Σ exp so that the ranks' sums add with a plain all-reduce (cross_entropy_shard_* below).
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
      // Only the last group may reach into the padding; the others fold with a constant count,
      // so nvcc drops the per-value test (~4 of the ~50 instructions a value took).
      if (V - j >= kVector) {
        fold(max, sum, values, kVector);
      } else {
        fold(max, sum, values, V - j);
      }
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

// losses (N): block `row` computes losses[row] from logits (N, Vp); row_lse (N), unless null,
// gets the row's lse (0 where ignored): what cross_entropy_backward_kernel would recompute.
template <bool kVectorized>
__global__ void cross_entropy_forward_kernel(float* losses, float* row_lse, const bf16_t* logits,
                                             const int32_t* targets, int V, int Vp) {
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  if (target < 0 || target >= V) {  // ignored (the whole block leaves together)
    if (threadIdx.x == 0) {
      losses[row] = 0.0f;
      if (row_lse) row_lse[row] = 0.0f;
    }
    return;
  }
  __shared__ float statistics_shared[kStatisticsShared];
  const RowStatistics s =
      row_statistics<kVectorized>(logits + row * Vp, V, target, statistics_shared);
  if (threadIdx.x == 0) {
    const float lse = log_sum_exp(s);
    losses[row] = lse - s.target_logit;
    if (row_lse) row_lse[row] = lse;
  }
}

// dx[j] = 0 for j in [begin, end), by the whole block.
__device__ void write_zeros(bf16_t* dx, int begin, int end) {
  for (int j = begin + int(threadIdx.x); j < end; j += blockDim.x) dx[j] = to_bf16(0.0f);
}

// One row's gradient, written whole by the whole block over `width` columns: dx[j] =
// (exp_approx(x[j] − lse) − [j == target])·dloss for the columns j < columns, the cpu's
// expressions (src/backend/cpu/cross_entropy.cpp), and 0 from `columns` on (padding). A target
// outside [0, columns) (another rank's column) adds no −1. kVectorized: x and dx 16-byte
// aligned.
template <bool kVectorized>
__device__ void write_row_gradient(bf16_t* dx, const bf16_t* x, int columns, int width, float lse,
                                   int64_t target, float dloss) {
  auto gradient = [&](int j, float x_j) {  // in fp32, before its rounding to bf16
    const float p = math::exp_approx(x_j - lse);
    return (j == target ? p - 1.0f : p) * dloss;
  };
  int scalar_begin = 0;  // columns from here on go one at a time
  if constexpr (kVectorized) {
    const int groups = columns / kVector;  // whole groups only: padding columns are not written
    for (int group = threadIdx.x; group < groups; group += blockDim.x) {
      const int j = group * kVector;
      const Packed128<bf16_t> xs = load128(x + j);
      Packed128<bf16_t> ds;
      for (int k = 0; k < kVector; k += 2)
        to_bf16_pair(ds.values[k], ds.values[k + 1], gradient(j + k, to_float(xs.values[k])),
                     gradient(j + k + 1, to_float(xs.values[k + 1])));
      store128(dx + j, ds);
    }
    scalar_begin = groups * kVector;
  }
  for (int j = scalar_begin + int(threadIdx.x); j < columns; j += blockDim.x)
    dx[j] = to_bf16(gradient(j, to_float(x[j])));
  write_zeros(dx, columns, width);
}

// dlogits (N, Vp) = (softmax − onehot(target))·dloss in columns j < V of block `row`'s row, 0
// in its padding columns and across an ignored row.
template <bool kVectorized>
__global__ void cross_entropy_backward_kernel(bf16_t* dlogits, const bf16_t* logits,
                                              const int32_t* targets, int V, int Vp, float dloss) {
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  bf16_t* dx = dlogits + row * Vp;  // (Vp)
  if (target < 0 || target >= V) {  // an ignored row: zeros
    write_zeros(dx, 0, Vp);
    return;
  }
  const bf16_t* x = logits + row * Vp;  // (Vp)
  __shared__ float statistics_shared[kStatisticsShared];
  const float lse = log_sum_exp(row_statistics<kVectorized>(x, V, target, statistics_shared));
  write_row_gradient<kVectorized>(dx, x, V, Vp, lse, target, dloss);
}

// ---- vocab-parallel stages (src/backend/backend.h) ----
// logits (N, Vl) hold global columns [vocab_begin, vocab_begin + Vl); the first `real` of them
// are tokens (global column < V), the rest padding, never used.

// The block's reduction of every thread's `value`, valid in every thread: a fixed butterfly in
// each warp, then the warps in order (deterministic). warp_values: kCrossEntropyWarps floats.
// Once a kernel: the shared values are not synchronised for reuse.
__device__ float block_max(float value, float* warp_values) {
  value = warp_max(value);
  if (threadIdx.x % kWarpSize == 0) warp_values[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  float result = warp_values[0];
  for (int w = 1; w < int(blockDim.x / kWarpSize); w++) result = fmaxf(result, warp_values[w]);
  return result;
}
__device__ float block_sum(float value, float* warp_values) {
  value = warp_sum(value);
  if (threadIdx.x % kWarpSize == 0) warp_values[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  float result = warp_values[0];
  for (int w = 1; w < int(blockDim.x / kWarpSize); w++) result += warp_values[w];
  return result;
}

// Calls visit(x_j) for this thread's real columns of row x (Vl), in a fixed order.
// kVectorized: columns in Packed128 groups of 8 (x 16-byte aligned, Vl a multiple of 8, so the
// last group may reach into the padding but not past the row; those values are skipped).
template <bool kVectorized, typename Visit>
__device__ __forceinline__ void for_real_columns(const bf16_t* x, int real, Visit visit) {
  if constexpr (kVectorized) {
    for (int j = threadIdx.x * kVector; j < real; j += blockDim.x * kVector) {
      const Packed128<bf16_t> packed = load128(x + j);
      for (int k = 0; k < kVector && j + k < real; k++) visit(to_float(packed.values[k]));
    }
  } else {
    for (int j = threadIdx.x; j < real; j += blockDim.x) visit(to_float(x[j]));
  }
}

// row_max (N): block `row` takes the max of its row's real columns (−inf when there are none).
template <bool kVectorized>
__global__ void cross_entropy_shard_max_kernel(float* row_max, const bf16_t* logits, int Vl,
                                               int real) {
  const int64_t row = blockIdx.x;
  const bf16_t* x = logits + row * Vl;  // (Vl)
  float max = -INFINITY;
  for_real_columns<kVectorized>(x, real, [&](float x_j) { max = fmaxf(max, x_j); });
  __shared__ float warp_values[kCrossEntropyWarps];
  max = block_max(max, warp_values);
  if (threadIdx.x == 0) row_max[row] = max;
}

// sums (2N): block `row` writes sums[row] = Σ exp_approx(x[j] − row_max[row]) over its real
// columns and sums[N + row] = the target's logit if this shard holds it, else 0.
template <bool kVectorized>
__global__ void cross_entropy_shard_sums_kernel(float* sums, const bf16_t* logits,
                                                const int32_t* targets, const float* row_max,
                                                int64_t N, int Vl, int real, int64_t vocab_begin) {
  const int64_t row = blockIdx.x;
  const bf16_t* x = logits + row * Vl;  // (Vl)
  const float max = row_max[row];       // the global max, all-reduced by the caller
  float sum = 0.0f;
  for_real_columns<kVectorized>(x, real, [&](float x_j) { sum += math::exp_approx(x_j - max); });
  __shared__ float warp_values[kCrossEntropyWarps];
  sum = block_sum(sum, warp_values);
  if (threadIdx.x == 0) {
    // A target ≥ V lands at local_target ≥ real: not read, as the fused kernels ignore it.
    const int64_t local_target = int64_t(targets[row]) - vocab_begin;
    const bool owned = targets[row] >= 0 && local_target >= 0 && local_target < real;
    sums[row] = sum;
    sums[N + row] = owned ? to_float(x[local_target]) : 0.0f;
  }
}

// losses, lse (N): thread `row` from the all-reduced row_max (N) and sums (2N), as the cpu.
// This stage has no V: a target ≥ V (the model checks targets on the host) got no logit in the
// sums stage, so its loss comes out as lse; the backward ignores the row.
__global__ void cross_entropy_shard_loss_kernel(float* losses, float* lse, const float* row_max,
                                                const float* sums, const int32_t* targets,
                                                int64_t N) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= N) return;
  if (targets[row] < 0) {
    losses[row] = lse[row] = 0.0f;
    return;
  }
  const float row_lse = row_max[row] + logf(sums[row]);
  lse[row] = row_lse;
  losses[row] = row_lse - sums[N + row];
}

// dlogits (N, Vl) = (exp_approx(x − lse) − [column == target])·dloss in the real columns of
// block `row`'s row, 0 in its padding columns, and 0 across an ignored row; the expressions of
// cross_entropy_backward_kernel (and of the cpu).
template <bool kVectorized>
__global__ void cross_entropy_shard_backward_kernel(bf16_t* dlogits, const bf16_t* logits,
                                                    const int32_t* targets, const float* lse, int V,
                                                    int Vl, int real, int64_t vocab_begin,
                                                    float dloss) {
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  bf16_t* dx = dlogits + row * Vl;  // (Vl)
  if (target < 0 || target >= V) {  // an ignored row: zeros
    write_zeros(dx, 0, Vl);
    return;
  }
  const int64_t local_target = int64_t(target) - vocab_begin;  // outside [0, real): another rank's
  write_row_gradient<kVectorized>(dx, logits + row * Vl, real, Vl, lse[row], local_target, dloss);
}

// The shard's real columns: global columns [vocab_begin, vocab_begin + Vl) below V.
int real_columns(int V, int Vl, int64_t vocab_begin) {
  const int64_t tokens_from_here = int64_t(V) - vocab_begin;
  return tokens_from_here <= 0 ? 0 : int(tokens_from_here < Vl ? tokens_from_here : Vl);
}

}  // namespace

void cross_entropy_forward(CudaContext& cx, float* losses, const bf16_t* logits,
                           const int32_t* targets, int64_t N, int V, int Vp, float* row_lse) {
  if (N == 0) return;
  // 128-bit loads need every row start 16-byte aligned: Vp a multiple of 8.
  if (Vp % kVector == 0 && aligned16(logits)) {
    launch(cx, "cross_entropy_forward", cross_entropy_forward_kernel<true>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(losses, row_lse, logits, targets, V, Vp);
  } else {
    launch(cx, "cross_entropy_forward", cross_entropy_forward_kernel<false>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(losses, row_lse, logits, targets, V, Vp);
  }
}

void cross_entropy_backward(CudaContext& cx, bf16_t* dlogits, const bf16_t* logits,
                            const int32_t* targets, int64_t N, int V, int Vp, float dloss) {
  if (!dlogits || N == 0) return;  // null gradient: not computed
  if (Vp % kVector == 0 && aligned16(logits, dlogits)) {
    launch(cx, "cross_entropy_backward", cross_entropy_backward_kernel<true>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(dlogits, logits, targets, V, Vp, dloss);
  } else {
    launch(cx, "cross_entropy_backward", cross_entropy_backward_kernel<false>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(dlogits, logits, targets, V, Vp, dloss);
  }
}

void cross_entropy_shard_max(CudaContext& cx, float* row_max, const bf16_t* logits, int64_t N,
                             int V, int Vl, int64_t vocab_begin) {
  if (N == 0) return;
  const int real = real_columns(V, Vl, vocab_begin);
  // 128-bit loads need every row start 16-byte aligned: Vl a multiple of 8.
  if (Vl % kVector == 0 && aligned16(logits)) {
    launch(cx, "cross_entropy_shard_max", cross_entropy_shard_max_kernel<true>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(row_max, logits, Vl, real);
  } else {
    launch(cx, "cross_entropy_shard_max", cross_entropy_shard_max_kernel<false>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(row_max, logits, Vl, real);
  }
}

void cross_entropy_shard_sums(CudaContext& cx, float* sums, const bf16_t* logits,
                              const int32_t* targets, const float* row_max, int64_t N, int V,
                              int Vl, int64_t vocab_begin) {
  if (N == 0) return;
  const int real = real_columns(V, Vl, vocab_begin);
  if (Vl % kVector == 0 && aligned16(logits)) {
    launch(cx, "cross_entropy_shard_sums", cross_entropy_shard_sums_kernel<true>, dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(sums, logits, targets, row_max, N, Vl, real, vocab_begin);
  } else {
    launch(cx, "cross_entropy_shard_sums", cross_entropy_shard_sums_kernel<false>,
           dim3(unsigned(N)),
           dim3(kCrossEntropyThreads))(sums, logits, targets, row_max, N, Vl, real, vocab_begin);
  }
}

void cross_entropy_shard_loss(CudaContext& cx, float* losses, float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N) {
  if (N == 0) return;
  launch(cx, "cross_entropy_shard_loss", cross_entropy_shard_loss_kernel,
         dim3(unsigned(ceil_div(N, kCrossEntropyThreads))),
         dim3(kCrossEntropyThreads))(losses, lse, row_max, sums, targets, N);
}

void cross_entropy_shard_backward(CudaContext& cx, bf16_t* dlogits, const bf16_t* logits,
                                  const int32_t* targets, const float* lse, int64_t N, int V,
                                  int Vl, int64_t vocab_begin, float dloss) {
  if (!dlogits || N == 0) return;  // null gradient: not computed
  const int real = real_columns(V, Vl, vocab_begin);
  if (Vl % kVector == 0 && aligned16(logits, dlogits)) {
    launch(cx, "cross_entropy_shard_backward", cross_entropy_shard_backward_kernel<true>,
           dim3(unsigned(N)), dim3(kCrossEntropyThreads))(dlogits, logits, targets, lse, V, Vl,
                                                          real, vocab_begin, dloss);
  } else {
    launch(cx, "cross_entropy_shard_backward", cross_entropy_shard_backward_kernel<false>,
           dim3(unsigned(N)), dim3(kCrossEntropyThreads))(dlogits, logits, targets, lse, V, Vl,
                                                          real, vocab_begin, dloss);
  }
}

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
