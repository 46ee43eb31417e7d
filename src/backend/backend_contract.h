#pragma once
// The Backend's argument contract: one check per op of backend.h, written once for every backend
// (docs/ARCHITECTURE.md, "The Backend contract"). BackendT's public op calls its check, then the
// backend's do_<op>; so the cpu and cuda backends refuse exactly the same calls, with the same
// message, before either touches memory. Each check throws collage::Error naming the op and the
// bad value.
//
// What a check sees is what the host holds: sizes, scalars and whether a pointer is null. It
// never reads device memory (that would make the cuda backend wait). So:
//  - sizes are in range (non-negative; positive where the op has no meaning otherwise; row
//    counts that index with int32 within int32); scalars in range (dropout p in [0, 1), eps >= 0,
//    rope base > 0, Adam's betas in [0, 1), t >= 1); rope's head size even.
//  - a pointer the op reads or writes is not null when the op has elements to touch; a null
//    gradient pointer means "not needed" (its inputs are then not required), other optional
//    pointers (bias, wpe, key_mask, mean/rstd, row_lse) are named in backend.h.
//  - no alignment beyond the element type's: the kernels take their 128-bit paths only when
//    the pointers allow it, and fall back otherwise.
// Not checked here, because it is data in device memory: token ids, row indices and targets.
// The cpu backend, which reads them on the host anyway, refuses a target >= V and a negative
// row index; the cuda kernels treat such a target as ignored and must not be given such a row.
// Also outside the contract: what a device cannot launch (the cuda attention kernels' head size
// <= 256 and grid limits, kernels/attention.cu), checked where the launch is shaped.
#include <cstdint>
#include <initializer_list>
#include <span>

#include "backend/optimizer_step.h"

namespace collage::contract {

// Storage pointers arrive as const void*: the checks do not depend on the storage type.
using Tensor = const void*;

void embedding_forward(Tensor out, const int32_t* tokens, Tensor wte, int B, int T, int C,
                       int64_t vocab_begin, int64_t vocab_end);
void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens, int B, int T,
                        int C, int64_t vocab_begin, int64_t vocab_end);

void layernorm_forward(Tensor out, Tensor inp, Tensor weight, int64_t N, int C, float eps);
void residual_layernorm_forward(Tensor residual, Tensor out, Tensor a, Tensor b, Tensor weight,
                                int64_t N, int C, float eps);
void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                        Tensor weight, const float* mean, const float* rstd, int64_t N, int C);

void matmul_forward(Tensor out, Tensor inp, Tensor weight, int64_t N, int C, int OC);
void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                     Tensor weight, int64_t N, int C, int OC);

// The elementwise ops (gelu, gelu_erf, tanh, add, accumulate, scale, sum, sum_squares): n >= 0
// and, when n > 0, every tensor set. The backward ops' `dinp` is a gradient: null, it needs
// nothing.
void elementwise(const char* op, int64_t n, std::initializer_list<Tensor> tensors);
void elementwise_backward(const char* op, int64_t n, Tensor dinp,
                          std::initializer_list<Tensor> inputs);
// gelu_backward_bias over (N, C): N, C >= 0; with elements and dinp set, inp and dout set (its
// dbias: sums_of_gradient).
void gelu_backward_bias(Tensor dinp, Tensor inp, Tensor dout, int64_t N, int C);
void dropout(const char* op, int64_t n, float p, Tensor out, Tensor in, bool backward);

void attention(const char* op, Tensor out, const float* lse, Tensor qkv, int B, int T, int NH,
               int HS, float p);
void attention_backward(const char* op, Tensor dqkv, Tensor dout, Tensor out, Tensor qkv,
                        const float* lse, int B, int T, int NH, int HS, float p);
// A gradient's column sums (`sums`, may be null) are formed from the gradient, which then must
// be computed.
void sums_of_gradient(const char* op, Tensor sums, const char* sums_name, Tensor gradient,
                      const char* gradient_name);

void gather_rows(Tensor out, Tensor inp, const int32_t* rows, int64_t count, int C);
void scatter_add_rows(Tensor dinp, Tensor dout, const int32_t* rows, int64_t count, int C);

void rope(const char* op, Tensor out, Tensor in, int B, int T, int NH, int HS, float base,
          bool backward);

void cross_entropy_forward(const float* losses, Tensor logits, const int32_t* targets, int64_t N,
                           int V, int Vp);
void cross_entropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets, int64_t N, int V,
                            int Vp);
void cross_entropy_shard_max(const float* row_max, Tensor logits, int64_t N, int V, int Vl,
                             int64_t vocab_begin);
void cross_entropy_shard_sums(const float* sums, Tensor logits, const int32_t* targets,
                              const float* row_max, int64_t N, int V, int Vl, int64_t vocab_begin);
void cross_entropy_shard_loss(const float* losses, const float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N);
void cross_entropy_shard_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                                  const float* lse, int64_t N, int V, int Vl, int64_t vocab_begin);

// fp32_storage: the backend stores fp32 (BackendT<float>), which runs fp32-master only. Every
// step is checked as one, and no two steps' weights may overlap.
void optimizer_steps(std::span<const OptimizerStep> steps, bool fp32_storage);

}  // namespace collage::contract
