// Elementwise ops (GELU, the encoder's exact GELU and tanh, add, accumulate, scale) and the
// host-returned reductions (sum, sum of squares). Elementwise: fp32 math, one rounding on store.
// Reductions: double, in fixed chunks summed in chunk order, so the result does not depend on the
// thread count. The sum of squares of bf16 values (the gradient norm) is gradient_squares.cpp's,
// in the compilation the optimizer runs.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/gradient_squares.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/optimizer_isa.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelThreshold = 1 << 15;

}  // namespace

// GELU and its derivative: numerics/elementwise_math.h (shared with the CUDA kernels).
template <typename S>
void gelu_forward(CpuContext& cx, S* out, const S* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) store(out[i], math::gelu(load(inp[i])));
}

template <typename S>
void gelu_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n) {
  if (!dinp) return;
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) {
    store(dinp[i], math::gelu_derivative(load(inp[i])) * load(dout[i]));
  }
}

// The encoder's exact GELU and tanh (numerics/elementwise_math.h, shared with the kernels).
// erff and tanhf are calls into libm, so these loops stay scalar.
template <typename S>
void gelu_erf_forward(CpuContext& cx, S* out, const S* inp, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) store(out[i], math::gelu_erf(load(inp[i])));
}

template <typename S>
void gelu_erf_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n) {
  if (!dinp) return;
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) {
    store(dinp[i], math::gelu_erf_derivative(load(inp[i])) * load(dout[i]));
  }
}

template <typename S>
void tanh_forward(CpuContext& cx, S* out, const S* inp, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) store(out[i], math::tanh_value(load(inp[i])));
}

// dinp = (1 - y²)·dout from the saved output y.
template <typename S>
void tanh_backward(CpuContext& cx, S* dinp, const S* out, const S* dout, int64_t n) {
  if (!dinp) return;
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) {
    store(dinp[i], math::tanh_derivative_from_output(load(out[i])) * load(dout[i]));
  }
}

template <typename S>
void add(CpuContext& cx, S* out, const S* a, const S* b, int64_t n) {
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) store(out[i], load(a[i]) + load(b[i]));
}

template <typename S>
void accumulate(CpuContext& cx, S* dst, const S* src, int64_t n) {
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) store(dst[i], load(dst[i]) + load(src[i]));
}

template <typename S>
void scale(CpuContext& cx, S* x, float factor, int64_t n) {
#pragma omp parallel for simd schedule(static) num_threads(cx.threads) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i++) store(x[i], load(x[i]) * factor);
}

namespace {

constexpr int64_t kSumChunk = 1 << 14;

// The chunks' sums, added in chunk order.
double chunk_order_total(const std::vector<double>& partial) {
  double total = 0.0;
  for (double chunk_sum : partial) total += chunk_sum;
  return total;
}

// Σ f(x[i]) in double: chunk sums in parallel, then added in chunk order.
template <typename T, typename F>
double chunked_sum(CpuContext& cx, const T* x, int64_t n, F term) {
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  cx.partial_sums.assign(static_cast<size_t>(chunks), 0.0);
  double* partial = cx.partial_sums.data();
#pragma omp parallel for schedule(static) num_threads(cx.threads) if (chunks > 1)
  for (int64_t chunk = 0; chunk < chunks; chunk++) {
    const int64_t begin = chunk * kSumChunk, end = std::min(n, begin + kSumChunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; i++) acc += term(x[i]);
    partial[chunk] = acc;
  }
  return chunk_order_total(cx.partial_sums);
}

}  // namespace

double sum(CpuContext& cx, const float* x, int64_t n) {
  return chunked_sum(cx, x, n, [](float v) { return double(v); });
}

template <typename S>
double sum_squares(CpuContext& cx, const S* x, int64_t n) {
  if constexpr (std::is_same_v<S, bf16>) {
    cx.partial_sums.assign(static_cast<size_t>((n + kSquaresChunk - 1) / kSquaresChunk), 0.0);
    chosen_optimizer_loop().sum_squares_chunks(reinterpret_cast<const uint16_t*>(x), n, cx.threads,
                                               cx.partial_sums.data());
    return chunk_order_total(cx.partial_sums);
  } else {
    return chunked_sum(cx, x, n, [](S v) {
      double d = load(v);
      return d * d;
    });
  }
}

#define COLLAGE_INSTANTIATE(S)                                                   \
  template void gelu_forward(CpuContext&, S*, const S*, int64_t);                \
  template void gelu_backward(CpuContext&, S*, const S*, const S*, int64_t);     \
  template void add(CpuContext&, S*, const S*, const S*, int64_t);               \
  template void accumulate(CpuContext&, S*, const S*, int64_t);                  \
  template void scale(CpuContext&, S*, float, int64_t);                          \
  template double sum_squares(CpuContext&, const S*, int64_t);                   \
  template void gelu_erf_forward(CpuContext&, S*, const S*, int64_t);            \
  template void gelu_erf_backward(CpuContext&, S*, const S*, const S*, int64_t); \
  template void tanh_forward(CpuContext&, S*, const S*, int64_t);                \
  template void tanh_backward(CpuContext&, S*, const S*, const S*, int64_t);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

}  // namespace collage::cpu
