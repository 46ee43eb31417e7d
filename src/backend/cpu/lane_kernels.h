#pragma once
// The lane kernels: the cpu kernels of elementwise.cpp (GELU, tanh, add, accumulate, scale),
// layernorm.cpp and cross_entropy.cpp, whose loops run on vector lanes (`omp simd`) and gain
// from wider ones. Like the optimizer's element loop, each of those files is compiled twice:
// with the build's flags (AVX2 in Release) in namespace collage::cpu::baseline::lanes, and on
// x86-64 once more for AVX-512 in collage::cpu::avx512::lanes (numerics/isa_namespace.h says
// why each compilation has a namespace of its own). lane_kernels.cpp defines kernels.h's
// functions of the same names, which check their arguments and run the compilation that
// CpuContext::isa names (docs/ARCHITECTURE.md, "One source, two ISAs"). The two compilations
// give the same bits (tests/backend/lane_kernels_isa_test.cpp).
#include <cstdint>

#include "backend/cpu/context.h"
#include "numerics/bf16.h"
#include "numerics/isa_namespace.h"

// The declarations, once per compilation; the semantics are kernels.h's.
#define COLLAGE_LANE_KERNEL_DECLARATIONS                                                           \
  template <typename S>                                                                            \
  void gelu_forward(CpuContext& cx, S* out, const S* inp, int64_t n);                              \
  template <typename S>                                                                            \
  void gelu_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n);             \
  template <typename S>                                                                            \
  void gelu_erf_forward(CpuContext& cx, S* out, const S* inp, int64_t n);                          \
  template <typename S>                                                                            \
  void gelu_erf_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n);         \
  template <typename S>                                                                            \
  void tanh_forward(CpuContext& cx, S* out, const S* inp, int64_t n);                              \
  template <typename S>                                                                            \
  void tanh_backward(CpuContext& cx, S* dinp, const S* out, const S* dout, int64_t n);             \
  template <typename S>                                                                            \
  void add(CpuContext& cx, S* out, const S* a, const S* b, int64_t n);                             \
  template <typename S>                                                                            \
  void accumulate(CpuContext& cx, S* dst, const S* src, int64_t n);                                \
  template <typename S>                                                                            \
  void scale(CpuContext& cx, S* x, float factor, int64_t n);                                       \
  template <typename S>                                                                            \
  void layernorm_forward(CpuContext& cx, S* out, float* mean, float* rstd, const S* inp,           \
                         const S* weight, const S* bias, int64_t N, int C, float eps);             \
  template <typename S>                                                                            \
  void layernorm_backward(CpuContext& cx, S* dinp, S* dweight, S* dbias, const S* dout,            \
                          const S* inp, const S* weight, const float* mean, const float* rstd,     \
                          int64_t N, int C);                                                       \
  template <typename S>                                                                            \
  void cross_entropy_forward(CpuContext& cx, float* losses, const S* logits,                       \
                             const int32_t* targets, int64_t N, int V, int Vp, float* row_lse);    \
  template <typename S>                                                                            \
  void cross_entropy_backward(CpuContext& cx, S* dlogits, const S* logits, const int32_t* targets, \
                              int64_t N, int V, int Vp, float dloss);                              \
  template <typename S>                                                                            \
  void cross_entropy_shard_max(CpuContext& cx, float* row_max, const S* logits, int64_t N, int V,  \
                               int Vl, int64_t vocab_begin);                                       \
  template <typename S>                                                                            \
  void cross_entropy_shard_sums(CpuContext& cx, float* sums, const S* logits,                      \
                                const int32_t* targets, const float* row_max, int64_t N, int V,    \
                                int Vl, int64_t vocab_begin);                                      \
  void cross_entropy_shard_loss(CpuContext& cx, float* losses, float* lse, const float* row_max,   \
                                const float* sums, const int32_t* targets, int64_t N);             \
  template <typename S>                                                                            \
  void cross_entropy_shard_backward(CpuContext& cx, S* dlogits, const S* logits,                   \
                                    const int32_t* targets, const float* lse, int64_t N, int V,    \
                                    int Vl, int64_t vocab_begin, float dloss);                     \
  /* The lane registers this compilation's loops may use: "AVX-512", "AVX2" or "SSE2". */          \
  const char* lanes_isa();

namespace collage::cpu {

inline namespace COLLAGE_ISA_NAMESPACE {
namespace lanes {
COLLAGE_LANE_KERNEL_DECLARATIONS
}  // namespace lanes
}  // namespace COLLAGE_ISA_NAMESPACE

// The AVX-512 compilation's, for lane_kernels.cpp and the tests (its objects are built apart,
// without this definition).
#ifdef COLLAGE_CPU_AVX512_COMPILATION
namespace avx512::lanes {
COLLAGE_LANE_KERNEL_DECLARATIONS
}  // namespace avx512::lanes
#endif

// The compilation the cpu backend runs, chosen once per process: AVX-512 where the build has it
// and the CPU runs it, else the baseline; COLLAGE_CPU_KERNELS=auto|avx512|baseline overrides
// (isa_choice.h). Its description is for the log and `collage bench`.
const IsaChoice& chosen_lane_kernels();

}  // namespace collage::cpu
