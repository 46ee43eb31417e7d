#pragma once
// The kernel entry points the cuda backend (src/backend/cuda/cuda_backend.cpp) calls: one op
// family a file in kernels/, each entry derives launch shapes from the sizes and queues its
// kernels on cx.stream. The arguments arrive checked by the Backend contract
// (src/backend/backend_contract.h); an entry checks only what its own launch needs beyond it. The
// semantics of every op are those of src/backend/backend.h (bf16 storage, fp32 math, one rounding
// on store, backward ops accumulate parameter gradients and write input gradients, null gradient
// pointers skipped); the cpu backend's version of each op lives in
// src/backend/cpu/<same name>.cpp and the tests in tests/cuda/ compare the two.
// All pointers are device pointers; nothing here waits for the stream.
#include <cstdint>

#include "backend/cuda/runtime/context.h"
#include "backend/optimizer_step.h"
#include "numerics/bf16_math.h"

namespace collage::cuda {
COLLAGE_CUDA_VARIANT_BEGIN

using bf16_t = math::bfloat;

// ---- embedding.cu ----
void embedding_forward(CudaContext& cx, bf16_t* out, const int32_t* tokens, const bf16_t* wte,
                       const bf16_t* wpe, int B, int T, int C, int64_t vocab_begin,
                       int64_t vocab_end);
// Deterministic: rows grouped by token on the device and summed in row order (no float atomics).
void embedding_backward(CudaContext& cx, bf16_t* dwte, bf16_t* dwpe, const bf16_t* dout,
                        const int32_t* tokens, int B, int T, int C, int64_t vocab_begin,
                        int64_t vocab_end);

// ---- layernorm.cu ----
void layernorm_forward(CudaContext& cx, bf16_t* out, float* mean, float* rstd, const bf16_t* inp,
                       const bf16_t* weight, const bf16_t* bias, int64_t N, int C, float eps);
// residual = rn(a + b); out = layernorm(residual) computed from the rounded residual.
void residual_layernorm_forward(CudaContext& cx, bf16_t* residual, bf16_t* out, float* mean,
                                float* rstd, const bf16_t* a, const bf16_t* b, const bf16_t* weight,
                                const bf16_t* bias, int64_t N, int C, float eps);
// dinp_sums (null: none) += Σ_rows dinp after the add (backend.h, layernorm_backward).
void layernorm_backward(CudaContext& cx, bf16_t* dinp, bf16_t* dweight, bf16_t* dbias,
                        const bf16_t* dout, const bf16_t* inp, const bf16_t* weight,
                        const float* mean, const float* rstd, int64_t N, int C, bf16_t* dinp_sums);

// ---- bias.cu: dbias (OC) += Σ_rows dout (N, OC), deterministic ----
void bias_backward(CudaContext& cx, bf16_t* dbias, const bf16_t* dout, int64_t N, int OC);

// ---- elementwise.cu ----
void gelu_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n);
void gelu_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* inp, const bf16_t* dout, int64_t n);
// gelu_backward (exact: gelu_erf_backward) over (N, C), and dbias (C) += Σ_rows dinp in one pass
// (backend.h, gelu_backward_bias).
void gelu_backward_bias(CudaContext& cx, bf16_t* dinp, bf16_t* dbias, const bf16_t* inp,
                        const bf16_t* dout, int64_t N, int C, bool exact);
void add(CudaContext& cx, bf16_t* out, const bf16_t* a, const bf16_t* b, int64_t n);
void accumulate(CudaContext& cx, bf16_t* dst, const bf16_t* src, int64_t n);
void scale(CudaContext& cx, bf16_t* x, float factor, int64_t n);
// The encoder's exact GELU and tanh (backend.h, "encoder ops").
void gelu_erf_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n);
void gelu_erf_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* inp, const bf16_t* dout,
                       int64_t n);
void tanh_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n);
void tanh_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* out, const bf16_t* dout, int64_t n);
// Casts: out = widen(in) and out = rn(in).
void bf16_to_float(CudaContext& cx, float* out, const bf16_t* in, int64_t n);
void float_to_bf16(CudaContext& cx, bf16_t* out, const float* in, int64_t n);

// ---- dropout.cu: Philox-4x32-10 masks, the cpu's bit for bit (backend.h, "encoder ops") ----
void dropout_forward(CudaContext& cx, bf16_t* out, const bf16_t* inp, int64_t n, float p,
                     uint64_t seed, uint64_t offset);
void dropout_backward(CudaContext& cx, bf16_t* dinp, const bf16_t* dout, int64_t n, float p,
                      uint64_t seed, uint64_t offset);

// ---- gather.cu: out = inp[rows]; dinp[rows] += dout, deterministic with repeated rows ----
void gather_rows(CudaContext& cx, bf16_t* out, const bf16_t* inp, const int32_t* rows,
                 int64_t count, int C);
void scatter_add_rows(CudaContext& cx, bf16_t* dinp, const bf16_t* dout, const int32_t* rows,
                      int64_t count, int C);

// ---- rope.cu ----
void rope_forward(CudaContext& cx, bf16_t* out, const bf16_t* qkv, int B, int T, int NH, int HS,
                  float base);
void rope_backward(CudaContext& cx, bf16_t* dqkv, const bf16_t* dout, int B, int T, int NH, int HS,
                   float base);

// ---- attention.cu ----
void attention_forward(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                       const int32_t* key_mask, bool causal, int B, int T, int NH, int HS);
// dqkv_sums (3·NH·HS), if not null, += Σ_rows dqkv (backend.h, attention_backward).
void attention_backward(CudaContext& cx, bf16_t* dqkv, const bf16_t* dout, const bf16_t* out,
                        const bf16_t* qkv, const float* lse, const int32_t* key_mask, bool causal,
                        int B, int T, int NH, int HS, bf16_t* dqkv_sums = nullptr);
// With dropout on the probabilities (backend.h, attention_forward_dropout); p = 0 is the above.
void attention_forward_dropout(CudaContext& cx, bf16_t* out, float* lse, const bf16_t* qkv,
                               const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                               float p, uint64_t seed, uint64_t offset);
void attention_backward_dropout(CudaContext& cx, bf16_t* dqkv, const bf16_t* dout,
                                const bf16_t* out, const bf16_t* qkv, const float* lse,
                                const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                                float p, uint64_t seed, uint64_t offset,
                                bf16_t* dqkv_sums = nullptr);

// ---- cross_entropy.cu ----
void cross_entropy_forward(CudaContext& cx, float* losses, const bf16_t* logits,
                           const int32_t* targets, int64_t N, int V, int Vp,
                           float* row_lse = nullptr);
void cross_entropy_backward(CudaContext& cx, bf16_t* dlogits, const bf16_t* logits,
                            const int32_t* targets, int64_t N, int V, int Vp, float dloss);
// The vocab-parallel stages (src/backend/backend.h): logits (N, Vl) hold global columns
// [vocab_begin, vocab_begin + Vl), of which those < V are real. Deterministic.
void cross_entropy_shard_max(CudaContext& cx, float* row_max, const bf16_t* logits, int64_t N,
                             int V, int Vl, int64_t vocab_begin);
void cross_entropy_shard_sums(CudaContext& cx, float* sums, const bf16_t* logits,
                              const int32_t* targets, const float* row_max, int64_t N, int V,
                              int Vl, int64_t vocab_begin);
void cross_entropy_shard_loss(CudaContext& cx, float* losses, float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N);
void cross_entropy_shard_backward(CudaContext& cx, bf16_t* dlogits, const bf16_t* logits,
                                  const int32_t* targets, const float* lse, int64_t N, int V,
                                  int Vl, int64_t vocab_begin, float dloss);

// ---- reduce.cu: deterministic two-pass sums into one device double ----
void sum(CudaContext& cx, double* result, const float* x, int64_t n);
void sum_squares(CudaContext& cx, double* result, const bf16_t* x, int64_t n);

// ---- optimizer.cu: one strategy step over each of `count` tensors, in one launch where they
// share the step's hyperparameters (steps[k].param, grad, state are device pointers; steps[k].edq
// is ignored). If edq[k] is not null, tensor k's EDQ sums are ADDED to edq[k][0..3] =
// {Σ Δ·u, Σ u², #updated, #lost} (device doubles) in a fixed order.
void optimizer_steps(CudaContext& cx, const OptimizerStep* steps, double* const* edq, size_t count);

COLLAGE_CUDA_VARIANT_END
}  // namespace collage::cuda
