#pragma once
// The cpu kernels behind CpuBackend (one op family a file). Each is a template over the
// storage type S, explicitly instantiated for bf16 and float in its .cpp; the semantics of
// every op are those documented in backend/backend.h.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/context.h"
#include "backend/optimizer_step.h"

namespace collage::cpu {

// Backend::zero: `bytes` zero bytes at dst, split over the threads when large (zero.cpp).
void zero_bytes(CpuContext& cx, void* dst, size_t bytes);

template <typename S>
void embedding_forward(CpuContext& cx, S* out, const int32_t* tokens, const S* wte, const S* wpe,
                       int B, int T, int C, int64_t vocab_begin, int64_t vocab_end);
template <typename S>
void embedding_backward(CpuContext& cx, S* dwte, S* dwpe, const S* dout, const int32_t* tokens,
                        int B, int T, int C, int64_t vocab_begin, int64_t vocab_end);

template <typename S>
void layernorm_forward(CpuContext& cx, S* out, float* mean, float* rstd, const S* inp,
                       const S* weight, const S* bias, int64_t N, int C, float eps);
template <typename S>
void layernorm_backward(CpuContext& cx, S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                        const S* weight, const float* mean, const float* rstd, int64_t N, int C);

template <typename S>
void matmul_forward(CpuContext& cx, S* out, const S* inp, const S* weight, const S* bias, int64_t N,
                    int C, int OC);
template <typename S>
void matmul_backward(CpuContext& cx, S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                     const S* weight, int64_t N, int C, int OC);

// dbias (OC) += Σ_rows dout (N, OC), each column summed in fp32 in row order, one rounding
// (matmul_backward's bias gradient).
template <typename S>
void bias_backward(CpuContext& cx, S* dbias, const S* dout, int64_t N, int OC);

template <typename S>
void gelu_forward(CpuContext& cx, S* out, const S* inp, int64_t n);
template <typename S>
void gelu_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n);
template <typename S>
void add(CpuContext& cx, S* out, const S* a, const S* b, int64_t n);
template <typename S>
void accumulate(CpuContext& cx, S* dst, const S* src, int64_t n);
template <typename S>
void scale(CpuContext& cx, S* x, float factor, int64_t n);

// Encoder ops (backend.h, "encoder ops"): elementwise.cpp (GELU erf, tanh), dropout.cpp,
// gather.cpp.
template <typename S>
void gelu_erf_forward(CpuContext& cx, S* out, const S* inp, int64_t n);
template <typename S>
void gelu_erf_backward(CpuContext& cx, S* dinp, const S* inp, const S* dout, int64_t n);
template <typename S>
void tanh_forward(CpuContext& cx, S* out, const S* inp, int64_t n);
template <typename S>
void tanh_backward(CpuContext& cx, S* dinp, const S* out, const S* dout, int64_t n);
template <typename S>
void dropout_forward(CpuContext& cx, S* out, const S* inp, int64_t n, float p, uint64_t seed,
                     uint64_t offset);
template <typename S>
void dropout_backward(CpuContext& cx, S* dinp, const S* dout, int64_t n, float p, uint64_t seed,
                      uint64_t offset);
// factors[k] = the dropout factor (1/(1 - p) kept, 0 dropped) of element first_element + k,
// k < count (numerics/elementwise_math.h: dropout_uniform); sequential, for one thread's slice.
void dropout_factors(float* factors, int64_t count, float p, uint64_t seed, uint64_t first_element);
template <typename S>
void gather_rows(CpuContext& cx, S* out, const S* inp, const int32_t* rows, int64_t count, int C);
template <typename S>
void scatter_add_rows(CpuContext& cx, S* dinp, const S* dout, const int32_t* rows, int64_t count,
                      int C);
double sum(CpuContext& cx, const float* x, int64_t n);
template <typename S>
double sum_squares(CpuContext& cx, const S* x, int64_t n);

template <typename S>
void rope_forward(CpuContext& cx, S* out, const S* qkv, int B, int T, int NH, int HS, float base);
template <typename S>
void rope_backward(CpuContext& cx, S* dqkv, const S* dout, int B, int T, int NH, int HS,
                   float base);

// Attention (attention.cpp). With bf16 storage and oneDNN's bf16 matmuls (cx.onednn) the
// products run as those, with the numerics of attention_onednn.cpp; otherwise as OpenBLAS sgemm
// on fp32. `out` (B, T, C) is the forward's output, which the oneDNN backward reads for
// D_i = dout_i·out_i; the OpenBLAS backward sums D from P and dP instead.
template <typename S>
void attention_forward(CpuContext& cx, S* out, float* lse, const S* qkv, const int32_t* key_mask,
                       bool causal, int B, int T, int NH, int HS);
template <typename S>
void attention_backward(CpuContext& cx, S* dqkv, const S* dout, const S* out, const S* qkv,
                        const float* lse, const int32_t* key_mask, bool causal, int B, int T,
                        int NH, int HS);
// With dropout on the probabilities (backend.h, attention_forward_dropout): p = 0 is the
// plain attention above, which calls these.
template <typename S>
void attention_forward_dropout(CpuContext& cx, S* out, float* lse, const S* qkv,
                               const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                               float p, uint64_t seed, uint64_t offset);
template <typename S>
void attention_backward_dropout(CpuContext& cx, S* dqkv, const S* dout, const S* out, const S* qkv,
                                const float* lse, const int32_t* key_mask, bool causal, int B,
                                int T, int NH, int HS, float p, uint64_t seed, uint64_t offset);
// The oneDNN bf16 engine's attention (attention_onednn.cpp), which the functions above call
// when cx.onednn is set; needs cx.onednn_per_thread (one single-threaded engine per thread).
void attention_forward_onednn(CpuContext& cx, bf16* out, float* lse, const bf16* qkv,
                              const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                              float p, uint64_t seed, uint64_t offset);
void attention_backward_onednn(CpuContext& cx, bf16* dqkv, const bf16* dout, const bf16* out,
                               const bf16* qkv, const float* lse, const int32_t* key_mask,
                               bool causal, int B, int T, int NH, int HS, float p, uint64_t seed,
                               uint64_t offset);

template <typename S>
void cross_entropy_forward(CpuContext& cx, float* losses, const S* logits, const int32_t* targets,
                           int64_t N, int V, int Vp, float* row_lse = nullptr);
template <typename S>
void cross_entropy_backward(CpuContext& cx, S* dlogits, const S* logits, const int32_t* targets,
                            int64_t N, int V, int Vp, float dloss);
// The vocab-parallel stages (backend.h): logits (N, Vl) hold global columns
// [vocab_begin, vocab_begin + Vl), of which those < V are real.
template <typename S>
void cross_entropy_shard_max(CpuContext& cx, float* row_max, const S* logits, int64_t N, int V,
                             int Vl, int64_t vocab_begin);
template <typename S>
void cross_entropy_shard_sums(CpuContext& cx, float* sums, const S* logits, const int32_t* targets,
                              const float* row_max, int64_t N, int V, int Vl, int64_t vocab_begin);
void cross_entropy_shard_loss(CpuContext& cx, float* losses, float* lse, const float* row_max,
                              const float* sums, const int32_t* targets, int64_t N);
template <typename S>
void cross_entropy_shard_backward(CpuContext& cx, S* dlogits, const S* logits,
                                  const int32_t* targets, const float* lse, int64_t N, int V,
                                  int Vl, int64_t vocab_begin, float dloss);

template <typename S>
void optimizer_step(CpuContext& cx, const OptimizerStep& step);

}  // namespace collage::cpu
