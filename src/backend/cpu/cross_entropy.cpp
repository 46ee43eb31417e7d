// Softmax cross-entropy over the first V of Vp logit columns (the rest is vocab padding).
// Each row's statistics take one pass over memory: the row goes through in chunks small
// enough for L1, each chunk's max and Σ exp are folded into running values (online softmax).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "core/error.h"

namespace collage::cpu {
namespace {

constexpr int kChunk = 512;

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
    float chunk_sum = 0.0f;
#pragma omp simd reduction(+ : chunk_sum)
    for (int j = 0; j < n; j++) chunk_sum += exp_approx(chunk[j] - running_max);
    running_sum += chunk_sum;
  }
  return running_max + std::log(running_sum);
}

// dx[j] += exp(x[j] - lse) · dloss for j in [begin, end)
template <typename S>
void add_scaled_softmax(S* dx, const S* x, int begin, int end, float lse, float dloss) {
#pragma omp simd
  for (int j = begin; j < end; j++) {
    store(dx[j], load(dx[j]) + exp_approx(load(x[j]) - lse) * dloss);
  }
}

// Throws if any target is >= V (a token id the loss cannot score). Negative means ignored.
void check_targets(const int32_t* targets, int64_t N, int V) {
  for (int64_t row = 0; row < N; row++) {
    if (targets[row] >= V) {
      fail("cross-entropy: target {} at row {} is outside the vocabulary of {} tokens",
           targets[row], row, V);
    }
  }
}

}  // namespace

template <typename S>
void cross_entropy_forward(CpuContext& cx, float* losses, const S* logits, const int32_t* targets,
                           int64_t N, int V, int Vp) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const int32_t target = targets[row];
    if (target < 0) {
      losses[row] = 0.0f;
      continue;
    }
    const S* x = logits + row * Vp;  // (Vp)
    losses[row] = log_sum_exp(x, V) - load(x[target]);
  }
}

template <typename S>
void cross_entropy_backward(CpuContext& cx, S* dlogits, const S* logits, const int32_t* targets,
                            int64_t N, int V, int Vp, float dloss) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const int32_t target = targets[row];
    if (target < 0) continue;  // ignored rows and padding columns get nothing
    const S* x = logits + row * Vp;
    S* dx = dlogits + row * Vp;
    const float lse = log_sum_exp(x, V);
    // (softmax - onehot) · dloss: the target column apart, so the loops have no condition.
    add_scaled_softmax(dx, x, 0, target, lse, dloss);
    store(dx[target], load(dx[target]) + (exp_approx(load(x[target]) - lse) - 1.0f) * dloss);
    add_scaled_softmax(dx, x, target + 1, V, lse, dloss);
  }
}

template void cross_entropy_forward(CpuContext&, float*, const bf16*, const int32_t*, int64_t, int,
                                    int);
template void cross_entropy_forward(CpuContext&, float*, const float*, const int32_t*, int64_t, int,
                                    int);
template void cross_entropy_backward(CpuContext&, bf16*, const bf16*, const int32_t*, int64_t, int,
                                     int, float);
template void cross_entropy_backward(CpuContext&, float*, const float*, const int32_t*, int64_t,
                                     int, int, float);

}  // namespace collage::cpu
