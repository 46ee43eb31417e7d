#pragma once
// Deterministic column sums for the parameter gradients of layernorm (Σ_rows dout·x̂,
// Σ_rows dout) and of a matmul's bias (Σ_rows dout), without float atomics, in two stages:
//  1. column_partials_kernel: the rows are cut into chunks of kColumnChunkRows; block
//     (chunk, column tile) has one thread per column, which sums its column over the chunk's
//     rows in row order (fp32) and writes the partial to partials (kSums, chunks, C).
//  2. column_totals_kernel: block (column tile of 32) has kTotalsSlices threads per column;
//     slice y adds the chunks y, y + kTotalsSlices, ... in order (fp32), then one thread per
//     column adds the slices' sums in slice order and accumulates the total into the bf16
//     gradient with one rounding. (It was one thread per column over every chunk: for GPT-2's
//     N = 16384, C = 768 that is 3 blocks of 768 threads each walking 512 dependent adds per
//     sum, a latency-bound tail after every layernorm and bias backward; now 24 blocks of 512
//     threads, 32 adds each: the layernorm family 4.24 -> 2.85 ms a 124M step on an H100,
//     docs/ARCHITECTURE.md, "What each change to the GPU step bought".)
// The chunking depends only on N, so every run (and the emulator) adds in the same order.
// The cpu backend sums each column over all rows in row order (src/backend/cpu/layernorm.cpp,
// src/backend/cpu/matmul.cpp): the same terms, associated differently.
//
// Usage: a Terms functor with `static constexpr int kSums` and
// `__device__ void operator()(int64_t row, int c, float* sums) const` that adds row's terms
// for column c to sums[0 .. kSums); then column_sums(cx, op, terms, N, C, outputs...). A kernel
// that already walks the rows in chunks of kColumnChunkRows can write stage 1 itself
// (chunk_column_partials into column_partials(cx, ...)) and leave stage 2 to column_totals
// (the layernorm backward: its rows are then read once from DRAM, not twice).
#include "backend/cuda/runtime/runtime.h"
#include "kernels/common.cuh"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN
namespace {

constexpr int kColumnThreads = 256;   // columns of one block
constexpr int kColumnChunkRows = 32;  // rows one thread sums in stage 1

// partials (kSums, chunks, C): partials[(s · chunks + chunk) · C + c] = Σ_{rows of chunk} term_s,
// for the columns c = first, first + step, ... < C (each summed over the chunk's rows in order).
template <typename Terms>
__device__ __forceinline__ void chunk_column_partials(float* partials, const Terms& terms,
                                                      int64_t chunk, int64_t chunks, int64_t N,
                                                      int C, int first, int step) {
  const int64_t row_begin = chunk * kColumnChunkRows;
  const int64_t row_end = row_begin + kColumnChunkRows < N ? row_begin + kColumnChunkRows : N;
  for (int c = first; c < C; c += step) {
    float sums[Terms::kSums] = {};
    for (int64_t row = row_begin; row < row_end; row++) terms(row, c, sums);
    for (int s = 0; s < Terms::kSums; s++) partials[(s * chunks + chunk) * C + c] = sums[s];
  }
}

// Stage 1 on its own: block (chunk, column tile), one thread per column.
template <typename Terms>
__global__ void column_partials_kernel(float* partials, Terms terms, int64_t N, int C) {
  const int c = int(blockIdx.y) * blockDim.x + threadIdx.x;
  chunk_column_partials(partials, terms, blockIdx.x, gridDim.x, N, C, c, C);
}

// grads[s][c] = rn(grads[s][c] + Σ_chunk partials[s][chunk][c]) for every non-null grads[s].
template <int kSums>
struct ColumnGrads {
  bf16_t* grads[kSums];
};
constexpr int kTotalsColumns = kWarpSize;  // columns of one block: a warp's coalesced row
constexpr int kTotalsSlices = 16;          // threads per column, each over every 16th chunk
template <int kSums>
__global__ void column_totals_kernel(ColumnGrads<kSums> out, const float* partials, int64_t chunks,
                                     int C) {
  // This thread's column c and slice y (chunks y, y + kTotalsSlices, ...).
  __shared__ float slice_sums[kTotalsSlices][kTotalsColumns];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c = int(blockIdx.x) * kTotalsColumns + x;
  for (int s = 0; s < kSums; s++) {
    bf16_t* grad = out.grads[s];
    if (!grad) continue;  // the same for the whole block
    const float* column = partials + s * chunks * C + c;
    float total = 0.0f;
    if (c < C)
      for (int64_t chunk = y; chunk < chunks; chunk += kTotalsSlices) total += column[chunk * C];
    slice_sums[y][x] = total;
    __syncthreads();
    if (y == 0 && c < C) {
      float sum = slice_sums[0][x];
      for (int slice = 1; slice < kTotalsSlices; slice++) sum += slice_sums[slice][x];
      grad[c] = to_bf16(to_float(grad[c]) + sum);
    }
    __syncthreads();  // slice_sums is reused by the next s
  }
}

// The row chunks of N rows, and stage 1's partials for kSums sums over C columns, in
// cx.scratch.column_partials.
inline int64_t column_chunks(int64_t N) { return ceil_div(N, kColumnChunkRows); }
inline float* column_partials(CudaContext& cx, int sums, int64_t N, int C) {
  return scratch<float>(cx, cx.scratch.column_partials, size_t(sums) * column_chunks(N) * C);
}

// Stage 2: grads[s][c] = rn(grads[s][c] + Σ_chunk partials[s][chunk][c]), null grads skipped.
template <typename... Grads>
void column_totals(CudaContext& cx, const char* op, const float* partials, int64_t N, int C,
                   Grads... grads) {
  constexpr int kSums = sizeof...(Grads);
  const ColumnGrads<kSums> out{{grads...}};
  launch(cx, op, column_totals_kernel<kSums>, dim3(unsigned(ceil_div(C, kTotalsColumns))),
         dim3(kTotalsColumns, kTotalsSlices))(out, partials, column_chunks(N), C);
}

// Accumulates the kSums column sums of terms over N rows into the (C) gradients `grads`
// (null ones skipped), with partials in cx.scratch.column_partials. N = 0 adds nothing.
template <typename Terms, typename... Grads>
void column_sums(CudaContext& cx, const char* op, const Terms& terms, int64_t N, int C,
                 Grads... grads) {
  static_assert(sizeof...(Grads) == Terms::kSums, "one gradient per column sum");
  if (N == 0 || C == 0) return;
  const int column_tiles = int(ceil_div(C, kColumnThreads));
  COLLAGE_KERNEL_CHECK(column_tiles <= 65535, "%s: C = %d columns exceed the grid's y limit", op,
                       C);
  float* partials = column_partials(cx, Terms::kSums, N, C);
  launch(cx, op, column_partials_kernel<Terms>,
         dim3(unsigned(column_chunks(N)), unsigned(column_tiles)),
         dim3(kColumnThreads))(partials, terms, N, C);
  column_totals(cx, op, partials, N, C, grads...);
}

}  // namespace
COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
