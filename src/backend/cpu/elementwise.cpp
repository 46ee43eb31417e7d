// Elementwise ops (GELU, the encoder's exact GELU and tanh, add, accumulate, scale): fp32 math,
// one rounding on store. Lane kernels (lane_kernels.h): this file is compiled for the build's
// ISA and for AVX-512, each in its own namespace; every lane computes the same IEEE operations,
// so both give the same bits.
#include "backend/cpu/lane_kernels.h"
#include "backend/cpu/storage.h"

namespace collage::cpu {
inline namespace COLLAGE_ISA_NAMESPACE {
namespace lanes {
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

#define COLLAGE_INSTANTIATE(S)                                                   \
  template void gelu_forward(CpuContext&, S*, const S*, int64_t);                \
  template void gelu_backward(CpuContext&, S*, const S*, const S*, int64_t);     \
  template void add(CpuContext&, S*, const S*, const S*, int64_t);               \
  template void accumulate(CpuContext&, S*, const S*, int64_t);                  \
  template void scale(CpuContext&, S*, float, int64_t);                          \
  template void gelu_erf_forward(CpuContext&, S*, const S*, int64_t);            \
  template void gelu_erf_backward(CpuContext&, S*, const S*, const S*, int64_t); \
  template void tanh_forward(CpuContext&, S*, const S*, int64_t);                \
  template void tanh_backward(CpuContext&, S*, const S*, const S*, int64_t);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

const char* lanes_isa() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#else
  return "SSE2";
#endif
}

}  // namespace lanes
}  // namespace COLLAGE_ISA_NAMESPACE
}  // namespace collage::cpu
