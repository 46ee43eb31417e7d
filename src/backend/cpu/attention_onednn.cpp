// Attention with bf16 storage on oneDNN's bf16 matmuls (cx.onednn): the numerics of the GPU's
// tensor-core kernels (kernels/flash_attention.cu) in a GEMM formulation, per (batch, head) and
// query block as attention.cpp walks them (docs/ARCHITECTURE.md, "cpu attention").
//
// Every product has bf16 operands and an fp32 result. A head's q, k, v (and dout) are first
// copied out of qkv (B, T, 3C) (and dout (B, T, C)) into dense (T, HS) matrices: oneDNN runs a
// product of operands whose rows lie HS apart on its AMX kernels (brg, ~1 µs for 64 × 64 × 64),
// and one whose rows lie 3C apart on its jit gemm (~4 µs). A transposed operand is a stride.
// Per block of queries [i0, i0 + rows) and its keys [0, keys):
//  forward: S = q·kᵀ (fp32, unscaled; the scale goes into the exponent as on the GPU);
//    p̃_ij = e^(scale·S_ij - m_i) with m_i the row's largest scaled score, 0 where hidden;
//    l_i = Σ_j p̃_ij (fp32, undropped); lse_i = m_i + log l_i; the left factor rn(p̃_ij·F_ij) is
//    rounded to bf16 (F the dropout factors, 1 without dropout); O = rn(p̃·F)·v (fp32) and
//    out_i = rn(O_i / l_i).
//  backward: P = e^(scale·S - lse) recomputed (fp32); D_i = dout_i·out_i from the bf16 out
//    (fp32 sum); dv = rn(P∘F)ᵀ·dout; dZ = dout·vᵀ (fp32); dS = P∘(dZ∘F - D) (fp32);
//    dq = rn(scale·(rn(dS)·k)); dk = rn(dS)ᵀ·q. dk and dv sum over every query block in
//    fp32 and are rounded once at the end: dk = rn(scale·Σ), dv = rn(Σ).
// So P (or P∘F) and dS are rounded to bf16 before they multiply, exactly where the tensor-core
// kernels round them. What still differs from those kernels: the forward's p̃ is relative to the
// row's final max (the kernels' to a running max over 64- or 32-key tiles, rescaling O in fp32
// when the max grows, which is the same only when a row's max lies in its first tile), e^x is
// math::exp_approx here and the GPU's ex2 there (exp2_flushed), and the fp32 sums run in another
// order.
//
// The primitives, cached per thread (OnednnGemm): a block's seven products take three, as the
// dense operands give S = q·kᵀ (forward and backward) and dZ = dout·vᵀ one shape and strides,
// rn(p̃·F)·v and rn(dS)·k another, and the dv and dk sums a third. Blocks are kQueryBlock rows,
// so rows is 64 or T mod 64, and keys T or, causally, i0 + rows: at most 3·⌈T/64⌉ primitives
// per thread for a given T, created in the first step and reused.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/storage.h"
#include "core/error.h"

namespace collage::cpu {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// bf16 working memory from the fp32 scratch: a (rows, cols) matrix per thread.
bf16* bf16_buffer(const PerThread& buffers, int thread) {
  return reinterpret_cast<bf16*>(buffers[thread]);
}
size_t bf16_floats(size_t elements) { return (elements + 1) / 2; }

// One row of the forward: scores (keys) = q_i·k_j on entry, overwritten; writes the rounded left
// factor rn(p̃_j·F_j) to `left` (keys) and returns l = Σ_j p̃_j, with the row's lse in *row_lse
// (-inf, l = 0 and a zero row when the query sees no key). factors: null without dropout.
float forward_row(float* scores, bf16* left, int keys, int end, const int32_t* key_ok, float scale,
                  const float* factors, float* row_lse) {
#pragma omp simd
  for (int j = 0; j < keys; j++) {
    scores[j] = select_float((j < end) & key_ok[j], scale * scores[j], kMinusInf);
  }
  const float max_score = max_value(scores, keys);
  if (max_score == kMinusInf) {  // no visible key
    std::memset(static_cast<void*>(left), 0, sizeof(bf16) * size_t(keys));
    *row_lse = kMinusInf;
    return 0.0f;
  }
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int j = 0; j < keys; j++) {
    const float p = select_float((j < end) & key_ok[j], exp_approx(scores[j] - max_score), 0.0f);
    scores[j] = p;
    total += p;
  }
  if (factors) {
#pragma omp simd
    for (int j = 0; j < keys; j++) left[j] = float_to_bf16(scores[j] * factors[j]);
  } else {
#pragma omp simd
    for (int j = 0; j < keys; j++) left[j] = float_to_bf16(scores[j]);
  }
  *row_lse = max_score + std::log(total);
  return total;
}

// dst (T, HS), dense = the head's rows of src, whose rows lie `row_stride` apart.
void copy_head(bf16* dst, const bf16* src, int T, int HS, int64_t row_stride) {
  for (int t = 0; t < T; t++)
    std::memcpy(static_cast<void*>(dst + int64_t(t) * HS), src + t * row_stride,
                sizeof(bf16) * size_t(HS));
}

// The single-threaded engine of the calling thread of an OpenMP loop.
OnednnGemm& thread_gemm(CpuContext& cx, int thread) { return *cx.onednn_per_thread[thread]; }

void check_engines(const CpuContext& cx) {
  COLLAGE_CHECK(int(cx.onednn_per_thread.size()) >= cx.threads,
                "cpu attention: {} oneDNN engines for {} threads", cx.onednn_per_thread.size(),
                cx.threads);
}

}  // namespace

void attention_forward_onednn(CpuContext& cx, bf16* out, float* lse, const bf16* qkv,
                              const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                              float dropout_p, uint64_t seed, uint64_t offset) {
  check_engines(cx);
  const bool dropout = dropout_p > 0.0f;
  const int64_t C = int64_t(NH) * HS, row_stride = 3 * C;  // qkv (B, T, 3C), out (B, T, C)
  const float scale = 1.0f / std::sqrt(float(HS));
  const int block = std::min(kQueryBlock, T);
  // Per thread: one head at a time, one block of its queries at a time.
  Scratch scratch(cx.scratch);
  const PerThread score_buf = scratch.per_thread(size_t(block) * T, cx.threads);  // (block, T)
  const PerThread left_buf =
      scratch.per_thread(bf16_floats(size_t(block) * T), cx.threads);            // bf16 (block, T)
  const PerThread out_buf = scratch.per_thread(size_t(block) * HS, cx.threads);  // (block, HS)
  const PerThread sum_buf = scratch.per_thread(size_t(block), cx.threads);       // l (block)
  const PerThread factor_buf =
      scratch.per_thread(dropout ? size_t(T) : 0, cx.threads);  // one row's dropout factors
  const PerThread head_buf =
      scratch.per_thread(bf16_floats(3 * size_t(T) * HS), cx.threads);  // bf16 q, k, v (T, HS)
  cx.key_visible.resize(size_t(cx.threads) * T);

#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t bh = 0; bh < int64_t(B) * NH; bh++) {
    const int thread = omp_get_thread_num();
    OnednnGemm& gemm = thread_gemm(cx, thread);
    const int64_t b = bh / NH, h = bh % NH;
    const bf16* head = qkv + b * T * row_stride + h * HS;  // q (T, HS), row stride 3C; k, v after
    bf16* q = bf16_buffer(head_buf, thread);               // (T, HS) each, dense
    bf16* k = q + int64_t(T) * HS;
    bf16* v = k + int64_t(T) * HS;
    copy_head(q, head, T, HS, row_stride);
    copy_head(k, head + C, T, HS, row_stride);
    copy_head(v, head + 2 * C, T, HS, row_stride);
    const int32_t* key_ok = key_flags(cx, thread, key_mask ? key_mask + b * T : nullptr, T);
    float* lse_head = lse + bh * T;  // lse (B, NH, T)
    float* scores = score_buf[thread];
    bf16* left = bf16_buffer(left_buf, thread);
    float* o = out_buf[thread];
    float* sums = sum_buf[thread];

    for (int i0 = 0; i0 < T; i0 += block) {
      const int rows = std::min(block, T - i0);
      const int keys = block_keys(i0, rows, T, causal);
      // S (rows, keys) = q[i0 : i0 + rows] · k[:keys]ᵀ
      gemm.matmul<bf16, float>(rows, keys, HS, {q + int64_t(i0) * HS, HS, 1}, {k, 1, HS}, nullptr,
                               {scores, keys, 1}, false);
      for (int r = 0; r < rows; r++) {
        const int i = i0 + r;
        float* factors = nullptr;
        if (dropout) {
          factors = factor_buf[thread];
          row_dropout_factors(factors, keys, dropout_p, seed, offset, bh, T, i);
        }
        sums[r] = forward_row(scores + int64_t(r) * keys, left + int64_t(r) * keys, keys,
                              visible_end(i, keys, causal), key_ok, scale, factors, &lse_head[i]);
      }
      // O (rows, HS) = rn(p̃·F) (rows, keys) · v[:keys]
      gemm.matmul<bf16, float>(rows, HS, keys, {left, keys, 1}, {v, HS, 1}, nullptr, {o, HS, 1},
                               false);
      for (int r = 0; r < rows; r++) {
        bf16* out_row = out + (b * T + i0 + r) * C + h * HS;
        const float total = sums[r];
        const float* o_row = o + int64_t(r) * HS;
        if (total == 0.0f) {  // sees no key: out 0
          std::memset(static_cast<void*>(out_row), 0, sizeof(bf16) * size_t(HS));
          continue;
        }
#pragma omp simd
        for (int d = 0; d < HS; d++) out_row[d] = float_to_bf16(o_row[d] / total);
      }
    }
  }
}

void attention_backward_onednn(CpuContext& cx, bf16* dqkv, const bf16* dout, const bf16* out,
                               const bf16* qkv, const float* lse, const int32_t* key_mask,
                               bool causal, int B, int T, int NH, int HS, float dropout_p,
                               uint64_t seed, uint64_t offset) {
  check_engines(cx);
  const bool dropout = dropout_p > 0.0f;
  const int64_t C = int64_t(NH) * HS, row_stride = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
  const int block = std::min(kQueryBlock, T);
  const int64_t head_size = int64_t(T) * HS;
  // Per thread: one head at a time, one block of its queries at a time.
  Scratch scratch(cx.scratch);
  const PerThread prob_buf = scratch.per_thread(size_t(block) * T, cx.threads);   // S, then P
  const PerThread dprob_buf = scratch.per_thread(size_t(block) * T, cx.threads);  // dZ, then dS
  const PerThread left_buf =  // bf16 (block, T): rn(P∘F), then rn(dS)
      scratch.per_thread(bf16_floats(size_t(block) * T), cx.threads);
  const PerThread sum_buf =  // dk, dv sums (2, T, HS), then the dq block's (block, HS)
      scratch.per_thread(size_t(2 * head_size + block * HS), cx.threads);
  const PerThread delta_buf = scratch.per_thread(size_t(block), cx.threads);  // D (block)
  const PerThread factor_buf =
      scratch.per_thread(dropout ? size_t(block) * T : 0, cx.threads);  // F (block, T)
  const PerThread head_buf =  // bf16 q, k, v, dout (T, HS)
      scratch.per_thread(bf16_floats(4 * size_t(head_size)), cx.threads);
  cx.key_visible.resize(size_t(cx.threads) * T);

#pragma omp parallel for schedule(static) num_threads(cx.threads)
  for (int64_t bh = 0; bh < int64_t(B) * NH; bh++) {
    const int thread = omp_get_thread_num();
    OnednnGemm& gemm = thread_gemm(cx, thread);
    const int64_t b = bh / NH, h = bh % NH;
    const bf16* head = qkv + b * T * row_stride + h * HS;  // q (T, HS), row stride 3C; k, v after
    const bf16* y = out + b * T * C + h * HS;              // (T, HS), row stride C
    bf16* q = bf16_buffer(head_buf, thread);               // (T, HS) each, dense
    bf16* k = q + head_size;
    bf16* v = k + head_size;
    bf16* dy = v + head_size;
    copy_head(q, head, T, HS, row_stride);
    copy_head(k, head + C, T, HS, row_stride);
    copy_head(v, head + 2 * C, T, HS, row_stride);
    copy_head(dy, dout + b * T * C + h * HS, T, HS, C);
    bf16* dq = dqkv + b * T * row_stride + h * HS;
    bf16* dk = dq + C;
    bf16* dv = dq + 2 * C;
    const int32_t* key_ok = key_flags(cx, thread, key_mask ? key_mask + b * T : nullptr, T);
    const float* lse_head = lse + bh * T;
    float* prob = prob_buf[thread];
    float* dprob = dprob_buf[thread];
    bf16* left = bf16_buffer(left_buf, thread);
    float* dk_sum = sum_buf[thread];     // (T, HS)
    float* dv_sum = dk_sum + head_size;  // (T, HS)
    float* dq_sum = dv_sum + head_size;  // (block, HS)
    float* delta = delta_buf[thread];
    float* factors = factor_buf[thread];
    std::fill(dk_sum, dk_sum + 2 * head_size, 0.0f);

    for (int i0 = 0; i0 < T; i0 += block) {
      const int rows = std::min(block, T - i0);
      const int keys = block_keys(i0, rows, T, causal);
      // S (rows, keys) = q_block · kᵀ, then P = e^(scale·S - lse), 0 where hidden
      gemm.matmul<bf16, float>(rows, keys, HS, {q + int64_t(i0) * HS, HS, 1}, {k, 1, HS}, nullptr,
                               {prob, keys, 1}, false);
      for (int r = 0; r < rows; r++) {
        const int i = i0 + r;
        const float row_lse = lse_head[i];
        const int end = row_lse == kMinusInf ? 0 : visible_end(i, keys, causal);
        float* p = prob + int64_t(r) * keys;
        bf16* z = left + int64_t(r) * keys;
#pragma omp simd
        for (int j = 0; j < keys; j++) {
          p[j] = select_float((j < end) & key_ok[j], exp_approx(scale * p[j] - row_lse), 0.0f);
        }
        if (dropout) {  // the left factor of dv: rn(P∘F)
          float* f = factors + int64_t(r) * keys;
          row_dropout_factors(f, keys, dropout_p, seed, offset, bh, T, i);
#pragma omp simd
          for (int j = 0; j < keys; j++) z[j] = float_to_bf16(p[j] * f[j]);
        } else {
#pragma omp simd
          for (int j = 0; j < keys; j++) z[j] = float_to_bf16(p[j]);
        }
        // D_i = dout_i·out_i (= Σ_j Z_ij dZ_ij = Σ_j P_ij dP_ij), from the bf16 out
        const bf16* dy_row = dy + int64_t(i) * HS;
        const bf16* y_row = y + int64_t(i) * C;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < HS; d++) dot += bf16_to_float(dy_row[d]) * bf16_to_float(y_row[d]);
        delta[r] = dot;
      }
      const Operand<const bf16> dy_block{dy + int64_t(i0) * HS, HS, 1};  // (rows, HS)
      const Operand<const bf16> q_block{q + int64_t(i0) * HS, HS, 1};
      // dv sums (keys, HS) += rn(P∘F)ᵀ (keys, rows) · dout_block
      gemm.matmul<bf16, float>(keys, HS, rows, {left, 1, keys}, dy_block, nullptr, {dv_sum, HS, 1},
                               true);
      // dZ (rows, keys) = dout_block · vᵀ, then dS = P∘(dZ∘F - D), rounded into `left`
      gemm.matmul<bf16, float>(rows, keys, HS, dy_block, {v, 1, HS}, nullptr, {dprob, keys, 1},
                               false);
      for (int r = 0; r < rows; r++) {
        const float* p = prob + int64_t(r) * keys;
        float* ds = dprob + int64_t(r) * keys;
        bf16* ds_rounded = left + int64_t(r) * keys;
        const float row_delta = delta[r];
        if (dropout) {
          const float* f = factors + int64_t(r) * keys;
#pragma omp simd
          for (int j = 0; j < keys; j++)
            ds_rounded[j] = float_to_bf16(p[j] * (ds[j] * f[j] - row_delta));
        } else {
#pragma omp simd
          for (int j = 0; j < keys; j++) ds_rounded[j] = float_to_bf16(p[j] * (ds[j] - row_delta));
        }
      }
      // dq_block = rn(scale · rn(dS) (rows, keys) · k[:keys])
      gemm.matmul<bf16, float>(rows, HS, keys, {left, keys, 1}, {k, HS, 1}, nullptr,
                               {dq_sum, HS, 1}, false);
      for (int r = 0; r < rows; r++) {
        bf16* dq_row = dq + int64_t(i0 + r) * row_stride;
        const float* sum = dq_sum + int64_t(r) * HS;
#pragma omp simd
        for (int d = 0; d < HS; d++) dq_row[d] = float_to_bf16(scale * sum[d]);
      }
      // dk sums (keys, HS) += rn(dS)ᵀ (keys, rows) · q_block
      gemm.matmul<bf16, float>(keys, HS, rows, {left, 1, keys}, q_block, nullptr, {dk_sum, HS, 1},
                               true);
    }
    for (int j = 0; j < T; j++) {  // one rounding each: dk = scale·Σ, dv = Σ
      bf16* dk_row = dk + int64_t(j) * row_stride;
      bf16* dv_row = dv + int64_t(j) * row_stride;
      const float* dk_row_sum = dk_sum + int64_t(j) * HS;
      const float* dv_row_sum = dv_sum + int64_t(j) * HS;
#pragma omp simd
      for (int d = 0; d < HS; d++) {
        dk_row[d] = float_to_bf16(scale * dk_row_sum[d]);
        dv_row[d] = float_to_bf16(dv_row_sum[d]);
      }
    }
  }
}

}  // namespace collage::cpu
