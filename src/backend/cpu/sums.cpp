// The host-returned reductions (sum, sum of squares): double, in fixed chunks summed in chunk
// order, so the result does not depend on the thread count. The sum of squares of bf16 values
// (the gradient norm) is gradient_squares.cpp's, in the compilation the optimizer runs.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/gradient_squares.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/optimizer_isa.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {

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

template double sum_squares(CpuContext&, const bf16*, int64_t);
template double sum_squares(CpuContext&, const float*, int64_t);

}  // namespace collage::cpu
