// LayerNorm over the last dimension: statistics in fp32 (two passes: mean, then the
// variance of the centred values, which does not cancel), saved for the backward. A row's sums
// are storage.h's lane_sum, whose order does not depend on the lane registers. Lane kernels
// (lane_kernels.h): compiled for the build's ISA and for AVX-512, each in its own namespace.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/lane_kernels.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {
inline namespace COLLAGE_ISA_NAMESPACE {
namespace lanes {

template <typename S>
void layernorm_forward(CpuContext& cx, S* out, float* mean, float* rstd, const S* inp,
                       const S* weight, const S* bias, int64_t N, int C, float eps) {
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t row = 0; row < N; row++) {
    const S* x = inp + row * C;  // (C)
    S* y = out + row * C;        // (C)
    const float m = lane_sum(C, [&](int64_t c) { return load(x[c]); }) / C;
    const float squares = lane_sum(C, [&](int64_t c) {
      const float d = load(x[c]) - m;
      return d * d;
    });
    const float s = 1.0f / std::sqrt(squares / C + eps);
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; c++)
        store(y[c], (load(x[c]) - m) * s * load(weight[c]) + load(bias[c]));
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) store(y[c], (load(x[c]) - m) * s * load(weight[c]));
    }
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// With x̂ = (x - mean)·rstd and g = dout·weight:
//   dinp += rstd · (g - mean(g) - x̂ · mean(g·x̂)),  dweight += Σ_rows dout·x̂,  dbias += Σ_rows dout.
template <typename S>
void layernorm_backward(CpuContext& cx, S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                        const S* weight, const float* mean, const float* rstd, int64_t N, int C) {
  if (dinp) {
#pragma omp parallel for schedule(static) num_threads(cx.threads)
    for (int64_t row = 0; row < N; row++) {
      const S* x = inp + row * C;
      const S* dy = dout + row * C;
      S* dx = dinp + row * C;
      const float m = mean[row], s = rstd[row];
      const float g_sum = lane_sum(C, [&](int64_t c) { return load(dy[c]) * load(weight[c]); });
      const float gx_sum = lane_sum(C, [&](int64_t c) {
        const float g = load(dy[c]) * load(weight[c]);
        return g * (load(x[c]) - m) * s;
      });
      const float g_mean = g_sum / C, gx_mean = gx_sum / C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        float g = load(dy[c]) * load(weight[c]);
        float xhat = (load(x[c]) - m) * s;
        store(dx[c], load(dx[c]) + s * (g - g_mean - xhat * gx_mean));
      }
    }
  }
  if (!dweight && !dbias) return;
  // Parameter gradients: each thread owns blocks of columns and sums over all rows in row
  // order, so the result does not depend on the thread count.
  constexpr int kBlock = 64;
  const int blocks = (C + kBlock - 1) / kBlock;
  Scratch scratch(cx.scratch);
  // Per thread: the block's Σ dout·x̂ and Σ dout (2 · kBlock).
  const PerThread sums = scratch.per_thread(2 * kBlock, cx.threads);
#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int block = 0; block < blocks; block++) {
    const int c0 = block * kBlock, width = std::min(kBlock, C - c0);
    float* dw_sum = sums[omp_get_thread_num()];
    float* db_sum = dw_sum + kBlock;
    std::fill(dw_sum, dw_sum + 2 * kBlock, 0.0f);
    for (int64_t row = 0; row < N; row++) {
      const S* x = inp + row * C + c0;
      const S* dy = dout + row * C + c0;
      const float m = mean[row], s = rstd[row];
#pragma omp simd
      for (int c = 0; c < width; c++) {
        float d = load(dy[c]);
        dw_sum[c] += d * (load(x[c]) - m) * s;
        db_sum[c] += d;
      }
    }
    if (dweight) {
#pragma omp simd
      for (int c = 0; c < width; c++) store(dweight[c0 + c], load(dweight[c0 + c]) + dw_sum[c]);
    }
    if (dbias) {
#pragma omp simd
      for (int c = 0; c < width; c++) store(dbias[c0 + c], load(dbias[c0 + c]) + db_sum[c]);
    }
  }
}

template void layernorm_forward(CpuContext&, bf16*, float*, float*, const bf16*, const bf16*,
                                const bf16*, int64_t, int, float);
template void layernorm_forward(CpuContext&, float*, float*, float*, const float*, const float*,
                                const float*, int64_t, int, float);
template void layernorm_backward(CpuContext&, bf16*, bf16*, bf16*, const bf16*, const bf16*,
                                 const bf16*, const float*, const float*, int64_t, int);
template void layernorm_backward(CpuContext&, float*, float*, float*, const float*, const float*,
                                 const float*, const float*, const float*, int64_t, int);

}  // namespace lanes
}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
