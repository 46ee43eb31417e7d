// Scaled dot-product attention per (batch, head), causal and/or with a key padding mask, on
// OpenBLAS sgemm: the engine of the fp32 reference backend, of cpu_gemm = openblas, and of CPUs
// where oneDNN has no bf16 matmul. With bf16 storage and oneDNN's bf16 matmuls (cx.onednn) the
// functions below hand the call to attention_onednn.cpp, whose numerics follow the GPU's
// tensor-core kernels (docs/ARCHITECTURE.md, "cpu attention").
//
// Queries go in blocks of kQueryBlock rows (attention_rows.h) so the score block (rows, T) stays
// small even at T = 1024 and causal blocks only score the keys they can see; both products of a
// block are sgemm calls on the head's q, k, v widened to fp32 (exact), with the softmax, its
// probabilities and every product in fp32: only the stored out and gradients are rounded.
// Nothing of size T×T is kept: the forward saves each query's log-sum-exp and the backward
// recomputes the probabilities from it.
//
// Dropout on the probabilities (the _dropout variants, backend.h) is applied after the softmax,
// with factors recomputed in the backward from the counter-based generator (cpu/dropout.cpp).
//
// A query that sees no key at all (all the keys it may attend to are masked) gets output 0,
// lse = -inf and zero gradients, instead of the NaN of an empty softmax.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"

namespace collage::cpu {
namespace {

// Turns one row of scaled scores (keys) into probabilities in place; returns the row's lse.
float softmax_row(float* scores, int keys, int end, const int32_t* key_ok) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
#pragma omp simd
  for (int j = 0; j < keys; j++) {
    scores[j] = select_float((j < end) & key_ok[j], scores[j], kMinusInf);
  }
  const float max_score = max_value(scores, keys);
  if (max_score == kMinusInf) {  // no visible key
    std::fill(scores, scores + keys, 0.0f);
    return max_score;
  }
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int j = 0; j < keys; j++) {
    const float p = select_float((j < end) & key_ok[j], exp_approx(scores[j] - max_score), 0.0f);
    scores[j] = p;
    total += p;
  }
  const float inverse = 1.0f / total;
#pragma omp simd
  for (int j = 0; j < keys; j++) scores[j] *= inverse;
  return max_score + std::log(total);
}

}  // namespace

template <typename S>
void attention_forward(CpuContext& cx, S* out, float* lse, const S* qkv, const int32_t* key_mask,
                       bool causal, int B, int T, int NH, int HS) {
  attention_forward_dropout(cx, out, lse, qkv, key_mask, causal, B, T, NH, HS, 0.0f, 0, 0);
}

template <typename S>
void attention_forward_dropout(CpuContext& cx, S* out, float* lse, const S* qkv,
                               const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                               float dropout_p, uint64_t seed, uint64_t offset) {
  if constexpr (!is_fp32_storage<S>) {
    if (cx.onednn) {
      attention_forward_onednn(cx, out, lse, qkv, key_mask, causal, B, T, NH, HS, dropout_p, seed,
                               offset);
      return;
    }
  }
  const bool dropout = dropout_p > 0.0f;
  const int64_t C = int64_t(NH) * HS, row_stride = 3 * C;  // qkv (B, T, 3C), out (B, T, C)
  const float scale = 1.0f / std::sqrt(float(HS));
  const int block = std::min(kQueryBlock, T);
  const bool widened = !is_fp32_storage<S>;
  // Per thread: one head at a time, one block of its queries at a time.
  Scratch scratch(cx.scratch);
  const PerThread head_buf =
      scratch.per_thread(widened ? size_t(3) * T * HS : 0, cx.threads);  // q, k, v (3, T, HS)
  const PerThread prob_buf = scratch.per_thread(size_t(block) * T, cx.threads);  // (block, T)
  const PerThread out_buf =
      scratch.per_thread(widened ? size_t(block) * HS : 0, cx.threads);  // (block, HS)
  const PerThread factor_buf =
      scratch.per_thread(dropout ? size_t(T) : 0, cx.threads);  // one row's dropout factors
  cx.key_visible.resize(size_t(cx.threads) * T);

#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t bh = 0; bh < int64_t(B) * NH; bh++) {
    const int thread = omp_get_thread_num();
    const int64_t b = bh / NH, h = bh % NH;
    const S* head = qkv + b * T * row_stride + h * HS;
    float* buf = head_buf[thread];
    const ConstView q = read_block(head, T, HS, row_stride, buf);  // (T, HS)
    const ConstView k = read_block(head + C, T, HS, row_stride, buf + int64_t(T) * HS);
    const ConstView v = read_block(head + 2 * C, T, HS, row_stride, buf + 2 * int64_t(T) * HS);
    const int32_t* key_ok = key_flags(cx, thread, key_mask ? key_mask + b * T : nullptr, T);
    float* lse_head = lse + bh * T;  // lse (B, NH, T)
    float* prob = prob_buf[thread];

    for (int i0 = 0; i0 < T; i0 += block) {
      const int rows = std::min(block, T - i0);
      const int keys = block_keys(i0, rows, T, causal);
      // scores (rows, keys) = scale · q[i0 : i0 + rows] · k[:keys]^T
      gemm(false, true, rows, keys, HS, scale, {q.data + i0 * q.ld, q.ld}, k, 0.0f, {prob, keys});
      for (int r = 0; r < rows; r++) {
        const int i = i0 + r;
        float* row = prob + int64_t(r) * keys;
        lse_head[i] = softmax_row(row, keys, visible_end(i, keys, causal), key_ok);
        if (dropout) {  // Z = P·F: after the softmax, so lse is of the undropped scores
          float* factors = factor_buf[thread];
          row_dropout_factors(factors, keys, dropout_p, seed, offset, bh, T, i);
#pragma omp simd
          for (int j = 0; j < keys; j++) row[j] *= factors[j];
        }
      }
      // out block (rows, HS) = probabilities (dropped out: Z) · v[:keys]
      S* out_block = out + (b * T + i0) * C + h * HS;
      const View o = open_block(out_block, rows, HS, C, out_buf[thread], /*keep=*/false);
      gemm(false, false, rows, HS, keys, 1.0f, {prob, keys}, v, 0.0f, o);
      close_block(o, out_block, rows, HS, C);
    }
  }
}

// With P = softmax(S), S = scale · q kᵀ, and dP = dout · vᵀ:
//   dv = Pᵀ dout,  dS = P ∘ (dP - rowsum(P ∘ dP)),  dq = scale · dS k,  dk = scale · dSᵀ q.
// With dropout, Z = P ∘ F (F the factors 1/(1 - p) or 0) and out = Z v:
//   dv = Zᵀ dout,  dZ = dout · vᵀ,  dP = dZ ∘ F,  and dS as above from P and dP
// (rowsum(P ∘ dP) = rowsum(Z ∘ dZ) = rowsum(dout ∘ out): still the flash-attention D_i).
template <typename S>
void attention_backward(CpuContext& cx, S* dqkv, const S* dout, const S* out, const S* qkv,
                        const float* lse, const int32_t* key_mask, bool causal, int B, int T,
                        int NH, int HS) {
  attention_backward_dropout(cx, dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS, 0.0f, 0,
                             0);
}

template <typename S>
void attention_backward_dropout(CpuContext& cx, S* dqkv, const S* dout, const S* out, const S* qkv,
                                const float* lse, const int32_t* key_mask, bool causal, int B,
                                int T, int NH, int HS, float dropout_p, uint64_t seed,
                                uint64_t offset) {
  if (!dqkv) return;
  if constexpr (!is_fp32_storage<S>) {
    if (cx.onednn) {
      attention_backward_onednn(cx, dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS,
                                dropout_p, seed, offset);
      return;
    }
  }
  (void)out;  // D_i is summed from P and dP here
  const bool dropout = dropout_p > 0.0f;
  const int64_t C = int64_t(NH) * HS, row_stride = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
  const int block = std::min(kQueryBlock, T);
  const bool widened = !is_fp32_storage<S>;
  const int64_t head_size = int64_t(T) * HS;
  // Per thread: one head at a time, one block of its queries at a time.
  Scratch scratch(cx.scratch);
  const PerThread head_buf = scratch.per_thread(widened ? size_t(4 * head_size) : 0,
                                                cx.threads);  // q, k, v, dout (4, T, HS)
  const PerThread prob_buf = scratch.per_thread(size_t(block) * T, cx.threads);   // P (block, T)
  const PerThread dprob_buf = scratch.per_thread(size_t(block) * T, cx.threads);  // dP, dS
  const PerThread grad_buf =  // dk, dv (2, T, HS), then the dq block (block, HS)
      scratch.per_thread(widened ? size_t(2 * head_size + block * HS) : 0, cx.threads);
  const PerThread z_buf =  // with dropout: Z (block, T) and the factors F (block, T)
      scratch.per_thread(dropout ? size_t(block) * T : 0, cx.threads);
  const PerThread factor_buf = scratch.per_thread(dropout ? size_t(block) * T : 0, cx.threads);
  cx.key_visible.resize(size_t(cx.threads) * T);

#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t bh = 0; bh < int64_t(B) * NH; bh++) {
    const int thread = omp_get_thread_num();
    const int64_t b = bh / NH, h = bh % NH;
    const S* head = qkv + b * T * row_stride + h * HS;
    const S* dout_head = dout + b * T * C + h * HS;
    S* dhead = dqkv + b * T * row_stride + h * HS;
    float* buf = head_buf[thread];
    const ConstView q = read_block(head, T, HS, row_stride, buf);
    const ConstView k = read_block(head + C, T, HS, row_stride, buf + head_size);
    const ConstView v = read_block(head + 2 * C, T, HS, row_stride, buf + 2 * head_size);
    const ConstView dy = read_block(dout_head, T, HS, C, buf + 3 * head_size);
    float* gbuf = grad_buf[thread];
    // dk, dv sum over the query blocks from zero; dqkv's old contents do not count.
    const View dk = open_block(dhead + C, T, HS, row_stride, gbuf, /*keep=*/false);
    const View dv = open_block(dhead + 2 * C, T, HS, row_stride, gbuf + head_size, false);
    zero_view(dk, T, HS);
    zero_view(dv, T, HS);
    float* dq_buf = gbuf + 2 * head_size;
    const int32_t* key_ok = key_flags(cx, thread, key_mask ? key_mask + b * T : nullptr, T);
    const float* lse_head = lse + bh * T;
    float* prob = prob_buf[thread];
    float* dprob = dprob_buf[thread];

    for (int i0 = 0; i0 < T; i0 += block) {
      const int rows = std::min(block, T - i0);
      const int keys = block_keys(i0, rows, T, causal);
      const ConstView q_block{q.data + i0 * q.ld, q.ld}, dy_block{dy.data + i0 * dy.ld, dy.ld};
      // P (rows, keys) = exp(scale · q kᵀ - lse), 0 where hidden
      gemm(false, true, rows, keys, HS, scale, q_block, k, 0.0f, {prob, keys});
      for (int r = 0; r < rows; r++) {
        const int i = i0 + r;
        const float row_lse = lse_head[i];
        const bool sees_nothing = row_lse == -std::numeric_limits<float>::infinity();
        const int end = sees_nothing ? 0 : visible_end(i, keys, causal);
        float* p = prob + int64_t(r) * keys;
#pragma omp simd
        for (int j = 0; j < keys; j++) {
          p[j] = select_float((j < end) & key_ok[j], exp_approx(p[j] - row_lse), 0.0f);
        }
      }
      float* z = prob;  // Z (rows, keys) = P without dropout
      float* factors = factor_buf[thread];
      if (dropout) {
        z = z_buf[thread];
        for (int r = 0; r < rows; r++) {
          float* f = factors + int64_t(r) * keys;
          row_dropout_factors(f, keys, dropout_p, seed, offset, bh, T, i0 + r);
          const float* pr = prob + int64_t(r) * keys;
          float* zr = z + int64_t(r) * keys;
#pragma omp simd
          for (int j = 0; j < keys; j++) zr[j] = pr[j] * f[j];
        }
      }
      gemm(true, false, keys, HS, rows, 1.0f, {z, keys}, dy_block, 1.0f, dv);     // dv += Zᵀ dy
      gemm(false, true, rows, keys, HS, 1.0f, dy_block, v, 0.0f, {dprob, keys});  // dZ = dy vᵀ
      for (int r = 0; r < rows; r++) {
        const float* p = prob + int64_t(r) * keys;
        float* ds = dprob + int64_t(r) * keys;
        if (dropout) {  // dP = dZ ∘ F
          const float* f = factors + int64_t(r) * keys;
#pragma omp simd
          for (int j = 0; j < keys; j++) ds[j] *= f[j];
        }
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < keys; j++) dot += p[j] * ds[j];
#pragma omp simd
        for (int j = 0; j < keys; j++) ds[j] = p[j] * (ds[j] - dot);
      }
      S* dq_block = dhead + i0 * row_stride;
      const View dq = open_block(dq_block, rows, HS, row_stride, dq_buf, /*keep=*/false);
      gemm(false, false, rows, HS, keys, scale, {dprob, keys}, k, 0.0f, dq);  // dq = scale dS k
      close_block(dq, dq_block, rows, HS, row_stride);
      gemm(true, false, keys, HS, rows, scale, {dprob, keys}, q_block, 1.0f,
           dk);  // dk += scale dSᵀ q
    }
    close_block(dk, dhead + C, T, HS, row_stride);
    close_block(dv, dhead + 2 * C, T, HS, row_stride);
  }
}

template void attention_forward(CpuContext&, bf16*, float*, const bf16*, const int32_t*, bool, int,
                                int, int, int);
template void attention_forward(CpuContext&, float*, float*, const float*, const int32_t*, bool,
                                int, int, int, int);
template void attention_backward(CpuContext&, bf16*, const bf16*, const bf16*, const bf16*,
                                 const float*, const int32_t*, bool, int, int, int, int);
template void attention_backward(CpuContext&, float*, const float*, const float*, const float*,
                                 const float*, const int32_t*, bool, int, int, int, int);
template void attention_forward_dropout(CpuContext&, bf16*, float*, const bf16*, const int32_t*,
                                        bool, int, int, int, int, float, uint64_t, uint64_t);
template void attention_forward_dropout(CpuContext&, float*, float*, const float*, const int32_t*,
                                        bool, int, int, int, int, float, uint64_t, uint64_t);
template void attention_backward_dropout(CpuContext&, bf16*, const bf16*, const bf16*, const bf16*,
                                         const float*, const int32_t*, bool, int, int, int, int,
                                         float, uint64_t, uint64_t);
template void attention_backward_dropout(CpuContext&, float*, const float*, const float*,
                                         const float*, const float*, const int32_t*, bool, int, int,
                                         int, int, float, uint64_t, uint64_t);

}  // namespace collage::cpu
