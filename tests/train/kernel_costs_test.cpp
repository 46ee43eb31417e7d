// The kernel cost model (src/plan/kernel_costs.h) against independent arithmetic and against
// the model itself: the calls of every row are the Backend calls a real GPT makes (counted by
// a delegating backend), the GEMM FLOPs are 6·tokens·(matmul parameters), the byte counts of
// chosen rows are written out by hand, attention counts the visible (query, key) pairs by
// enumeration, and the optimizer's bytes per parameter follow from each strategy's storage.
#include "plan/kernel_costs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "dist/comm.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "plan/memory_plan.h"

namespace collage {
namespace {

constexpr Precision kAll[] = {Precision::fp32_master,  Precision::bf16,  Precision::collage_light,
                              Precision::collage_plus, Precision::kahan, Precision::stochastic};

ModelConfig learned_tied() {
  ModelConfig m;
  m.n_layer = 2, m.hidden_size = 48, m.n_head = 4, m.vocab_size = 300;
  m.max_position_embeddings = 32;
  return m;
}

ModelConfig rope_untied() {
  ModelConfig m;
  m.n_layer = 3, m.hidden_size = 32, m.n_head = 2, m.vocab_size = 77, m.ffn_hidden_size = 72;
  m.max_position_embeddings = 32, m.position_embedding = "rope", m.tie_embeddings = false;
  return m;
}

// The Backend op a row stands for: the first word of its name ("zero dlogits" -> zero).
std::string op_of(const KernelCost& row) { return row.name.substr(0, row.name.find(' ')); }

std::map<std::string, int64_t> calls_by_op(const std::vector<KernelCost>& rows,
                                           std::vector<KernelPhase> phases) {
  std::map<std::string, int64_t> calls;
  for (const KernelCost& r : rows)
    for (KernelPhase p : phases)
      if (r.phase == p) calls[op_of(r)] += r.calls;
  return calls;
}

const KernelCost& row_named(const std::vector<KernelCost>& rows, const std::string& name) {
  for (const KernelCost& r : rows)
    if (r.name == name) return r;
  ADD_FAILURE() << "no row " << name;
  static const KernelCost none;
  return none;
}

// A Backend that counts its calls by op and the bytes it zeroes, and hands everything to the
// cpu backend. residual_layernorm_forward counts as itself (the cpu's default then calls
// add and layernorm_forward on the inner backend, uncounted).
class CountingBackend : public Backend {
 public:
  std::map<std::string, int64_t> calls;
  double zeroed_bytes = 0;
  int64_t optimizer_elements = 0;
  void reset() { calls.clear(), zeroed_bytes = 0, optimizer_elements = 0; }

  std::string name() const override { return "counting"; }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* p) override { inner_->release(p); }
  void copy_to_device(void* d, const void* s, size_t n) override {
    calls["copy_to_device"]++, inner_->copy_to_device(d, s, n);
  }
  void copy_to_host(void* d, const void* s, size_t n) override {
    calls["copy_to_host"]++, inner_->copy_to_host(d, s, n);
  }
  void copy(void* d, const void* s, size_t n) override { calls["copy"]++, inner_->copy(d, s, n); }
  void zero(void* d, size_t n) override {
    calls["zero"]++, zeroed_bytes += double(n), inner_->zero(d, n);
  }
  void do_embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                            int B, int T, int C, int64_t vb, int64_t ve) override {
    calls["embedding_forward"]++, inner_->embedding_forward(out, tokens, wte, wpe, B, T, C, vb, ve);
  }
  void do_embedding_backward(bf16* dwte, bf16* dwpe, const bf16* dout, const int32_t* tokens, int B,
                             int T, int C, int64_t vb, int64_t ve) override {
    calls["embedding_backward"]++;
    inner_->embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vb, ve);
  }
  void do_layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                            const bf16* b, int64_t N, int C, float eps) override {
    calls["layernorm_forward"]++, inner_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  void do_residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd,
                                     const bf16* a, const bf16* b, const bf16* w, const bf16* bias,
                                     int64_t N, int C, float eps) override {
    calls["residual_layernorm_forward"]++;
    inner_->residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, N, C, eps);
  }
  void do_layernorm_backward(bf16* dinp, bf16* dw, bf16* db, const bf16* dout, const bf16* inp,
                             const bf16* w, const float* mean, const float* rstd, int64_t N, int C,
                             bf16* dinp_sums) override {
    calls["layernorm_backward"]++;
    inner_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, dinp_sums);
  }
  void do_matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* b, int64_t N, int C,
                         int OC) override {
    calls["matmul_forward"]++, inner_->matmul_forward(out, inp, w, b, N, C, OC);
  }
  void do_matmul_backward(bf16* dinp, bf16* dw, bf16* db, const bf16* dout, const bf16* inp,
                          const bf16* w, int64_t N, int C, int OC) override {
    calls["matmul_backward"]++, inner_->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  }
  void do_gelu_forward(bf16* out, const bf16* inp, int64_t n) override {
    calls["gelu_forward"]++, inner_->gelu_forward(out, inp, n);
  }
  void do_gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) override {
    calls["gelu_backward"]++, inner_->gelu_backward(dinp, inp, dout, n);
  }
  void do_add(bf16* out, const bf16* a, const bf16* b, int64_t n) override {
    calls["add"]++, inner_->add(out, a, b, n);
  }
  void do_accumulate(bf16* dst, const bf16* src, int64_t n) override {
    calls["accumulate"]++, inner_->accumulate(dst, src, n);
  }
  void do_rope_forward(bf16* out, const bf16* qkv, int B, int T, int NH, int HS,
                       float base) override {
    calls["rope_forward"]++, inner_->rope_forward(out, qkv, B, T, NH, HS, base);
  }
  void do_rope_backward(bf16* dqkv, const bf16* dout, int B, int T, int NH, int HS,
                        float base) override {
    calls["rope_backward"]++, inner_->rope_backward(dqkv, dout, B, T, NH, HS, base);
  }
  void do_attention_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* mask,
                            bool causal, int B, int T, int NH, int HS) override {
    calls["attention_forward"]++;
    inner_->attention_forward(out, lse, qkv, mask, causal, B, T, NH, HS);
  }
  void do_attention_backward(bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                             const float* lse, const int32_t* mask, bool causal, int B, int T,
                             int NH, int HS, bf16* dqkv_sums) override {
    calls["attention_backward"]++;
    inner_->attention_backward(dqkv, dout, out, qkv, lse, mask, causal, B, T, NH, HS, dqkv_sums);
  }
  void do_cross_entropy_forward(float* losses, const bf16* logits, const int32_t* targets,
                                int64_t N, int V, int Vp, float* row_lse) override {
    calls["cross_entropy_forward"]++,
        inner_->cross_entropy_forward(losses, logits, targets, N, V, Vp, row_lse);
  }
  void do_cross_entropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets,
                                 int64_t N, int V, int Vp, float dloss) override {
    calls["cross_entropy_backward"]++;
    inner_->cross_entropy_backward(dlogits, logits, targets, N, V, Vp, dloss);
  }
  void do_cross_entropy_shard_max(float* row_max, const bf16* logits, int64_t N, int V, int Vl,
                                  int64_t vocab_begin) override {
    calls["cross_entropy_shard_max"]++;
    inner_->cross_entropy_shard_max(row_max, logits, N, V, Vl, vocab_begin);
  }
  void do_cross_entropy_shard_sums(float* sums, const bf16* logits, const int32_t* targets,
                                   const float* row_max, int64_t N, int V, int Vl,
                                   int64_t vocab_begin) override {
    calls["cross_entropy_shard_sums"]++;
    inner_->cross_entropy_shard_sums(sums, logits, targets, row_max, N, V, Vl, vocab_begin);
  }
  void do_cross_entropy_shard_loss(float* losses, float* lse, const float* row_max,
                                   const float* sums, const int32_t* targets, int64_t N) override {
    calls["cross_entropy_shard_loss"]++;
    inner_->cross_entropy_shard_loss(losses, lse, row_max, sums, targets, N);
  }
  void do_cross_entropy_shard_backward(bf16* dlogits, const bf16* logits, const int32_t* targets,
                                       const float* lse, int64_t N, int V, int Vl,
                                       int64_t vocab_begin, float dloss) override {
    calls["cross_entropy_shard_backward"]++;
    inner_->cross_entropy_shard_backward(dlogits, logits, targets, lse, N, V, Vl, vocab_begin,
                                         dloss);
  }
  void do_gelu_backward_bias(bf16* dinp, bf16* db, const bf16* inp, const bf16* dout, int64_t N,
                             int C, bool exact) override {
    calls["gelu_backward_bias"]++, inner_->gelu_backward_bias(dinp, db, inp, dout, N, C, exact);
  }
  void do_gelu_erf_forward(bf16* out, const bf16* inp, int64_t n) override {
    calls["gelu_erf_forward"]++, inner_->gelu_erf_forward(out, inp, n);
  }
  void do_gelu_erf_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) override {
    calls["gelu_erf_backward"]++, inner_->gelu_erf_backward(dinp, inp, dout, n);
  }
  void do_tanh_forward(bf16* out, const bf16* inp, int64_t n) override {
    calls["tanh_forward"]++, inner_->tanh_forward(out, inp, n);
  }
  void do_tanh_backward(bf16* dinp, const bf16* out, const bf16* dout, int64_t n) override {
    calls["tanh_backward"]++, inner_->tanh_backward(dinp, out, dout, n);
  }
  void do_dropout_forward(bf16* out, const bf16* inp, int64_t n, float p, uint64_t seed,
                          uint64_t offset) override {
    calls["dropout_forward"]++, inner_->dropout_forward(out, inp, n, p, seed, offset);
  }
  void do_dropout_backward(bf16* dinp, const bf16* dout, int64_t n, float p, uint64_t seed,
                           uint64_t offset) override {
    calls["dropout_backward"]++, inner_->dropout_backward(dinp, dout, n, p, seed, offset);
  }
  void do_attention_forward_dropout(bf16* out, float* lse, const bf16* qkv, const int32_t* mask,
                                    bool causal, int B, int T, int NH, int HS, float p,
                                    uint64_t seed, uint64_t offset) override {
    calls["attention_forward_dropout"]++;
    inner_->attention_forward_dropout(out, lse, qkv, mask, causal, B, T, NH, HS, p, seed, offset);
  }
  void do_attention_backward_dropout(bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                                     const float* lse, const int32_t* mask, bool causal, int B,
                                     int T, int NH, int HS, float p, uint64_t seed,
                                     uint64_t offset) override {
    calls["attention_backward_dropout"]++;
    inner_->attention_backward_dropout(dqkv, dout, out, qkv, lse, mask, causal, B, T, NH, HS, p,
                                       seed, offset);
  }
  void do_gather_rows(bf16* out, const bf16* inp, const int32_t* rows, int64_t count,
                      int C) override {
    calls["gather_rows"]++, inner_->gather_rows(out, inp, rows, count, C);
  }
  void do_scatter_add_rows(bf16* dinp, const bf16* dout, const int32_t* rows, int64_t count,
                           int C) override {
    calls["scatter_add_rows"]++, inner_->scatter_add_rows(dinp, dout, rows, count, C);
  }
  double do_sum(const float* x, int64_t n) override { return calls["sum"]++, inner_->sum(x, n); }
  double do_sum_squares(const bf16* x, int64_t n) override {
    return calls["sum_squares"]++, inner_->sum_squares(x, n);
  }
  void do_scale(bf16* x, float factor, int64_t n) override {
    calls["scale"]++, inner_->scale(x, factor, n);
  }
  void do_optimizer_step(const OptimizerStep& step) override { do_optimizer_steps({&step, 1}); }
  void do_optimizer_steps(std::span<const OptimizerStep> steps) override {
    calls["optimizer_steps"]++;
    for (const OptimizerStep& step : steps) optimizer_elements += step.n;
    inner_->optimizer_steps(steps);
  }

 private:
  std::unique_ptr<Backend> inner_ = make_cpu_backend(1);
};

// Every row's calls are the calls a real step makes: forward, backward, and the trainer's
// step (zero_gradients, the norm, one optimizer_steps call with clipping's factor in it).
TEST(KernelCosts, CallsAreThoseOfARealStep) {
  for (const ModelConfig& m : {learned_tied(), rope_untied()}) {
    SCOPED_TRACE(m.position_embedding);
    const int B = 3, T = 24;
    CountingBackend backend;
    GPT gpt(m, backend, B, T);
    gpt.init_weights(7);
    std::vector<ParamSpan> spans;
    for (const ParameterInfo& p : gpt.parameters())
      spans.push_back({p.offset, p.numel, p.weight_decay});
    OptimizerConfig oc;
    oc.precision = Precision::collage_plus;
    Optimizer optimizer(oc, backend, spans, gpt.parameter_memory(), gpt.gradient_memory(),
                        gpt.num_parameters());
    std::mt19937 gen(3);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int i = 0; i < B * T; i++)
      tokens[i] = gen() % m.vocab_size, targets[i] = gen() % m.vocab_size;
    const std::vector<KernelCost> rows = kernel_costs(m, B, T, Precision::collage_plus);

    backend.reset();
    gpt.forward(tokens.data(), targets.data(), B);
    backend.calls.erase("copy_to_device");  // the token uploads: host copies, not kernels
    EXPECT_EQ(backend.calls, calls_by_op(rows, {KernelPhase::forward}));

    backend.reset();
    gpt.backward(1.0f / (B * T));
    EXPECT_EQ(backend.calls, calls_by_op(rows, {KernelPhase::backward}));
    // The zeroed activation gradients: each buffer by name, so the rows count every byte.
    double zero_rows = 0;
    for (const KernelCost& r : rows)
      if (r.phase == KernelPhase::backward && op_of(r) == "zero") zero_rows += r.bytes;
    EXPECT_EQ(zero_rows, backend.zeroed_bytes);

    backend.reset();
    gpt.zero_gradients();
    backend.sum_squares(gpt.gradient_memory(), gpt.num_parameters());
    auto comm = make_single_comm();
    optimizer.step(1, 1e-3, *comm, 0.5f);
    backend.calls.erase("copy_to_host");
    EXPECT_EQ(backend.calls, calls_by_op(rows, {KernelPhase::step}));
    EXPECT_EQ(backend.zeroed_bytes, row_named(rows, "zero gradients").bytes);
    EXPECT_EQ(double(backend.optimizer_elements) * 22,
              row_named(rows, "optimizer_steps collage-plus").bytes);
  }
}

// Forward + backward GEMMs: 2·N·(matmul parameters) forward, twice that backward, with the
// matmul weights taken from the parameter table (head = wte when tied, lm_head otherwise).
TEST(KernelCosts, GemmFlopsAreSixTokensTimesMatmulParameters) {
  for (const ModelConfig& m : {learned_tied(), rope_untied()}) {
    SCOPED_TRACE(m.position_embedding);
    const int B = 5, T = 19;
    const double N = B * T;
    double matmul_parameters = 0;
    for (const ParameterInfo& p : gpt_parameter_table(m)) {
      for (const char* suffix :
           {"attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc2.weight",
            m.tie_embeddings ? "wte.weight" : "lm_head.weight"})
        if (p.name.ends_with(suffix)) matmul_parameters += double(p.numel);
    }
    double forward = 0, backward = 0, other_tensor_rows = 0;
    for (const KernelCost& r : kernel_costs(m, B, T, Precision::bf16)) {
      if (op_of(r) == "matmul_forward") forward += r.flops;
      if (op_of(r) == "matmul_backward") backward += r.flops;
      // exactly the matmuls run on tensor cores
      if (r.tensor_cores != (op_of(r) == "matmul_forward" || op_of(r) == "matmul_backward"))
        other_tensor_rows++;
    }
    EXPECT_EQ(forward, 2 * N * matmul_parameters);
    EXPECT_EQ(backward, 4 * N * matmul_parameters);
    EXPECT_EQ(other_tensor_rows, 0);
  }
}

// Bytes of chosen rows, written out element by element for the learned, tied config:
// C = 48, 4 heads of 12, F = 192, V = 300 (Vp = 384), L = 2, B = 3, T = 24 (N = 72).
TEST(KernelCosts, BytesOfQkvMatmulsAttentionAndCrossEntropy) {
  const std::vector<KernelCost> rows = kernel_costs(learned_tied(), 3, 24, Precision::bf16);
  // forward: inp (72×48) + weight (144×48) + bias (144) + out (72×144), bf16, 2 layers
  EXPECT_EQ(row_named(rows, "matmul_forward qkv").bytes,
            2 * 2 * (72 * 48 + 144 * 48 + 144 + 72 * 144));
  EXPECT_EQ(row_named(rows, "matmul_forward qkv").calls, 2);
  // backward: dout (72×144), inp, weight read; dinp (72×48) written; dweight read + written
  // (the bias gradient is the attention backward's, below)
  EXPECT_EQ(row_named(rows, "matmul_backward qkv").bytes,
            2 * 2 * (72 * 144 + 72 * 48 + 144 * 48 + 72 * 48 + 2 * 144 * 48));
  // attention backward: dout, out (72×48), qkv (72×144) read, dqkv (72×144) written, the qkv
  // bias gradient (144) read + written, bf16; lse (72 rows × 4 heads) fp32
  EXPECT_EQ(row_named(rows, "attention_backward").bytes,
            2 * (2 * (72 * 48 + 72 * 48 + 72 * 144 + 72 * 144 + 2 * 144) + 4 * 72 * 4));
  // attention forward: qkv (72×144) read, out (72×48) written, lse (72 rows × 4 heads) fp32
  EXPECT_EQ(row_named(rows, "attention_forward").bytes,
            2 * (2 * (72 * 144 + 72 * 48) + 4 * 72 * 4));
  // cross-entropy backward: the 300 real columns of logits read, all 384 of dlogits written
  // (not zeroed first), targets and the forward's lse read
  EXPECT_EQ(row_named(rows, "cross_entropy_shard_backward").bytes,
            2 * 72 * 300 + 2 * 72 * 384 + 2 * 4 * 72);
  // the head's GEMM over all 384 padded columns, no bias
  EXPECT_EQ(row_named(rows, "matmul_forward head").bytes, 2 * (72 * 48 + 384 * 48 + 72 * 384));
}

// Causal attention: the visible (query, key) pairs counted one by one; 2·HS FLOPs a pair per
// GEMM-equivalent, 2 forward and 5 backward.
TEST(KernelCosts, AttentionCountsOnlyTheVisiblePairs) {
  const ModelConfig m = rope_untied();  // 2 heads of 16, 3 layers
  const int B = 2, T = 37;
  double pairs = 0;
  for (int i = 0; i < T; i++)
    for (int j = 0; j <= i; j++) pairs++;
  const std::vector<KernelCost> rows = kernel_costs(m, B, T, Precision::bf16);
  const double per_gemm = 3 * B * 2 * pairs * 2 * 16;
  EXPECT_EQ(row_named(rows, "attention_forward").flops, 2 * per_gemm);
  EXPECT_EQ(row_named(rows, "attention_backward").flops, 5 * per_gemm);
  EXPECT_FALSE(row_named(rows, "attention_forward").tensor_cores);  // SIMT kernels
  EXPECT_TRUE(row_named(rows, "attention_backward").attention);
}

// Head sizes 64 and 128 run attention on tensor cores (kernels/flash_attention.cu).
TEST(KernelCosts, AttentionOfHeadSize64And128IsOnTensorCores) {
  for (const int heads : {1, 2, 3}) {  // hidden 128: head sizes 128, 64, and 42 (SIMT)
    ModelConfig m = rope_untied();
    m.hidden_size = heads == 3 ? 126 : 128;
    m.n_head = heads;
    m.max_position_embeddings = 64;
    const std::vector<KernelCost> rows = kernel_costs(m, 2, 64, Precision::bf16);
    const bool tensor = m.head_size() == 64 || m.head_size() == 128;
    EXPECT_EQ(row_named(rows, "attention_forward").tensor_cores, tensor) << m.head_size();
    EXPECT_EQ(row_named(rows, "attention_backward").tensor_cores, tensor) << m.head_size();
  }
}

// The optimizer's traffic per parameter follows from what the strategy stores (plan_memory's
// bytes per parameter: θ, g and the state): a bf16-state strategy reads all of it and writes
// all but g; fp32-master reads all but θ (it writes θ = rn(master)) and writes all but g.
TEST(KernelCosts, OptimizerBytesPerParameterFollowTheStrategysStorage) {
  Config config = parse_config(
      "model: {n_layer: 1, hidden_size: 16, n_head: 2, vocab_size: 50}\n"
      "data: {datasets: x, seq_len: 8}\ntraining: {micro_batch_size: 1, global_batch_size: 1}\n",
      "tiny.yaml");
  for (Precision p : kAll) {
    SCOPED_TRACE(precision_name(p));
    config.optimizer.precision = p;
    const double stored = plan_memory(config, 1, 1, 1).bytes_per_parameter();
    const double reads = p == Precision::fp32_master ? stored - 2 : stored;
    EXPECT_EQ(optimizer_bytes_per_parameter(p), reads + stored - 2);

    const std::vector<KernelCost> rows = kernel_costs(config.model, 1, 8, p);
    const std::vector<ParameterInfo> table = gpt_parameter_table(config.model);
    const double P = double(table.back().offset + table.back().numel);
    const KernelCost& step = row_named(rows, std::string("optimizer_steps ") + precision_name(p));
    EXPECT_EQ(step.calls, 1);  // one call steps every tensor
    EXPECT_DOUBLE_EQ(step.bytes, P * (reads + stored - 2));
  }
  // collage-plus (docs/PRECISION.md §6): 12 bytes stored; reads θ, g, m, v, δθ, δv, writes θ,
  // m, v, δθ, δv.
  EXPECT_EQ(optimizer_bytes_per_parameter(Precision::collage_plus), 6 * 2 + 5 * 2);
  EXPECT_EQ(optimizer_flops_per_parameter(Precision::collage_plus), 36);
}

// A row's bound is the larger of its memory and compute times, at the peak of its pipe.
TEST(KernelCosts, LowerBoundIsTheSlowerOfMemoryAndCompute) {
  const GpuPeaks gpu = reference_gpus()[0];  // A100-SXM4-80GB
  EXPECT_EQ(gpu.name, "A100-SXM4-80GB");
  KernelCost r{"x", KernelPhase::forward, 1, 2.039e12, 0, false, false};
  EXPECT_DOUBLE_EQ(lower_bound_seconds(r, gpu), 1.0);
  r.flops = 2 * 19.5e12;  // fp32 pipe: 2 s
  EXPECT_DOUBLE_EQ(lower_bound_seconds(r, gpu), 2.0);
  r.tensor_cores = true;  // 312 TFLOP/s: memory bound again
  EXPECT_DOUBLE_EQ(lower_bound_seconds(r, gpu), 1.0);
  r.flops = 3 * 312e12;
  EXPECT_DOUBLE_EQ(lower_bound_seconds(r, gpu), 3.0);
}

// The formatted step total is micro-batches × (forward + backward) + optimizer step.
TEST(KernelCosts, TableTotalsAddUp) {
  const ModelConfig m = learned_tied();
  const std::vector<KernelCost> rows = kernel_costs(m, 2, 16, Precision::kahan);
  const std::vector<GpuPeaks> gpus = {{"G", 1e9, 1e12, 1e10}};  // µs-sized numbers
  double fwd = 0, bwd = 0, opt = 0;
  for (const KernelCost& r : rows) {
    const double s = lower_bound_seconds(r, gpus[0]);
    (r.phase == KernelPhase::forward ? fwd : r.phase == KernelPhase::backward ? bwd : opt) += s;
  }
  const std::string table = format_kernel_costs(rows, 32, 3, gpus);
  const double step_ms = (3 * (fwd + bwd) + opt) * 1e3;
  EXPECT_NE(table.find(fmt::format("G: step ≥ {:.1f} ms", step_ms)), std::string::npos) << table;
  EXPECT_NE(table.find("Step = 3 × (forward + backward) + optimizer step"), std::string::npos)
      << table;
  EXPECT_NE(table.find("| optimizer_steps kahan | "), std::string::npos) << table;
}

}  // namespace
}  // namespace collage
