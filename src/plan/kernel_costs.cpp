// The analytical cost model of `collage plan --kernels` (kernel_costs.h). The rows follow the
// calls of src/model/gpt.cpp (forward, backward) and of the trainer's step
// (docs/ARCHITECTURE.md "One training step"); the shapes and contracts are those of
// src/backend/backend.h. Notation: N = B·T rows, C hidden, F ffn, NH heads of HS, V vocab,
// Vp padded vocab, L layers, P parameters.
#include "plan/kernel_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/gpt.h"

namespace collage {
namespace {

constexpr double kBf16 = 2, kF32 = 4, kI32 = 4;  // bytes

// Per-element FLOPs of the elementwise math (fp32 operations; an fma counts 2). From
// src/numerics/elementwise_math.h: exp_approx is 3 (n = round(y/ln2): an fma and a subtraction)
// + 4 (reduction, two fmas) + 14 (7 Horner fmas) + 1 (·2^n) = 22; gelu is x² (1), 0.044715x²
// (1), x + 0.044715x²·x (2), ·(−2√(2/π)) (1), exp (22), 1 + e (1), x / · (1) = 29;
// gelu_derivative is the same σ (29), u' (2), σ + σ·(2x·(1−σ)·u') (6) = 37, and the backward
// multiplies by dout (1).
constexpr double kExpFlops = 22;
constexpr double kGeluFlops = 29;
constexpr double kGeluBackwardFlops = 37 + 1;
// LayerNorm (src/backend/cpu/layernorm.cpp, each quantity formed once): forward Σx (1),
// d = x − mean (1), Σd² (2), d·rstd·w + b (3) = 7; backward g = dout·w (1), x̂ (2), Σg (1),
// Σg·x̂ (2), dinp += rstd·(g − mean(g) − x̂·mean(g·x̂)) (5), dweight Σdout·x̂ (2), dbias (1)
// = 14. The fused residual add adds 1 to the forward.
constexpr double kLayernormForwardFlops = 7;
constexpr double kLayernormBackwardFlops = 14;
// Cross-entropy per logit (src/backend/cpu/cross_entropy.cpp): running max (1), x − max (1),
// exp (22), Σ (1) = 25 for the log-sum-exp, which the forward saves; the backward writes
// exp(x − lse)·dloss (1 + 22 + 1) = 24.
constexpr double kCrossEntropyForwardFlops = 3 + kExpFlops;
constexpr double kCrossEntropyBackwardFlops = 2 + kExpFlops;
// RoPE per rotated element of q and k (src/backend/cpu/rope.cpp): a pair takes 2·(2 mul +
// 1 add), forward and backward; v is copied.
constexpr double kRopeForwardFlops = 3;
constexpr double kRopeBackwardFlops = 3;

std::string short_number(double x) {
  const double a = std::fabs(x);
  if (a == 0) return "0";
  if (a >= 100) return fmt::format("{:.0f}", x);
  if (a >= 10) return fmt::format("{:.1f}", x);
  if (a >= 1) return fmt::format("{:.2f}", x);
  return fmt::format("{:.2g}", x);
}

const char* phase_title(KernelPhase phase) {
  switch (phase) {
    case KernelPhase::forward:
      return "forward, per micro-batch";
    case KernelPhase::backward:
      return "backward, per micro-batch";
    case KernelPhase::step:
      return "optimizer step, per step";
  }
  return "";
}

const char* phase_name(KernelPhase phase) {
  switch (phase) {
    case KernelPhase::forward:
      return "forward";
    case KernelPhase::backward:
      return "backward";
    case KernelPhase::step:
      return "optimizer step";
  }
  return "";
}

struct Totals {
  int64_t calls = 0;
  double bytes = 0, flops = 0;
  std::vector<double> seconds;  // per GPU
};

Totals phase_totals(const std::vector<KernelCost>& rows, const std::vector<GpuPeaks>& gpus,
                    KernelPhase phase) {
  Totals t;
  t.seconds.assign(gpus.size(), 0.0);
  for (const KernelCost& r : rows) {
    if (r.phase != phase) continue;
    t.calls += r.calls, t.bytes += r.bytes, t.flops += r.flops;
    for (size_t g = 0; g < gpus.size(); g++) t.seconds[g] += lower_bound_seconds(r, gpus[g]);
  }
  return t;
}

std::string table_row(const std::string& name, int64_t calls, double bytes, double flops,
                      const std::string& pipe, const std::vector<double>& seconds) {
  std::string row =
      fmt::format("| {} | {} | {} | {} | {} | {} |", name, calls, short_number(bytes / 1e6),
                  short_number(flops / 1e9), bytes > 0 ? short_number(flops / bytes) : "-", pipe);
  for (double s : seconds) row += fmt::format(" {} |", short_number(s * 1e6));
  return row + "\n";
}

}  // namespace

std::vector<GpuPeaks> reference_gpus() {
  return {{"A100-SXM4-80GB", 2.039e12, 312e12, 19.5e12}, {"H100-SXM5", 3.35e12, 989e12, 67e12}};
}

double optimizer_flops_per_parameter(Precision precision) {
  // src/numerics/collage_math.h, torch order: first_moment 3 (sub, fma), second_moment 4 (mul,
  // mul, fma), adamw_update 7 (sqrt, div, add, mul, div; θ·lr·wd, sub), θ + u 1 = 15;
  // grow 7 adds; mult 10 (mul, fma, mul, fma, add, add, sub, sub); plus's second moment is
  // mult + g·g + (1−β2)· + grow = 19 instead of 4; kahan's compensated update 4 instead of 1.
  switch (precision) {
    case Precision::fp32_master:
    case Precision::bf16:
    case Precision::stochastic:  // + the integer hash of its rounding noise, not counted
      return 15;
    case Precision::collage_light:
      return 3 + 4 + 7 + 7;
    case Precision::collage_plus:
      return 3 + (10 + 1 + 1 + 7) + 7 + 7;
    case Precision::kahan:
      return 3 + 4 + 7 + 4;
  }
  return 0;
}

double optimizer_bytes_per_parameter(Precision precision) {
  switch (precision) {
    case Precision::fp32_master:
      // reads g, master, m, v (2 + 3·4); writes master, m, v and θ = rn(master) (3·4 + 2)
      return 14 + 14;
    case Precision::bf16:
    case Precision::stochastic:
      return 4 * kBf16 + 3 * kBf16;  // reads θ, g, m, v; writes θ, m, v
    case Precision::collage_light:
    case Precision::kahan:
      return 5 * kBf16 + 4 * kBf16;  // + δθ (or the compensation), read and written
    case Precision::collage_plus:
      return 6 * kBf16 + 5 * kBf16;  // reads θ, g, m, v, δθ, δv; writes θ, m, v, δθ, δv
  }
  return 0;
}

namespace {

// The GPT's dimensions as one micro-batch's kernels see them, and the rows priced so far.
struct KernelCostRows {
  const int B, T;
  const double N, C, F, V, Vp, NH, HS;
  const int64_t L;
  const bool rope;
  // Rows of the embedding a micro-batch touches: one per distinct token, at most min(N, V).
  const double rows_touched;
  // Causal attention: query i sees keys 0..i, T(T+1)/2 (query, key) pairs per (b, head); a
  // GEMM-equivalent over them (q·k, or a weighted sum of HS-vectors) is 2·HS FLOPs a pair.
  const double attention_gemm;
  // Head sizes 64 and 128 run attention on tensor cores (kernels/flash_attention.cu), others on
  // the fp32 pipe (the SIMT kernels of kernels/attention.cu).
  const bool attention_on_tensor_cores;
  const double layernorm_stats;   // mean, rstd (N) fp32, written or read
  const double rope_table_bytes;  // cos, sin (T, HS/2)
  std::vector<KernelCost> rows;

  KernelCostRows(const ModelConfig& model, int b, int t)
      : B(b),
        T(t),
        N(double(b) * t),
        C(model.hidden_size),
        F(model.ffn()),
        V(model.vocab_size),
        Vp(model.padded_vocab(1)),
        NH(model.n_head),
        HS(model.head_size()),
        L(model.n_layer),
        rope(model.position_embedding == "rope"),
        rows_touched(std::min(N, V)),
        attention_gemm(B * NH * (T * (T + 1.0) / 2) * 2 * HS),
        attention_on_tensor_cores(HS == 64 || HS == 128),
        layernorm_stats(2 * N * kF32),
        rope_table_bytes(2 * T * (HS / 2) * kF32) {}

  void add(std::string name, KernelPhase phase, int64_t calls, double bytes_per_call,
           double flops_per_call, bool tensor_cores = false, bool attention = false) {
    rows.push_back({std::move(name), phase, calls, bytes_per_call * calls, flops_per_call * calls,
                    tensor_cores, attention});
  }
  // matmul_forward: out (N, OC) = inp (N, K)·Wᵀ + bias. 2·N·K·OC; the bias epilogue's adds
  // are not counted (1/K of the GEMM).
  void matmul_forward(const std::string& name, int64_t calls, double K, double OC, bool bias) {
    add("matmul_forward " + name, KernelPhase::forward, calls,
        (N * K + OC * K + (bias ? OC : 0) + N * OC) * kBf16, 2 * N * K * OC, true);
  }
  // matmul_backward: dinp (N, K) = dout·W, dweight (OC, K) += doutᵀ·inp, dbias += Σ dout:
  // dout, inp, W read; dinp written; dweight, dbias read and written (they accumulate). 2 GEMMs.
  void matmul_backward(const std::string& name, int64_t calls, double K, double OC, bool bias) {
    add("matmul_backward " + name, KernelPhase::backward, calls,
        (N * OC + N * K + OC * K + N * K + 2 * OC * K + (bias ? 2 * OC : 0)) * kBf16,
        4 * N * K * OC, true);
  }
  // layernorm_backward: dout, inp, weight, mean, rstd read; dinp, dweight, dbias accumulate;
  // with `matmul_bias`, also the bias gradient of the matmul below (Σ_rows dinp, accumulated).
  void layernorm_backward(const std::string& name, int64_t calls, bool matmul_bias) {
    add("layernorm_backward " + name, KernelPhase::backward, calls,
        (N * C + N * C + C + 2 * N * C + 4 * C + (matmul_bias ? 2 * C : 0)) * kBf16 +
            layernorm_stats,
        (kLayernormBackwardFlops + (matmul_bias ? 1 : 0)) * N * C);
  }
};

// The forward's kernels, in the order of src/model/gpt.cpp GptT::forward.
void add_forward(KernelCostRows& k) {
  using KP = KernelPhase;
  const double N = k.N, C = k.C, F = k.F, V = k.V, Vp = k.Vp, NH = k.NH;
  const int T = k.T;
  const int64_t L = k.L;
  k.add("embedding_forward", KP::forward, 1,
        N * kI32 + k.rows_touched * C * kBf16 + (k.rope ? 0 : T * C * kBf16) + N * C * kBf16,
        k.rope ? 0 : N * C);
  k.add("layernorm_forward ln_1 of layer 0", KP::forward, 1,
        (2 * N * C + 2 * C) * kBf16 + k.layernorm_stats, kLayernormForwardFlops * N * C);
  k.matmul_forward("qkv", L, C, 3 * C, true);
  if (k.rope) {
    k.add("rope_forward", KP::forward, L, 2 * N * 3 * C * kBf16 + k.rope_table_bytes,
          kRopeForwardFlops * N * 2 * C);
  }
  k.add("attention_forward", KP::forward, L, (N * 3 * C + N * C) * kBf16 + N * NH * kF32,
        2 * k.attention_gemm, k.attention_on_tensor_cores, true);
  k.matmul_forward("proj", L, C, C, true);
  // residual = a + b, out = layernorm(residual): a, b, weight, bias read; residual, out, stats
  // written.
  const double residual_layernorm_bytes = (4 * N * C + 2 * C) * kBf16 + k.layernorm_stats;
  const double residual_layernorm_flops = (1 + kLayernormForwardFlops) * N * C;
  k.add("residual_layernorm_forward ln_2", KP::forward, L, residual_layernorm_bytes,
        residual_layernorm_flops);
  k.matmul_forward("fc1", L, C, F, true);
  k.add("gelu_forward", KP::forward, L, 2 * N * F * kBf16, kGeluFlops * N * F);
  k.matmul_forward("fc2", L, F, C, true);
  k.add("residual_layernorm_forward next ln_1 / ln_f", KP::forward, L, residual_layernorm_bytes,
        residual_layernorm_flops);
  k.matmul_forward("head", 1, C, Vp, false);
  // Only the V real columns of each logit row are read; losses and lse (N) fp32 written.
  k.add("cross_entropy_forward", KP::forward, 1, N * V * kBf16 + N * kI32 + 2 * N * kF32,
        kCrossEntropyForwardFlops * N * V);
  k.add("sum losses", KP::forward, 1, N * kF32, N);
}

// The backward's kernels, in the order of GptT::backward. Each op writes its input's gradient;
// only dresidual, which the layernorm backwards add into, is zeroed (a memset).
void add_backward(KernelCostRows& k) {
  using KP = KernelPhase;
  const double N = k.N, C = k.C, F = k.F, V = k.V, Vp = k.Vp, NH = k.NH;
  const int T = k.T;
  const int64_t L = k.L;
  const bool rope = k.rope;
  k.add("zero dresidual", KP::backward, 1, N * C * kBf16, 0);
  // logits (V real columns), targets and the forward's lse read; all of dlogits written.
  k.add("cross_entropy_shard_backward", KP::backward, 1,
        N * V * kBf16 + N * Vp * kBf16 + N * kI32 + N * kF32, kCrossEntropyBackwardFlops * N * V);
  k.matmul_backward("head", 1, C, Vp, false);
  // Each layernorm backward but layer 0's ln_1 also forms the bias gradient of the matmul
  // below it (fc2's or proj's; src/model/gpt.cpp), which matmul_backward then leaves out.
  k.layernorm_backward("ln_f (+ fc2 bias of the last layer)", 1, true);
  k.matmul_backward("fc2", L, F, C, false);
  // inp, dout read, dinp written; fc1's bias gradient (its column sums, one add an element)
  // read and written: matmul_backward fc1 leaves it to this pass.
  k.add("gelu_backward_bias fc1", KP::backward, L, (3 * N * F + 2 * F) * kBf16,
        (kGeluBackwardFlops + 1) * N * F);
  k.matmul_backward("fc1", L, C, F, false);
  k.layernorm_backward("ln_2 (+ proj bias)", L, true);
  k.matmul_backward("proj", L, C, C, false);
  // dout, out (flash-style D = rowsum(dout∘out)), qkv, lse read; dqkv written; without rope
  // also the qkv bias gradient (Σ_rows dqkv, accumulated), which matmul_backward qkv leaves out.
  const double qkv_bias = rope ? 0 : 3 * C;
  k.add("attention_backward", KP::backward, L,
        (N * C + N * C + N * 3 * C + N * 3 * C + 2 * qkv_bias) * kBf16 + N * NH * kF32,
        5 * k.attention_gemm + N * qkv_bias, k.attention_on_tensor_cores, true);
  if (rope) {
    k.add("rope_backward", KP::backward, L, 2 * N * 3 * C * kBf16 + k.rope_table_bytes,
          kRopeBackwardFlops * N * 2 * C);
  }
  k.matmul_backward("qkv", L, C, 3 * C, rope);
  if (L > 1) k.layernorm_backward("ln_1 (+ fc2 bias of the layer below)", L - 1, true);
  k.layernorm_backward("ln_1 of layer 0", 1, false);
  // dout and tokens read; the touched dwte rows (and dwpe) read and written; each row's
  // gradients are summed in fp32 and added once (N·C adds for dwte, N·C for dwpe).
  k.add("embedding_backward", KP::backward, 1,
        N * C * kBf16 + N * kI32 + 2 * k.rows_touched * C * kBf16 + (rope ? 0 : 2 * T * C * kBf16),
        (rope ? 1 : 2) * N * C);
}

// The optimizer step's kernels (src/train/trainer.cpp train_step) over P parameters: the
// zeroing, the norm, and one optimizer_steps call for every tensor with global-norm clipping's
// scale in it.
void add_optimizer_step(KernelCostRows& k, double P, Precision precision) {
  using KP = KernelPhase;
  k.add("zero gradients", KP::step, 1, P * kBf16, 0);
  k.add("sum_squares gradients", KP::step, 1, P * kBf16, 2 * P);
  k.add(fmt::format("optimizer_steps {}", precision_name(precision)), KP::step, 1,
        P * optimizer_bytes_per_parameter(precision), P * optimizer_flops_per_parameter(precision));
}

}  // namespace

std::vector<KernelCost> kernel_costs(const ModelConfig& model, int B, int T, Precision precision) {
  const std::vector<ParameterInfo> table = gpt_parameter_table(model, 1);  // validates
  COLLAGE_CHECK(B >= 1 && T >= 1,
                "kernel costs: micro-batch {} and sequence length {} must be >= 1", B, T);
  const double P = double(table.back().offset + table.back().numel);
  KernelCostRows k(model, B, T);
  add_forward(k);
  add_backward(k);
  add_optimizer_step(k, P, precision);
  return std::move(k.rows);
}

double lower_bound_seconds(const KernelCost& row, const GpuPeaks& gpu) {
  const double peak = row.tensor_cores ? gpu.tensor_flops : gpu.fp32_flops;
  return std::max(row.bytes / gpu.bandwidth, row.flops / peak);
}

namespace {

// The table: a header, then each phase's rows and its total. Returns the phases' totals.
std::string phase_tables(const std::vector<KernelCost>& rows, const std::vector<GpuPeaks>& gpus,
                         std::vector<Totals>& totals) {
  std::string out = "| kernel | calls | MB | GFLOP | FLOP/B | pipe |";
  std::string rule = "|---|---:|---:|---:|---:|---|";
  for (const GpuPeaks& g : gpus) out += " " + g.name + " µs |", rule += "---:|";
  out += "\n" + rule + "\n";
  const std::string blank_times = [&] {
    std::string s;
    for (size_t g = 0; g < gpus.size(); g++) s += " |";
    return s;
  }();
  for (KernelPhase phase : {KernelPhase::forward, KernelPhase::backward, KernelPhase::step}) {
    out += fmt::format("| **{}** | | | | | |{}\n", phase_title(phase), blank_times);
    for (const KernelCost& r : rows) {
      if (r.phase != phase) continue;
      std::vector<double> seconds;
      for (const GpuPeaks& g : gpus) seconds.push_back(lower_bound_seconds(r, g));
      out +=
          table_row(r.name, r.calls, r.bytes, r.flops, r.tensor_cores ? "tensor" : "fp32", seconds);
    }
    const Totals t = phase_totals(rows, gpus, phase);
    out += table_row(fmt::format("**{} total**", phase_name(phase)), t.calls, t.bytes, t.flops, "",
                     t.seconds);
    totals.push_back(t);
  }
  return out;
}

// The step's bound on each GPU: every micro-batch's forward and backward, then the optimizer
// step, and the shares of the GEMMs and of attention.
std::string step_bounds(const std::vector<KernelCost>& rows, const std::vector<Totals>& totals,
                        int64_t tokens_per_micro_batch, int micro_batches,
                        const std::vector<GpuPeaks>& gpus) {
  std::string out;
  const Totals &fwd = totals[0], &bwd = totals[1], &opt = totals[2];
  std::vector<double> step_seconds;
  for (size_t g = 0; g < gpus.size(); g++)
    step_seconds.push_back(micro_batches * (fwd.seconds[g] + bwd.seconds[g]) + opt.seconds[g]);
  out += fmt::format(
      "\nStep = {} × (forward + backward) + optimizer step: {} kernels, {:.1f} GB, {:.1f} TFLOP.\n",
      micro_batches, micro_batches * (fwd.calls + bwd.calls) + opt.calls,
      (micro_batches * (fwd.bytes + bwd.bytes) + opt.bytes) / 1e9,
      (micro_batches * (fwd.flops + bwd.flops) + opt.flops) / 1e12);
  const double tokens_per_step = double(tokens_per_micro_batch) * micro_batches;
  for (size_t g = 0; g < gpus.size(); g++) {
    double gemm = 0, attention = 0, attention_tensor = 0;
    for (const KernelCost& r : rows) {
      if (r.phase == KernelPhase::step) continue;
      const double s = lower_bound_seconds(r, gpus[g]) * micro_batches;
      if (r.tensor_cores && !r.attention) gemm += s;  // attention is counted apart
      if (r.attention) {
        attention += s;
        KernelCost on_tensor_cores = r;
        on_tensor_cores.tensor_cores = true;
        attention_tensor += lower_bound_seconds(on_tensor_cores, gpus[g]) * micro_batches;
      }
    }
    const double step = step_seconds[g];
    // Where attention runs on the fp32 pipe (head sizes other than 64 and 128): what the step
    // would be with it on tensor cores.
    const std::string with_tensor_cores =
        attention_tensor < attention
            ? fmt::format(" With attention on tensor cores: step ≥ {:.1f} ms.",
                          (step - attention + attention_tensor) * 1e3)
            : "";
    out += fmt::format(
        "{}: step ≥ {:.1f} ms ({:.0f} tokens/s at most): GEMMs {:.0f}%, attention {:.0f}%, "
        "the rest {:.0f}%.{}\n",
        gpus[g].name, step * 1e3, tokens_per_step / step, 100 * gemm / step, 100 * attention / step,
        100 * (step - gemm - attention) / step, with_tensor_cores);
  }
  return out;
}

// The peaks the bounds are priced at, and what a row's bound means.
std::string peaks_note(const std::vector<GpuPeaks>& gpus) {
  return fmt::format(
      "\nPeaks: {}. A row's bound is max(bytes / bandwidth, FLOPs / peak) summed over its "
      "calls (a row is compute-bound when its FLOP/B exceeds peak / bandwidth); kernels run one "
      "after another on one stream. Launch latency, tails, host waits, the token uploads (8 "
      "bytes a token over PCIe) and communication are not counted.\n",
      [&] {
        std::string s;
        for (const GpuPeaks& g : gpus) {
          if (!s.empty()) s += "; ";
          s += fmt::format(
              "{} {:.4g} TB/s, {:.0f} TFLOP/s bf16 tensor, {:.3g} TFLOP/s fp32 (ridge {:.0f} and "
              "{:.1f} FLOP/B)",
              g.name, g.bandwidth / 1e12, g.tensor_flops / 1e12, g.fp32_flops / 1e12,
              g.tensor_flops / g.bandwidth, g.fp32_flops / g.bandwidth);
        }
        return s;
      }());
}

// How bytes, FLOPs and attention are counted.
constexpr const char* kCountingNote =
    "Bytes are the minimum an op must move: each input read once, each output written once, "
    "accumulating outputs (every gradient, backend.h) read and written; bf16 2 B, fp32 "
    "statistics, losses and tokens 4 B; the embedding touches one row per distinct token "
    "(counted as min(tokens, vocab)); cross-entropy reads only the real vocab columns. MB = "
    "1e6 bytes, GFLOP = 1e9 FLOPs, all calls of a row together.\n"
    "FLOPs: GEMMs 2·M·N·K (bias and accumulation epilogues not counted); elementwise ops per "
    "element as in src/numerics/elementwise_math.h (exp_approx 22, GELU 29, GELU backward "
    "39 with its bias gradient), layernorm 7 forward (8 with the residual add) and 14 backward, "
    "cross-entropy 25 per logit forward and 24 backward (from the log-sum-exp the forward "
    "saves), rope 3 and 4 per rotated element; an fma counts 2. Optimizer per parameter "
    "(src/numerics/collage_math.h, torch order): 15 FLOPs for fp32-master/bf16/stochastic, 21 "
    "collage-light, 36 collage-plus, 18 kahan, and bytes per parameter 28 fp32-master "
    "(reads g, master, m, v; writes master, m, v, θ), 14 bf16/stochastic (reads θ, g, m, v; "
    "writes θ, m, v), 18 collage-light/kahan (+ δθ or the compensation), 22 collage-plus "
    "(reads θ, g, m, v, δθ, δv; writes θ, m, v, δθ, δv); the EDQ sums are not counted, nor "
    "global-norm clipping, which the optimizer applies as it reads each gradient.\n"
    "Attention: causal, only the T(T+1)/2 visible (query, key) pairs of each head count, and "
    "flash-style recomputation once: the forward is 2 GEMM-equivalents (q·kᵀ, P·v), the "
    "backward 5 (q·kᵀ recomputed, dv = Pᵀ·dout, dP = dout·vᵀ, dq = dS·k, dk = dSᵀ·q), "
    "the softmax's exponentials not counted. Head sizes 64 and 128 are priced at the "
    "tensor-core peak (kernels/flash_attention.cu), other head sizes at the fp32 peak (the "
    "SIMT kernels of kernels/attention.cu). The tensor-core backward does those 5 in one "
    "key-major pass; its fp32 running sums of dq, which the key blocks add to in turn, stay "
    "in L2 and are not counted. The SIMT backward does more: it recomputes q·kᵀ and dout·vᵀ "
    "three times, in a query-major pass that sums D = Σ P·dP, a second for dq and a "
    "key-major one for dk and dv, 9 GEMM-equivalents, and does not read `out`.\n";

}  // namespace

std::string format_kernel_costs(const std::vector<KernelCost>& rows, int64_t tokens_per_micro_batch,
                                int micro_batches, const std::vector<GpuPeaks>& gpus) {
  std::vector<Totals> totals;
  std::string out = phase_tables(rows, gpus, totals);
  out += step_bounds(rows, totals, tokens_per_micro_batch, micro_batches, gpus);
  out += peaks_note(gpus);
  out += kCountingNote;
  return out;
}

}  // namespace collage
