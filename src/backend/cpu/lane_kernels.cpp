// kernels.h's lane kernels (lane_kernels.h): each runs the compilation cx.isa names, after the
// checks that stay out of the twice-compiled files (a thrown error's formatting is not a lane
// loop, and its inline functions would get AVX-512 copies).
#include "backend/cpu/lane_kernels.h"

#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace collage::cpu {

// RUN_LANES(call): lanes::call in the compilation cx.isa names.
#ifdef COLLAGE_CPU_AVX512_COMPILATION
#define RUN_LANES(call) (cx.isa == CpuIsa::avx512 ? avx512::lanes::call : baseline::lanes::call)
#else
#define RUN_LANES(call) baseline::lanes::call
#endif

namespace {

// Throws if any target is >= V (a token id the loss cannot score). Negative means ignored. Not
// part of the contract (backend_contract.h): targets are data, which the cuda kernels do not read
// back to the host; they treat such a row as ignored.
void check_targets(const int32_t* targets, int64_t N, int V) {
  for (int64_t row = 0; row < N; row++) {
    if (targets[row] >= V) {
      fail("cross-entropy: target {} at row {} is outside the vocabulary of {} tokens",
           targets[row], row, V);
    }
  }
}

}  // namespace

const IsaChoice& chosen_lane_kernels() {
  static const IsaChoice chosen =
      choose_isa("COLLAGE_CPU_KERNELS", std::string(baseline::lanes::lanes_isa()) + " lanes");
  return chosen;
}

template <typename S>
void gelu_forward(CpuContext& cx, S* out, const S* inp, int64_t n) {
  RUN_LANES(gelu_forward(cx, out, inp, n));
}
template <typename S>
void gelu_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n) {
  RUN_LANES(gelu_backward(cx, dinp, inp, dout, n));
}
template <typename S>
void gelu_erf_forward(CpuContext& cx, S* out, const S* inp, int64_t n) {
  RUN_LANES(gelu_erf_forward(cx, out, inp, n));
}
template <typename S>
void gelu_erf_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n) {
  RUN_LANES(gelu_erf_backward(cx, dinp, inp, dout, n));
}
template <typename S>
void tanh_forward(CpuContext& cx, S* out, const S* inp, int64_t n) {
  RUN_LANES(tanh_forward(cx, out, inp, n));
}
template <typename S>
void tanh_backward(CpuContext& cx, S* dinp, const S* out, const S* dout, int64_t n) {
  RUN_LANES(tanh_backward(cx, dinp, out, dout, n));
}
template <typename S>
void add(CpuContext& cx, S* out, const S* a, const S* b, int64_t n) {
  RUN_LANES(add(cx, out, a, b, n));
}
template <typename S>
void accumulate(CpuContext& cx, S* dst, const S* src, int64_t n) {
  RUN_LANES(accumulate(cx, dst, src, n));
}
template <typename S>
void scale(CpuContext& cx, S* x, float factor, int64_t n) {
  RUN_LANES(scale(cx, x, factor, n));
}

template <typename S>
void layernorm_forward(CpuContext& cx, S* out, float* mean, float* rstd, const S* inp,
                       const S* weight, const S* bias, int64_t N, int C, float eps) {
  RUN_LANES(layernorm_forward(cx, out, mean, rstd, inp, weight, bias, N, C, eps));
}
template <typename S>
void layernorm_backward(CpuContext& cx, S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                        const S* weight, const float* mean, const float* rstd, int64_t N, int C) {
  RUN_LANES(layernorm_backward(cx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
}

template <typename S>
void cross_entropy_forward(CpuContext& cx, float* losses, const S* logits, const int32_t* targets,
                           int64_t N, int V, int Vp, float* row_lse) {
  check_targets(targets, N, V);
  RUN_LANES(cross_entropy_forward(cx, losses, logits, targets, N, V, Vp, row_lse));
}
template <typename S>
void cross_entropy_backward(CpuContext& cx, S* dlogits, const S* logits, const int32_t* targets,
                            int64_t N, int V, int Vp, float dloss) {
  check_targets(targets, N, V);
  RUN_LANES(cross_entropy_backward(cx, dlogits, logits, targets, N, V, Vp, dloss));
}
template <typename S>
void cross_entropy_shard_max(CpuContext& cx, float* row_max, const S* logits, int64_t N, int V,
                             int Vl, int64_t vocab_begin) {
  RUN_LANES(cross_entropy_shard_max(cx, row_max, logits, N, V, Vl, vocab_begin));
}
template <typename S>
void cross_entropy_shard_sums(CpuContext& cx, float* sums, const S* logits, const int32_t* targets,
                              const float* row_max, int64_t N, int V, int Vl, int64_t vocab_begin) {
  check_targets(targets, N, V);
  RUN_LANES(cross_entropy_shard_sums(cx, sums, logits, targets, row_max, N, V, Vl, vocab_begin));
}
void cross_entropy_shard_loss(CpuContext& cx, float* losses, float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N) {
  RUN_LANES(cross_entropy_shard_loss(cx, losses, lse, row_max, sums, targets, N));
}
template <typename S>
void cross_entropy_shard_backward(CpuContext& cx, S* dlogits, const S* logits,
                                  const int32_t* targets, const float* lse, int64_t N, int V,
                                  int Vl, int64_t vocab_begin, float dloss) {
  check_targets(targets, N, V);
  RUN_LANES(cross_entropy_shard_backward(cx, dlogits, logits, targets, lse, N, V, Vl, vocab_begin,
                                         dloss));
}

#undef RUN_LANES

#define COLLAGE_INSTANTIATE(S)                                                                     \
  template void gelu_forward(CpuContext&, S*, const S*, int64_t);                                  \
  template void gelu_backward(CpuContext&, S*, const S*, const S*, int64_t);                       \
  template void gelu_erf_forward(CpuContext&, S*, const S*, int64_t);                              \
  template void gelu_erf_backward(CpuContext&, S*, const S*, const S*, int64_t);                   \
  template void tanh_forward(CpuContext&, S*, const S*, int64_t);                                  \
  template void tanh_backward(CpuContext&, S*, const S*, const S*, int64_t);                       \
  template void add(CpuContext&, S*, const S*, const S*, int64_t);                                 \
  template void accumulate(CpuContext&, S*, const S*, int64_t);                                    \
  template void scale(CpuContext&, S*, float, int64_t);                                            \
  template void layernorm_forward(CpuContext&, S*, float*, float*, const S*, const S*, const S*,   \
                                  int64_t, int, float);                                            \
  template void layernorm_backward(CpuContext&, S*, S*, S*, const S*, const S*, const S*,          \
                                   const float*, const float*, int64_t, int);                      \
  template void cross_entropy_forward(CpuContext&, float*, const S*, const int32_t*, int64_t, int, \
                                      int, float*);                                                \
  template void cross_entropy_backward(CpuContext&, S*, const S*, const int32_t*, int64_t, int,    \
                                       int, float);                                                \
  template void cross_entropy_shard_max(CpuContext&, float*, const S*, int64_t, int, int,          \
                                        int64_t);                                                  \
  template void cross_entropy_shard_sums(CpuContext&, float*, const S*, const int32_t*,            \
                                         const float*, int64_t, int, int, int64_t);                \
  template void cross_entropy_shard_backward(CpuContext&, S*, const S*, const int32_t*,            \
                                             const float*, int64_t, int, int, int64_t, float);
COLLAGE_INSTANTIATE(bf16)
COLLAGE_INSTANTIATE(float)
#undef COLLAGE_INSTANTIATE

}  // namespace collage::cpu
