// Softmax cross-entropy over the first V of Vp logit columns (the rest is vocab padding).
// Each row's statistics take one pass over memory: the row goes through in chunks small
// enough for L1, each chunk's max and Σ exp are folded into running values (online softmax).
// A chunk's Σ exp is storage.h's lane_sum, whose order does not depend on the lane registers.
//
// The vocab-parallel version (tensor parallelism, docs/PARALLEL.md §3) splits the same math into
// stages with all-reduces between them (src/backend/backend.h): the max of a shard's columns,
// then Σ exp(x − max) with the global max, then lse and the loss. Its Σ exp takes the same
// 512-column chunks with the max already known, so no rescaling is needed.
//
// Lane kernels (lane_kernels.h): compiled for the build's ISA and for AVX-512, each in its own
// namespace. lane_kernels.cpp checks the targets first.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/lane_kernels.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {
inline namespace COLLAGE_ISA_NAMESPACE {
namespace lanes {
namespace {

constexpr int kChunk = 512;

// Σ_{j<n} exp_approx(chunk[j] − max), leaving the terms in chunk: the exponentials in one
// vector pass, then lane_sum over them (with exp_approx inside lane_sum's 16-lane loop, GCC
// vectorized neither, and cross-entropy took 3-4× as long).
float sum_exp(float* chunk, int n, float max) {
#pragma omp simd
  for (int j = 0; j < n; j++) chunk[j] = exp_approx(chunk[j] - max);
  return lane_sum(n, [&](int64_t j) { return chunk[j]; });
}

// Returns log Σ_{j<V} exp(logits[j]) in fp32 arithmetic.
template <typename S>
float log_sum_exp(const S* logits, int V) {
  float chunk[kChunk];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;  // Σ exp(x - running_max) so far
  for (int c0 = 0; c0 < V; c0 += kChunk) {
    const int n = std::min(kChunk, V - c0);
    widen(logits + c0, chunk, n);
    const float chunk_max = max_value(chunk, n);
    if (chunk_max > running_max) {
      running_sum *= exp_approx(running_max - chunk_max);  // 0 · anything while still empty
      running_max = chunk_max;
    }
    running_sum += sum_exp(chunk, n, running_max);
  }
  return running_max + std::log(running_sum);
}

template <typename S>
void write_zeros(S* dx, int begin, int end) {
  for (int j = begin; j < end; j++) store(dx[j], 0.0f);
}

// One row's gradient, written whole over `width` columns: (exp_approx(x[j] − lse) −
// [j == target])·dloss in the `real` columns, 0 in the rest (padding), or zeros across an
// ignored row. A target outside [0, real) (another rank's column) subtracts no 1. Both
// backwards' rows, the full vocabulary's and a shard's.
template <typename S>
void write_row_gradient(S* dx, const S* x, int real, int width, bool ignored, int64_t target,
                        float lse, float dloss) {
  if (ignored) {
    write_zeros(dx, 0, width);
    return;
  }
#pragma omp simd
  for (int j = 0; j < real; j++) store(dx[j], exp_approx(load(x[j]) - lse) * dloss);
  if (target >= 0 && target < real) {
    const int t = static_cast<int>(target);
    store(dx[t], (exp_approx(load(x[t]) - lse) - 1.0f) * dloss);
  }
  write_zeros(dx, real, width);
}

// The number of real (non-padding) columns of a shard holding global columns
// [vocab_begin, vocab_begin + Vl) of a vocabulary of V tokens.
int real_columns(int V, int Vl, int64_t vocab_begin) {
  return static_cast<int>(std::clamp<int64_t>(V - vocab_begin, 0, Vl));
}

// max_{j<n} x[j] in fp32; −inf for n = 0.
template <typename S>
float max_of_columns(const S* x, int n) {
  float chunk[kChunk];
  float running_max = -std::numeric_limits<float>::infinity();
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const int count = std::min(kChunk, n - c0);
    widen(x + c0, chunk, count);
    running_max = std::max(running_max, max_value(chunk, count));
  }
  return running_max;
}

// Σ_{j<n} exp_approx(x[j] − max) in fp32, chunk by chunk as log_sum_exp adds them.
template <typename S>
float sum_exp_of_columns(const S* x, int n, float max) {
  float chunk[kChunk];
  float running_sum = 0.0f;
  for (int c0 = 0; c0 < n; c0 += kChunk) {
    const int count = std::min(kChunk, n - c0);
    widen(x + c0, chunk, count);
    running_sum += sum_exp(chunk, count, max);
  }
  return running_sum;
}

}  // namespace

template <typename S>
void cross_entropy_forward(CpuContext& cx, float* losses, const S* logits, const int32_t* targets,
                           int64_t N, int V, int Vp, float* row_lse) {
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const int32_t target = targets[row];
    if (target < 0) {
      losses[row] = 0.0f;
      if (row_lse) row_lse[row] = 0.0f;
      continue;
    }
    const S* x = logits + row * Vp;  // (Vp)
    const float lse = log_sum_exp(x, V);
    losses[row] = lse - load(x[target]);
    if (row_lse) row_lse[row] = lse;
  }
}

template <typename S>
void cross_entropy_backward(CpuContext& cx, S* dlogits, const S* logits, const int32_t* targets,
                            int64_t N, int V, int Vp, float dloss) {
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const int32_t target = targets[row];
    const S* x = logits + row * Vp;
    const bool ignored = target < 0;
    const float lse = ignored ? 0.0f : log_sum_exp(x, V);
    write_row_gradient(dlogits + row * Vp, x, V, Vp, ignored, target, lse, dloss);
  }
}

template <typename S>
void cross_entropy_shard_max(CpuContext& cx, float* row_max, const S* logits, int64_t N, int V,
                             int Vl, int64_t vocab_begin) {
  const int real = real_columns(V, Vl, vocab_begin);
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) row_max[row] = max_of_columns(logits + row * Vl, real);
}

template <typename S>
void cross_entropy_shard_sums(CpuContext& cx, float* sums, const S* logits, const int32_t* targets,
                              const float* row_max, int64_t N, int V, int Vl, int64_t vocab_begin) {
  const int real = real_columns(V, Vl, vocab_begin);
  float* sum_exp = sums;           // (N)
  float* target_logit = sums + N;  // (N)
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const S* x = logits + row * Vl;  // (Vl)
    sum_exp[row] = sum_exp_of_columns(x, real, row_max[row]);
    const int64_t local_target = int64_t(targets[row]) - vocab_begin;  // column in this shard
    const bool owned = targets[row] >= 0 && local_target >= 0 && local_target < real;
    target_logit[row] = owned ? load(x[local_target]) : 0.0f;
  }
}

void cross_entropy_shard_loss(CpuContext& cx, float* losses, float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N) {
  const float* sum_exp = sums;           // (N), all-reduced
  const float* target_logit = sums + N;  // (N), all-reduced
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    if (targets[row] < 0) {
      losses[row] = lse[row] = 0.0f;
      continue;
    }
    // The expressions of log_sum_exp and cross_entropy_forward.
    const float row_lse = row_max[row] + std::log(sum_exp[row]);
    lse[row] = row_lse;
    losses[row] = row_lse - target_logit[row];
  }
}

template <typename S>
void cross_entropy_shard_backward(CpuContext& cx, S* dlogits, const S* logits,
                                  const int32_t* targets, const float* lse, int64_t N, int V,
                                  int Vl, int64_t vocab_begin, float dloss) {
  if (!dlogits) return;  // null gradient: not computed
  const int real = real_columns(V, Vl, vocab_begin);
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const int32_t target = targets[row];
    write_row_gradient(dlogits + row * Vl, logits + row * Vl, real, Vl, target < 0,
                       int64_t(target) - vocab_begin, lse[row], dloss);
  }
}

template void cross_entropy_forward(CpuContext&, float*, const bf16*, const int32_t*, int64_t, int,
                                    int, float*);
template void cross_entropy_forward(CpuContext&, float*, const float*, const int32_t*, int64_t, int,
                                    int, float*);
template void cross_entropy_backward(CpuContext&, bf16*, const bf16*, const int32_t*, int64_t, int,
                                     int, float);
template void cross_entropy_backward(CpuContext&, float*, const float*, const int32_t*, int64_t,
                                     int, int, float);

template void cross_entropy_shard_max(CpuContext&, float*, const bf16*, int64_t, int, int, int64_t);
template void cross_entropy_shard_max(CpuContext&, float*, const float*, int64_t, int, int,
                                      int64_t);
template void cross_entropy_shard_sums(CpuContext&, float*, const bf16*, const int32_t*,
                                       const float*, int64_t, int, int, int64_t);
template void cross_entropy_shard_sums(CpuContext&, float*, const float*, const int32_t*,
                                       const float*, int64_t, int, int, int64_t);
template void cross_entropy_shard_backward(CpuContext&, bf16*, const bf16*, const int32_t*,
                                           const float*, int64_t, int, int, int64_t, float);
template void cross_entropy_shard_backward(CpuContext&, float*, const float*, const int32_t*,
                                           const float*, int64_t, int, int, int64_t, float);

}  // namespace lanes
}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
