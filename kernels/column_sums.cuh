#pragma once
// Deterministic column sums for the parameter gradients of layernorm (Σ_rows dout·x̂,
// Σ_rows dout) and of a matmul's bias (Σ_rows dout), without float atomics, in two stages:
//  1. column_partials_kernel: the rows are cut into chunks of kColumnChunkRows; block
//     (chunk, column tile) has one thread per column, which sums its column over the chunk's
//     rows in row order (fp32) and writes the partial to partials (kSums, chunks, C).
//  2. column_totals_kernel: one thread per column adds the chunks' partials in chunk order
//     (fp32) and accumulates the total into the bf16 gradient with one rounding.
// The chunking depends only on N, so every run (and the emulator) adds in the same order.
// The cpu backend sums each column over all rows in row order (src/backend/cpu/layernorm.cpp,
// src/backend/cpu/matmul.cpp): the same terms, associated differently.
//
// Usage: a Terms functor with `static constexpr int kSums` and
// `__device__ void operator()(int64_t row, int c, float* sums) const` that adds row's terms
// for column c to sums[0 .. kSums); then column_sums(cx, op, terms, N, C, outputs...).
#include "backend/cuda/runtime.h"
#include "kernels/common.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kColumnThreads = 256;   // columns of one block
constexpr int kColumnChunkRows = 32;  // rows one thread sums in stage 1

// partials (kSums, chunks, C): partials[(s · chunks + chunk) · C + c] = Σ_{rows of chunk} term_s.
template <typename Terms>
__global__ void column_partials_kernel(float* partials, Terms terms, int64_t N, int C) {
  // This thread's column c and chunk of rows [row_begin, row_end).
  const int64_t chunk = blockIdx.x, chunks = gridDim.x;
  const int c = int(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t row_begin = chunk * kColumnChunkRows;
  const int64_t row_end = row_begin + kColumnChunkRows < N ? row_begin + kColumnChunkRows : N;
  float sums[Terms::kSums] = {};
  for (int64_t row = row_begin; row < row_end; row++) terms(row, c, sums);
  for (int s = 0; s < Terms::kSums; s++) partials[(s * chunks + chunk) * C + c] = sums[s];
}

// grads[s][c] = rn(grads[s][c] + Σ_chunk partials[s][chunk][c]) for every non-null grads[s].
template <int kSums>
struct ColumnGrads {
  bf16_t* grads[kSums];
};
template <int kSums>
__global__ void column_totals_kernel(ColumnGrads<kSums> out, const float* partials, int64_t chunks,
                                     int C) {
  const int c = int(blockIdx.x) * blockDim.x + threadIdx.x;  // the column this thread owns
  if (c >= C) return;
  for (int s = 0; s < kSums; s++) {
    bf16_t* grad = out.grads[s];
    if (!grad) continue;
    const float* column = partials + s * chunks * C + c;
    float total = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; chunk++) total += column[chunk * C];
    grad[c] = to_bf16(to_float(grad[c]) + total);
  }
}

// Accumulates the kSums column sums of terms over N rows into the (C) gradients `grads`
// (null ones skipped), with partials in cx.scratch.column_partials. N = 0 adds nothing.
template <typename Terms, typename... Grads>
void column_sums(CudaContext& cx, const char* op, const Terms& terms, int64_t N, int C,
                 Grads... grads) {
  static_assert(sizeof...(Grads) == Terms::kSums, "one gradient per column sum");
  const ColumnGrads<Terms::kSums> out{{grads...}};
  if (N == 0 || C == 0) return;
  const int64_t chunks = ceil_div(N, kColumnChunkRows);
  const int column_tiles = int(ceil_div(C, kColumnThreads));
  COLLAGE_KERNEL_CHECK(column_tiles <= 65535, "%s: C = %d columns exceed the grid's y limit", op,
                       C);
  float* partials =
      scratch<float>(cx, cx.scratch.column_partials, size_t(Terms::kSums) * chunks * C);
  launch(cx, op, column_partials_kernel<Terms>, dim3(unsigned(chunks), unsigned(column_tiles)),
         dim3(kColumnThreads))(partials, terms, N, C);
  launch(cx, op, column_totals_kernel<Terms::kSums>, dim3(unsigned(column_tiles)),
         dim3(kColumnThreads))(out, partials, chunks, C);
}

}  // namespace
COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
