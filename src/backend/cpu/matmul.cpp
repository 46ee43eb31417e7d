// matmul: out (N, OC) = inp (N, C) · weight (OC, C)^T + bias, and its backward.
//
// Parallel over tiles of output channels, one single-threaded sgemm per tile: each thread
// widens a weight tile while it is hot in cache, multiplies, and rounds its output tile. All
// parallelism is OpenMP's: OpenBLAS runs with one thread, because its own worker threads and
// OpenMP's spin against each other on a small machine (measured: an OpenMP loop right after a
// 2-thread sgemm ran 20x slower), and tiled this way the two threads reach the same sgemm rate
// as OpenBLAS's own threading.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"

namespace collage::cpu {
namespace {

// Output-channel tiles: about 512 channels each (256..1024 measured equally fast), at least
// one per thread, a multiple of the thread count so static scheduling balances, sizes a
// multiple of 16.
struct Tiles {
  int count, size;
};

Tiles channel_tiles(int OC, int threads) {
  int count = std::max(threads, (OC + 511) / 512);
  count = (count + threads - 1) / threads * threads;
  int size = (OC + count - 1) / count;
  size = (size + 15) / 16 * 16;
  return {(OC + size - 1) / size, size};
}

// The whole of inp as fp32 (N, C): widened in parallel into scratch (bf16), or the input
// itself (float).
template <typename S>
ConstView read_matrix(CpuContext& cx, const S* src, int64_t rows, int C, Scratch& scratch) {
  if constexpr (is_fp32_storage<S>) {
    return {src, C};
  } else {
    float* dst = scratch.take(static_cast<size_t>(rows) * C);
#pragma omp parallel for schedule(static) num_threads(cx.threads)
    for (int64_t r = 0; r < rows; r++) widen(src + r * C, dst + r * C, C);
    return {dst, C};
  }
}

}  // namespace

// dbias (OC) += the column sums of dout (N, OC), each summed in fp32 in row order (as the
// tiled path sums them) and rounded once.
template <typename S>
void bias_backward(CpuContext& cx, S* dbias, const S* dout, int64_t N, int OC) {
  constexpr int kChunk = 64;
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int c0 = 0; c0 < OC; c0 += kChunk) {
    const int n = std::min(kChunk, OC - c0);
    float sum[kChunk] = {};
    for (int64_t r = 0; r < N; r++) {
      const S* row = dout + r * OC + c0;
#pragma omp simd
      for (int c = 0; c < n; c++) sum[c] += load(row[c]);
    }
    for (int c = 0; c < n; c++) store(dbias[c0 + c], load(dbias[c0 + c]) + sum[c]);
  }
}

template <typename S>
void matmul_forward(CpuContext& cx, S* out, const S* inp, const S* weight, const S* bias, int64_t N,
                    int C, int OC) {
  if (OC == 0) return;
  if (cx.onednn) {  // out (N, OC) = inp (N, C) · weightᵀ (C, OC) + bias: weight read transposed
    cx.onednn->matmul<S>(N, OC, C, {inp, C, 1}, {weight, 1, C}, bias, {out, OC, 1},
                         /*accumulate=*/false);
    return;
  }
  const Tiles tiles = channel_tiles(OC, cx.threads);
  const bool widened = !is_fp32_storage<S>;  // fp32 tiles are read and written in place
  Scratch scratch(cx.scratch);
  const ConstView x = read_matrix(cx, inp, N, C, scratch);  // (N, C)
  const PerThread weight_tile =
      scratch.per_thread(widened ? size_t(tiles.size) * C : 0, cx.threads);  // (size, C)
  const PerThread out_tile =
      scratch.per_thread(widened ? size_t(N) * tiles.size : 0, cx.threads);  // (N, size)
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int tile = 0; tile < tiles.count; tile++) {
    const int thread = omp_get_thread_num();
    const int o0 = tile * tiles.size;
    const int n = std::min(tiles.size, OC - o0);
    const ConstView w = read_block(weight + int64_t(o0) * C, n, C, C, weight_tile[thread]);
    const View y = open_block(out + o0, N, n, OC, out_tile[thread], /*keep=*/false);
    gemm(false, true, N, n, C, 1.0f, x, w, 0.0f, y);  // (N, C) · (n, C)^T
    if (bias) {
      for (int64_t r = 0; r < N; r++) {
        float* row = y.data + r * y.ld;
#pragma omp simd
        for (int c = 0; c < n; c++) row[c] += load(bias[o0 + c]);
      }
    }
    close_block(y, out + o0, N, n, OC);
  }
}

template <typename S>
void matmul_backward(CpuContext& cx, S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                     const S* weight, int64_t N, int C, int OC) {
  if (OC == 0 || (!dinp && !dweight && !dbias)) return;
  if (cx.onednn) {
    if (dbias) bias_backward(cx, dbias, dout, N, OC);
    if (dweight)  // dweight (OC, C) += doutᵀ (OC, N) · inp (N, C)
      cx.onednn->matmul<S>(OC, C, N, {dout, 1, OC}, {inp, C, 1}, nullptr, {dweight, C, 1},
                           /*accumulate=*/true);
    if (dinp)  // dinp (N, C) = dout (N, OC) · weight (OC, C), written
      cx.onednn->matmul<S>(N, C, OC, {dout, OC, 1}, {weight, C, 1}, nullptr, {dinp, C, 1},
                           /*accumulate=*/false);
    return;
  }
  const Tiles tiles = channel_tiles(OC, cx.threads);
  const bool widened = !is_fp32_storage<S>;  // fp32 tiles are read and written in place
  Scratch scratch(cx.scratch);
  const ConstView x = dweight ? read_matrix(cx, inp, N, C, scratch) : ConstView{};  // (N, C)
  // Per thread: the tiles of its output channels, and its partial dinp over them.
  const PerThread dout_tile =
      scratch.per_thread(widened ? size_t(N) * tiles.size : 0, cx.threads);  // (N, size)
  const PerThread weight_tile =
      scratch.per_thread(dinp && widened ? size_t(tiles.size) * C : 0, cx.threads);  // (size, C)
  const PerThread dweight_tile =
      scratch.per_thread(dweight && widened ? size_t(tiles.size) * C : 0, cx.threads);  // (size, C)
  const PerThread dinp_partial =
      scratch.per_thread(dinp ? size_t(N) * C : 0, cx.threads);  // (N, C)
  const PerThread dbias_tile = scratch.per_thread(dbias ? size_t(tiles.size) : 0, cx.threads);

  int team = 1;  // threads that really ran (and zeroed their partial dinp)
#pragma omp parallel num_threads(cx.threads)
  {
    const int thread = omp_get_thread_num();
    if (thread == 0) team = omp_get_num_threads();
    if (dinp) std::memset(dinp_partial[thread], 0, sizeof(float) * size_t(N) * C);
#pragma omp for schedule(static)
    for (int tile = 0; tile < tiles.count; tile++) {
      const int o0 = tile * tiles.size;
      const int n = std::min(tiles.size, OC - o0);
      const ConstView g = read_block(dout + o0, N, n, OC, dout_tile[thread]);  // (N, n)
      if (dbias) {  // column sums of dout in fp32, one rounding
        float* colsum = dbias_tile[thread];
        std::fill(colsum, colsum + n, 0.0f);
        for (int64_t r = 0; r < N; r++) {
          const float* row = g.data + r * g.ld;
#pragma omp simd
          for (int c = 0; c < n; c++) colsum[c] += row[c];
        }
#pragma omp simd
        for (int c = 0; c < n; c++) store(dbias[o0 + c], load(dbias[o0 + c]) + colsum[c]);
      }
      if (dweight) {  // dweight tile (n, C) += dout tile^T (n, N) · inp (N, C)
        S* block = dweight + int64_t(o0) * C;
        const View dw = open_block(block, n, C, C, dweight_tile[thread], /*keep=*/true);
        gemm(true, false, n, C, N, 1.0f, g, x, 1.0f, dw);
        close_block(dw, block, n, C, C);
      }
      if (dinp) {  // partial dinp (N, C) += dout tile (N, n) · weight tile (n, C)
        const ConstView w = read_block(weight + int64_t(o0) * C, n, C, C, weight_tile[thread]);
        gemm(false, false, N, C, n, 1.0f, g, w, 1.0f, View{dinp_partial[thread], C});
      }
    }
  }
  // dinp = the threads' partials, summed in thread order (deterministic), one rounding.
  if (!dinp) return;
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t r = 0; r < N; r++) {
    float* total = dinp_partial[0] + r * C;  // thread 0's partial collects the others
    for (int t = 1; t < team; t++) {
      const float* partial = dinp_partial[t] + r * C;
#pragma omp simd
      for (int c = 0; c < C; c++) total[c] += partial[c];
    }
    S* row = dinp + r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) store(row[c], total[c]);
  }
}

template void matmul_forward(CpuContext&, bf16*, const bf16*, const bf16*, const bf16*, int64_t,
                             int, int);
template void matmul_forward(CpuContext&, float*, const float*, const float*, const float*, int64_t,
                             int, int);
template void bias_backward(CpuContext&, bf16*, const bf16*, int64_t, int);
template void bias_backward(CpuContext&, float*, const float*, int64_t, int);
template void matmul_backward(CpuContext&, bf16*, bf16*, bf16*, const bf16*, const bf16*,
                              const bf16*, int64_t, int, int);
template void matmul_backward(CpuContext&, float*, float*, float*, const float*, const float*,
                              const float*, int64_t, int, int);

}  // namespace collage::cpu
