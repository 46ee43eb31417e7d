#pragma once
// Backend: the only code that touches device memory and computes. The model (src/model/)
// is written once against this interface; cpu/ and cuda/ (GPU and emulated) implement it, and
// src/dist/backend_choice.h makes one by its `parallel.backend` name.
//
// Conventions for every op (docs/ARCHITECTURE.md, "The Backend contract", "Precision semantics"):
//  - bf16 storage in and out; arithmetic in fp32; results rounded to bf16 (nearest-even).
//  - GEMMs: bf16 operands, fp32 accumulation, one rounding on store.
//  - Reductions (layernorm statistics, softmax max/sum, losses, norms) accumulate in fp32
//    or wider; saved statistics (mean, rstd, lse) are fp32.
//  - Backward ops ACCUMULATE into parameter gradients (`+=`, one rounding to bf16: they sum
//    over micro-batches; the trainer zeroes them once a step) and WRITE the gradient of their
//    input (`=`, one rounding; the buffer's old contents are never read), so no activation
//    gradient needs zeroing first. Two ops add into their input's gradient instead:
//    layernorm_backward (its dinp is the residual stream's gradient, which every layer adds
//    into) and scatter_add_rows (rows repeat). Where branches meet, the model adds with
//    accumulate().
//  - Any gradient pointer may be null: that gradient is then not computed.
//  - N = B*T rows. Pointers are device pointers from allocate().
//  - Every op checks its arguments (sizes, scalars, required pointers) with its check in
//    backend_contract.h before the backend's do_<op> runs, so every backend refuses the same
//    calls with the same message; backends override do_<op>, never the op.
//
// The interface is a template over the storage type `Storage` of parameters, gradients and
// activations. Training always uses `Backend` = BackendT<bf16>; the cpu backend also
// instantiates BackendT<float> (no rounding anywhere) so that tests can check the model's
// backward by finite differences at fp32 with the very same model code.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend_contract.h"
#include "backend/optimizer_step.h"
#include "core/op_family.h"
#include "numerics/bf16.h"

namespace collage {

template <typename Storage>
class BackendT {
 public:
  virtual ~BackendT() = default;
  virtual std::string name() const = 0;
  // What runs the GEMMs and why ("oneDNN bf16 matmul (auto: ...)"), for the log and bench.
  virtual std::string gemm_engine() const { return ""; }
  // What runs the optimizer's element loop and why ("AVX-512 lanes (auto: ...)"), likewise;
  // once steps have run, the cpu adds how many blocks its guarded rounding redid exactly.
  virtual std::string optimizer_engine() const { return ""; }
  // What runs the elementwise, LayerNorm and cross-entropy kernels and why, likewise (the cpu:
  // "AVX-512 lanes (auto: ...)").
  virtual std::string kernel_engine() const { return ""; }

  // ---- memory ----
  // allocate: zero-filled device memory aligned to at least 256 bytes.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // ranges must not overlap
  virtual void zero(void* dst, size_t bytes) = 0;
  // Waits until every queued op has run (a no-op on the cpu, where ops run as they are
  // called). Results the backend hands back later, such as EdqSums, are in place after it.
  virtual void synchronize() {}
  // What a backend that queues work did so far: kernels launched and host waits for the
  // device. Tests and `collage bench` read them; the cpu backend counts nothing.
  struct Counters {
    int64_t launches = 0;
    int64_t synchronizations = 0;
  };
  virtual Counters counters() const { return {}; }
  // `collage bench --profile`: from start_profile on, time every kernel and GEMM by op family
  // (op_family.h); stop_profile waits for the device and returns each family's time and
  // launches since the start (the cpu backend: each op's wall time and op count). A backend
  // that cannot returns false from start_profile and nothing from stop_profile. Off unless
  // started: the step records nothing.
  virtual bool start_profile() { return false; }
  virtual std::vector<OpFamilyTime> stop_profile() { return {}; }
  // The cuda backend's cudaStream_t (NCCL queues its collectives there); null elsewhere.
  virtual void* stream_handle() const { return nullptr; }

  // ---- embedding ----
  // out (B*T, C) = wte[tokens - vocab_begin] for tokens in [vocab_begin, vocab_end), else 0
  // (vocab-parallel lookup; tp=1 passes the whole padded vocab), plus wpe[t] if wpe != null.
  void embedding_forward(Storage* out, const int32_t* tokens, const Storage* wte,
                         const Storage* wpe, int B, int T, int C, int64_t vocab_begin,
                         int64_t vocab_end) {
    contract::embedding_forward(out, tokens, wte, B, T, C, vocab_begin, vocab_end);
    do_embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
  }
  // dwte[token] += dout row; dwpe[t] += sum over b of dout rows. Rows of one token summed in
  // fp32 before the single bf16 accumulation.
  void embedding_backward(Storage* dwte, Storage* dwpe, const Storage* dout, const int32_t* tokens,
                          int B, int T, int C, int64_t vocab_begin, int64_t vocab_end) {
    contract::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
    do_embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
  }

  // ---- layernorm over the last dimension ----
  // out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) fp32 saved.
  void layernorm_forward(Storage* out, float* mean, float* rstd, const Storage* inp,
                         const Storage* weight, const Storage* bias, int64_t N, int C, float eps) {
    contract::layernorm_forward(out, inp, weight, N, C, eps);
    do_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  // The residual add and the layernorm that reads its result, fused (one pass over memory on a
  // GPU): residual (N, C) = rn(a + b); out = layernorm(residual), computed from the rounded
  // residual, exactly as add() followed by layernorm_forward(), which is what the default does.
  void residual_layernorm_forward(Storage* residual, Storage* out, float* mean, float* rstd,
                                  const Storage* a, const Storage* b, const Storage* weight,
                                  const Storage* bias, int64_t N, int C, float eps) {
    contract::residual_layernorm_forward(residual, out, a, b, weight, N, C, eps);
    do_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C, eps);
  }
  // dinp (N, C) += the input's gradient (added, not written: in the models dinp is the
  // residual stream's gradient); dweight, dbias (C) += their gradients. dinp_sums (C), if not
  // null, += Σ_rows dinp after the add, summed as matmul_backward sums a bias gradient: the
  // bias gradient of a matmul whose output's gradient dinp now is (the GPT's residual stream
  // after a layernorm backward is the gradient of the proj or fc2 output below it), formed
  // from the rows just written instead of a second read.
  void layernorm_backward(Storage* dinp, Storage* dweight, Storage* dbias, const Storage* dout,
                          const Storage* inp, const Storage* weight, const float* mean,
                          const float* rstd, int64_t N, int C, Storage* dinp_sums = nullptr) {
    contract::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    contract::sums_of_gradient("layernorm_backward", dinp_sums, "dinp_sums", dinp, "dinp");
    do_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dinp_sums);
  }

  // ---- matmul: out (N, OC) = inp (N, C) · weight (OC, C)^T + bias (OC); bias may be null
  void matmul_forward(Storage* out, const Storage* inp, const Storage* weight, const Storage* bias,
                      int64_t N, int C, int OC) {
    contract::matmul_forward(out, inp, weight, N, C, OC);
    do_matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  // dinp (N, C) = dout · weight (written); dweight (OC, C) += dout^T · inp; dbias (OC) +=
  // Σ_rows dout
  void matmul_backward(Storage* dinp, Storage* dweight, Storage* dbias, const Storage* dout,
                       const Storage* inp, const Storage* weight, int64_t N, int C, int OC) {
    contract::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    do_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }

  // ---- elementwise ----
  // GELU, tanh approximation: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))); backward:
  // dinp = gelu'(inp)·dout.
  void gelu_forward(Storage* out, const Storage* inp, int64_t n) {
    contract::elementwise("gelu_forward", n, {out, inp}), do_gelu_forward(out, inp, n);
  }
  void gelu_backward(Storage* dinp, const Storage* inp, const Storage* dout, int64_t n) {
    contract::elementwise_backward("gelu_backward", n, dinp, {inp, dout}),
        do_gelu_backward(dinp, inp, dout, n);
  }
  // gelu_backward (exact: gelu_erf_backward) over (N, C) rows, and dbias (C) += Σ_rows dinp,
  // the column sums of the dinp it wrote, as matmul_backward forms a bias gradient: for a GELU
  // whose input is a matmul's output with a bias, that bias's gradient without a second read
  // of dinp. The same bits as the two ops one after the other; dbias null: the GELU's alone.
  void gelu_backward_bias(Storage* dinp, Storage* dbias, const Storage* inp, const Storage* dout,
                          int64_t N, int C, bool exact) {
    contract::gelu_backward_bias(dinp, inp, dout, N, C);
    contract::sums_of_gradient("gelu_backward_bias", dbias, "dbias", dinp, "dinp");
    do_gelu_backward_bias(dinp, dbias, inp, dout, N, C, exact);
  }
  // out = a + b
  void add(Storage* out, const Storage* a, const Storage* b, int64_t n) {
    contract::elementwise("add", n, {out, a, b});
    do_add(out, a, b, n);
  }
  // dst += src
  void accumulate(Storage* dst, const Storage* src, int64_t n) {
    contract::elementwise("accumulate", n, {dst, src});
    do_accumulate(dst, src, n);
  }

  // ---- encoder ops (BERT/RoBERTa) ----
  // GELU, exact: 0.5·x·(1 + erf(x/√2)) (BERT's and RoBERTa's "gelu"); backward:
  // dinp = (0.5·(1 + erf(x/√2)) + x·exp(-x²/2)/√(2π))·dout. erff is the C library's on the
  // cpu and CUDA's on a GPU; the two may differ by an ulp (numerics/elementwise_math.h).
  void gelu_erf_forward(Storage* out, const Storage* inp, int64_t n) {
    contract::elementwise("gelu_erf_forward", n, {out, inp}), do_gelu_erf_forward(out, inp, n);
  }
  void gelu_erf_backward(Storage* dinp, const Storage* inp, const Storage* dout, int64_t n) {
    contract::elementwise_backward("gelu_erf_backward", n, dinp, {inp, dout}),
        do_gelu_erf_backward(dinp, inp, dout, n);
  }
  // out = tanh(inp) (the pooler); backward from the saved output: dinp = (1 - out²)·dout.
  void tanh_forward(Storage* out, const Storage* inp, int64_t n) {
    contract::elementwise("tanh_forward", n, {out, inp}), do_tanh_forward(out, inp, n);
  }
  void tanh_backward(Storage* dinp, const Storage* out, const Storage* dout, int64_t n) {
    contract::elementwise_backward("tanh_backward", n, dinp, {out, dout}),
        do_tanh_backward(dinp, out, dout, n);
  }
  // Dropout, 0 ≤ p < 1: element i is kept iff u(seed, offset + i) ≥ p, and then scaled by
  // 1/(1 - p), else 0, where u(seed, e) ∈ [0, 1) is word e % 4 of Philox-4x32-10 with key
  // (seed low, seed high) and counter (e/4 low, e/4 high, 0, 0), its top 24 bits · 2^-24
  // (numerics/elementwise_math.h: dropout_uniform). Nothing is stored: the backward recomputes
  // the mask from (seed, offset), every backend draws the same mask, and a resumed run replays
  // it. The caller gives each dropout site its own range of offsets. p = 0 is the identity.
  // out may equal inp. Backward: dinp = dout·factor.
  void dropout_forward(Storage* out, const Storage* inp, int64_t n, float p, uint64_t seed,
                       uint64_t offset) {
    contract::dropout("dropout_forward", n, p, out, inp, false);
    do_dropout_forward(out, inp, n, p, seed, offset);
  }
  void dropout_backward(Storage* dinp, const Storage* dout, int64_t n, float p, uint64_t seed,
                        uint64_t offset) {
    contract::dropout("dropout_backward", n, p, dinp, dout, true);
    do_dropout_backward(dinp, dout, n, p, seed, offset);
  }
  // attention_forward/backward (below) with dropout on the attention probabilities, as
  // PyTorch's dropout(softmax(scores))·v: probability (b, h, query i, key j) is dropped iff
  // u(seed, offset + ((b·NH + h)·T + i)·T + j) < p, kept ones scaled by 1/(1 - p). lse stays
  // that of the undropped scores. The call uses offsets [offset, offset + B·NH·T·T). p = 0 gives
  // attention_forward/backward's results.
  void attention_forward_dropout(Storage* out, float* lse, const Storage* qkv,
                                 const int32_t* key_mask, bool causal, int B, int T, int NH, int HS,
                                 float p, uint64_t seed, uint64_t offset) {
    contract::attention("attention_forward_dropout", out, lse, qkv, B, T, NH, HS, p);
    do_attention_forward_dropout(out, lse, qkv, key_mask, causal, B, T, NH, HS, p, seed, offset);
  }
  void attention_backward_dropout(Storage* dqkv, const Storage* dout, const Storage* out,
                                  const Storage* qkv, const float* lse, const int32_t* key_mask,
                                  bool causal, int B, int T, int NH, int HS, float p, uint64_t seed,
                                  uint64_t offset) {
    contract::attention_backward("attention_backward_dropout", dqkv, dout, out, qkv, lse, B, T, NH,
                                 HS, p);
    do_attention_backward_dropout(dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS, p,
                                  seed, offset);
  }
  // out (count, C) = inp[rows[k]] for k < count (rows: device int32 row indices of inp); the
  // MLM head's masked positions, the pooler's [CLS] rows.
  void gather_rows(Storage* out, const Storage* inp, const int32_t* rows, int64_t count, int C) {
    contract::gather_rows(out, inp, rows, count, C);
    do_gather_rows(out, inp, rows, count, C);
  }
  // dinp[rows[k]] += dout[k] (count, C). Rows may repeat: the dout rows of one destination are
  // summed in fp32 in ascending k, then added with one rounding (deterministic).
  void scatter_add_rows(Storage* dinp, const Storage* dout, const int32_t* rows, int64_t count,
                        int C) {
    contract::scatter_add_rows(dinp, dout, rows, count, C);
    do_scatter_add_rows(dinp, dout, rows, count, C);
  }

  // ---- rotary position embedding (GPT-NeoX "rotate half", positions 0..T-1) ----
  // qkv (B, T, 3·NH·HS): q at [0, C), k at [C, 2C), v at [2C, 3C), head h at [h·HS, (h+1)·HS).
  // out = qkv with q and k rotated, v copied. Pair (i, i + HS/2) rotates by t·base^(-2i/HS).
  void rope_forward(Storage* out, const Storage* qkv, int B, int T, int NH, int HS, float base) {
    contract::rope("rope_forward", out, qkv, B, T, NH, HS, base, false);
    do_rope_forward(out, qkv, B, T, NH, HS, base);
  }
  // dqkv = R^T · dout (v passes through).
  void rope_backward(Storage* dqkv, const Storage* dout, int B, int T, int NH, int HS, float base) {
    contract::rope("rope_backward", dqkv, dout, B, T, NH, HS, base, true);
    do_rope_backward(dqkv, dout, B, T, NH, HS, base);
  }

  // ---- attention, per (b, head): softmax(q·kᵀ/√HS + mask)·v ----
  // qkv (B, T, 3·NH·HS) as above; out (B, T, NH·HS); lse (B, NH, T) fp32 log-sum-exp of each
  // query row's scaled, masked scores (saved; backward recomputes the probabilities).
  // causal: query i sees keys j ≤ i. key_mask (B, T), may be null: key j hidden where 0.
  // Backward: dqkv (B, T, 3·NH·HS) = the gradient of qkv, written whole (0 for hidden keys).
  void attention_forward(Storage* out, float* lse, const Storage* qkv, const int32_t* key_mask,
                         bool causal, int B, int T, int NH, int HS) {
    contract::attention("attention_forward", out, lse, qkv, B, T, NH, HS, 0.0f);
    do_attention_forward(out, lse, qkv, key_mask, causal, B, T, NH, HS);
  }
  // dqkv_sums (3·NH·HS), if not null, += Σ_rows dqkv, summed as matmul_backward sums a bias
  // gradient: the bias gradient of the qkv matmul, from the rows the backward writes instead of
  // a second read (the GPT without rope; with rope its input's gradient is rope's).
  void attention_backward(Storage* dqkv, const Storage* dout, const Storage* out,
                          const Storage* qkv, const float* lse, const int32_t* key_mask,
                          bool causal, int B, int T, int NH, int HS, Storage* dqkv_sums = nullptr) {
    contract::attention_backward("attention_backward", dqkv, dout, out, qkv, lse, B, T, NH, HS,
                                 0.0f);
    contract::sums_of_gradient("attention_backward", dqkv_sums, "dqkv_sums", dqkv, "dqkv");
    do_attention_backward(dqkv, dout, out, qkv, lse, key_mask, causal, B, T, NH, HS, dqkv_sums);
  }

  // ---- softmax cross-entropy over the first V of Vp logit columns (Vp = padded vocab) ----
  // losses (N) fp32 = logsumexp(logits[:V]) - logits[target]; targets < 0 are ignored (loss 0).
  // row_lse (N), when not null: each row's logsumexp (0 for ignored rows), the very value
  // cross_entropy_backward would recompute; cross_entropy_shard_backward with it (vocab_begin
  // 0, Vl = Vp) gives cross_entropy_backward's result without reading the logits for it.
  void cross_entropy_forward(float* losses, const Storage* logits, const int32_t* targets,
                             int64_t N, int V, int Vp, float* row_lse = nullptr) {
    contract::cross_entropy_forward(losses, logits, targets, N, V, Vp);
    do_cross_entropy_forward(losses, logits, targets, N, V, Vp, row_lse);
  }
  // dlogits (N, Vp) = (softmax(logits[:V]) - onehot(target)) · dloss; 0 in padding columns
  // and ignored rows.
  void cross_entropy_backward(Storage* dlogits, const Storage* logits, const int32_t* targets,
                              int64_t N, int V, int Vp, float dloss) {
    contract::cross_entropy_backward(dlogits, logits, targets, N, V, Vp);
    do_cross_entropy_backward(dlogits, logits, targets, N, V, Vp, dloss);
  }

  // ---- vocab-parallel cross-entropy (tensor parallelism, docs/PARALLEL.md §3) ----
  // This rank holds logit columns [vocab_begin, vocab_begin + Vl) of the padded vocabulary:
  // logits (N, Vl). Global column vocab_begin + j is a real token when < V; the others are
  // padding and are never read. The caller all-reduces over the tensor-parallel group between
  // the stages:
  //   1. row_max (N) = max over this shard's real columns (−inf when it has none);
  //      then all_reduce_max(row_max).
  //   2. sums (2N): sums[i] = Σ_j exp(x[j] − row_max[i]) over this shard's real columns (0 when
  //      none); sums[N + i] = x[target_i − vocab_begin] when the target is in this shard, else 0;
  //      then all_reduce_sum(sums, 2N).
  //   3. lse (N) = row_max + log(sums[i]); losses (N) = lse − sums[N + i]; both 0 for targets < 0.
  // Backward: dlogits (N, Vl) = (exp(x[j] − lse[i]) − [vocab_begin + j == target_i]) · dloss
  // in the real columns, 0 in the padding columns and in rows with targets < 0: it writes every
  // element, as every input gradient is written. Targets >= V are an error
  // (cpu throws like cross_entropy_forward; kernels treat them as ignored, writing zeros: they
  // are data, outside the argument checks of backend_contract.h).
  // With vocab_begin = 0 and Vl = Vp these give cross_entropy_forward's results and
  // cross_entropy_backward's.
  void cross_entropy_shard_max(float* row_max, const Storage* logits, int64_t N, int V, int Vl,
                               int64_t vocab_begin) {
    contract::cross_entropy_shard_max(row_max, logits, N, V, Vl, vocab_begin);
    do_cross_entropy_shard_max(row_max, logits, N, V, Vl, vocab_begin);
  }
  void cross_entropy_shard_sums(float* sums, const Storage* logits, const int32_t* targets,
                                const float* row_max, int64_t N, int V, int Vl,
                                int64_t vocab_begin) {
    contract::cross_entropy_shard_sums(sums, logits, targets, row_max, N, V, Vl, vocab_begin);
    do_cross_entropy_shard_sums(sums, logits, targets, row_max, N, V, Vl, vocab_begin);
  }
  void cross_entropy_shard_loss(float* losses, float* lse, const float* row_max, const float* sums,
                                const int32_t* targets, int64_t N) {
    contract::cross_entropy_shard_loss(losses, lse, row_max, sums, targets, N);
    do_cross_entropy_shard_loss(losses, lse, row_max, sums, targets, N);
  }
  void cross_entropy_shard_backward(Storage* dlogits, const Storage* logits, const int32_t* targets,
                                    const float* lse, int64_t N, int V, int Vl, int64_t vocab_begin,
                                    float dloss) {
    contract::cross_entropy_shard_backward(dlogits, logits, targets, lse, N, V, Vl, vocab_begin);
    do_cross_entropy_shard_backward(dlogits, logits, targets, lse, N, V, Vl, vocab_begin, dloss);
  }

  // ---- reductions and scaling (results returned to the host) ----
  double sum(const float* x, int64_t n) {
    contract::elementwise("sum", n, {x});
    return do_sum(x, n);
  }
  double sum_squares(const Storage* x, int64_t n) {
    contract::elementwise("sum_squares", n, {x});
    return do_sum_squares(x, n);
  }
  // x = rn(x · factor)
  void scale(Storage* x, float factor, int64_t n) {
    contract::elementwise("scale", n, {x});
    do_scale(x, factor, n);
  }

  // ---- optimizer: one strategy step over each of several tensors (see optimizer_step.h) ----
  // The results are those of one optimizer_step per tensor in order; the tensors' weights must
  // not overlap, because a backend may step them all at once (the cuda backend: one launch for
  // the whole list, kernels/optimizer.cu).
  void optimizer_steps(std::span<const OptimizerStep> steps) {
    contract::optimizer_steps(steps, std::is_same_v<Storage, float>);
    do_optimizer_steps(steps);
  }
  void optimizer_step(const OptimizerStep& step) { optimizer_steps({&step, 1}); }

 protected:
  // Each op's implementation, called by the op above once its arguments passed the contract
  // (backend_contract.h): a backend overrides these, never the public ops, so no backend can
  // skip or vary the checks.
  virtual void do_embedding_forward(Storage* out, const int32_t* tokens, const Storage* wte,
                                    const Storage* wpe, int B, int T, int C, int64_t vocab_begin,
                                    int64_t vocab_end) = 0;
  virtual void do_embedding_backward(Storage* dwte, Storage* dwpe, const Storage* dout,
                                     const int32_t* tokens, int B, int T, int C,
                                     int64_t vocab_begin, int64_t vocab_end) = 0;
  virtual void do_layernorm_forward(Storage* out, float* mean, float* rstd, const Storage* inp,
                                    const Storage* weight, const Storage* bias, int64_t N, int C,
                                    float eps) = 0;
  virtual void do_residual_layernorm_forward(Storage* residual, Storage* out, float* mean,
                                             float* rstd, const Storage* a, const Storage* b,
                                             const Storage* weight, const Storage* bias, int64_t N,
                                             int C, float eps) {
    add(residual, a, b, N * C);
    layernorm_forward(out, mean, rstd, residual, weight, bias, N, C, eps);
  }
  virtual void do_layernorm_backward(Storage* dinp, Storage* dweight, Storage* dbias,
                                     const Storage* dout, const Storage* inp, const Storage* weight,
                                     const float* mean, const float* rstd, int64_t N, int C,
                                     Storage* dinp_sums) = 0;
  virtual void do_matmul_forward(Storage* out, const Storage* inp, const Storage* weight,
                                 const Storage* bias, int64_t N, int C, int OC) = 0;
  virtual void do_matmul_backward(Storage* dinp, Storage* dweight, Storage* dbias,
                                  const Storage* dout, const Storage* inp, const Storage* weight,
                                  int64_t N, int C, int OC) = 0;
  virtual void do_gelu_forward(Storage* out, const Storage* inp, int64_t n) = 0;
  virtual void do_gelu_backward(Storage* dinp, const Storage* inp, const Storage* dout,
                                int64_t n) = 0;
  // The two ops; matmul_backward forms only dbias (C = 0: it needs no input features).
  virtual void do_gelu_backward_bias(Storage* dinp, Storage* dbias, const Storage* inp,
                                     const Storage* dout, int64_t N, int C, bool exact) {
    if (exact) {
      gelu_erf_backward(dinp, inp, dout, N * C);
    } else {
      gelu_backward(dinp, inp, dout, N * C);
    }
    if (dbias) matmul_backward(nullptr, nullptr, dbias, dinp, nullptr, nullptr, N, 0, C);
  }
  virtual void do_add(Storage* out, const Storage* a, const Storage* b, int64_t n) = 0;
  virtual void do_accumulate(Storage* dst, const Storage* src, int64_t n) = 0;
  virtual void do_gelu_erf_forward(Storage* out, const Storage* inp, int64_t n) = 0;
  virtual void do_gelu_erf_backward(Storage* dinp, const Storage* inp, const Storage* dout,
                                    int64_t n) = 0;
  virtual void do_tanh_forward(Storage* out, const Storage* inp, int64_t n) = 0;
  virtual void do_tanh_backward(Storage* dinp, const Storage* out, const Storage* dout,
                                int64_t n) = 0;
  virtual void do_dropout_forward(Storage* out, const Storage* inp, int64_t n, float p,
                                  uint64_t seed, uint64_t offset) = 0;
  virtual void do_dropout_backward(Storage* dinp, const Storage* dout, int64_t n, float p,
                                   uint64_t seed, uint64_t offset) = 0;
  virtual void do_attention_forward_dropout(Storage* out, float* lse, const Storage* qkv,
                                            const int32_t* key_mask, bool causal, int B, int T,
                                            int NH, int HS, float p, uint64_t seed,
                                            uint64_t offset) = 0;
  virtual void do_attention_backward_dropout(Storage* dqkv, const Storage* dout, const Storage* out,
                                             const Storage* qkv, const float* lse,
                                             const int32_t* key_mask, bool causal, int B, int T,
                                             int NH, int HS, float p, uint64_t seed,
                                             uint64_t offset) = 0;
  virtual void do_gather_rows(Storage* out, const Storage* inp, const int32_t* rows, int64_t count,
                              int C) = 0;
  virtual void do_scatter_add_rows(Storage* dinp, const Storage* dout, const int32_t* rows,
                                   int64_t count, int C) = 0;
  virtual void do_rope_forward(Storage* out, const Storage* qkv, int B, int T, int NH, int HS,
                               float base) = 0;
  virtual void do_rope_backward(Storage* dqkv, const Storage* dout, int B, int T, int NH, int HS,
                                float base) = 0;
  virtual void do_attention_forward(Storage* out, float* lse, const Storage* qkv,
                                    const int32_t* key_mask, bool causal, int B, int T, int NH,
                                    int HS) = 0;
  virtual void do_attention_backward(Storage* dqkv, const Storage* dout, const Storage* out,
                                     const Storage* qkv, const float* lse, const int32_t* key_mask,
                                     bool causal, int B, int T, int NH, int HS,
                                     Storage* dqkv_sums) = 0;
  virtual void do_cross_entropy_forward(float* losses, const Storage* logits,
                                        const int32_t* targets, int64_t N, int V, int Vp,
                                        float* row_lse) = 0;
  virtual void do_cross_entropy_backward(Storage* dlogits, const Storage* logits,
                                         const int32_t* targets, int64_t N, int V, int Vp,
                                         float dloss) = 0;
  virtual void do_cross_entropy_shard_max(float* row_max, const Storage* logits, int64_t N, int V,
                                          int Vl, int64_t vocab_begin) = 0;
  virtual void do_cross_entropy_shard_sums(float* sums, const Storage* logits,
                                           const int32_t* targets, const float* row_max, int64_t N,
                                           int V, int Vl, int64_t vocab_begin) = 0;
  virtual void do_cross_entropy_shard_loss(float* losses, float* lse, const float* row_max,
                                           const float* sums, const int32_t* targets,
                                           int64_t N) = 0;
  virtual void do_cross_entropy_shard_backward(Storage* dlogits, const Storage* logits,
                                               const int32_t* targets, const float* lse, int64_t N,
                                               int V, int Vl, int64_t vocab_begin, float dloss) = 0;
  virtual double do_sum(const float* x, int64_t n) = 0;
  virtual double do_sum_squares(const Storage* x, int64_t n) = 0;
  virtual void do_scale(Storage* x, float factor, int64_t n) = 0;
  // One tensor's step. A backend that runs a list together overrides do_optimizer_steps too;
  // by default the list is stepped one tensor after another.
  virtual void do_optimizer_step(const OptimizerStep& step) = 0;
  virtual void do_optimizer_steps(std::span<const OptimizerStep> steps) {
    for (const OptimizerStep& step : steps) do_optimizer_step(step);
  }
};

using Backend = BackendT<bf16>;

}  // namespace collage
