#include "tools/bench.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "dist/backend_choice.h"
#include "dist/comm.h"
#include "model/model_family.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plan/kernel_costs.h"
#include "plan/model_flops.h"
#include "train/trainer.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One GEMM of a training step: out (M, N) = a (M, K) · b (K, N), `count` times.
struct Gemm {
  int64_t m, n, k, count;
  double flops() const { return 2.0 * m * n * k * count; }
};

// Every matrix product of one micro-batch step (forward, input and weight gradients): the
// model family's linear layers (GPT's over all B·T rows; the encoders' MLM head over the B·P
// labelled rows and BERT's pooler and NSP classifier over one row a sequence), and attention.
std::vector<Gemm> step_gemms(const Config& config, int B, int T) {
  const ModelConfig& model = config.model;
  ModelShape shape = model_shape(config);
  shape.micro_batch = B;
  shape.seq_len = T;
  std::vector<Gemm> gemms;
  for (const LinearShape& l : model_family(model).linears(model, shape)) {
    gemms.push_back({l.rows, l.out, l.in, l.times});  // forward
    gemms.push_back({l.rows, l.in, l.out, l.times});  // input gradient
    gemms.push_back({l.out, l.in, l.rows, l.times});  // weight gradient
  }
  // attention per (b, head): scores, P·V forward; dP, dV, dQ, dK backward
  const int64_t NH = model.n_head, HS = model.head_size();
  gemms.push_back({T, T, HS, B * NH * model.n_layer * 6});
  return gemms;
}

// The GEMMs as plain fp32 OpenBLAS sgemm using `threads` threads (OpenBLAS's own
// threading), best of `repeats`. The cpu backend runs OpenBLAS single-threaded inside its
// own OpenMP tiling, so the thread count is set here and restored after.
double time_sgemm(const std::vector<Gemm>& gemms, int repeats, int threads) {
  int64_t max_elems = 0;
  for (const Gemm& g : gemms) max_elems = std::max({max_elems, g.m * g.k, g.k * g.n, g.m * g.n});
  std::vector<float> a(max_elems, 0.5f), b(max_elems, 0.25f), c(max_elems, 0.0f);
  const int previous_threads = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    auto start = Clock::now();
    for (const Gemm& g : gemms) {
      for (int64_t i = 0; i < g.count; i++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.m, g.n, g.k, 1.0f, a.data(), g.k,
                    b.data(), g.n, 0.0f, c.data(), g.n);
      }
    }
    best = std::min(best, ms_since(start));
  }
  openblas_set_num_threads(previous_threads);
  return best;
}

// One micro-batch step of the benchmarked model on synthetic data: its forward and backward.
class BenchStep {
 public:
  virtual ~BenchStep() = default;
  virtual TrainableModel& model() = 0;
  virtual void forward() = 0;
  virtual void backward() = 0;
};

// A causal LM (GPT): random tokens and targets.
class NextTokenStep final : public BenchStep {
 public:
  NextTokenStep(const Config& config, Backend& backend)
      : B_(config.training.micro_batch_size),
        T_(config.data.seq_len),
        model_(make_causal_lm(config.model, backend, model_shape(config))),
        tokens_(size_t(B_) * T_),
        targets_(size_t(B_) * T_) {
    std::mt19937 gen(1234);
    std::uniform_int_distribution<int32_t> token(0, config.model.vocab_size - 1);
    for (auto& x : tokens_) x = token(gen);
    for (auto& x : targets_) x = token(gen);
  }
  TrainableModel& model() override { return *model_; }
  void forward() override {
    model_->forward(Batch{.input_ids = tokens_.data(), .targets = targets_.data()}, B_);
  }
  void backward() override { model_->backward(1.0f / float(B_ * T_)); }

 private:
  int B_, T_;
  std::unique_ptr<CausalLanguageModel> model_;
  std::vector<int32_t> tokens_, targets_;  // (B, T)
};

// A masked LM (BERT, RoBERTa): a batch of full-length rows (no padding), each with
// data.max_predictions labelled positions spread over it (with a next-sentence head: two
// segments and a random next-sentence label), dropout on as in training.
class MaskedLmStep final : public BenchStep {
 public:
  MaskedLmStep(const Config& config, Backend& backend)
      : B_(config.training.micro_batch_size),
        T_(config.data.seq_len),
        P_(config.data.max_predictions),
        next_sentence_(architecture(config.model).next_sentence),
        model_(make_masked_lm(config.model, backend, model_shape(config))),
        ids_(size_t(B_) * T_),
        mask_(size_t(B_) * T_, 1),
        segments_(size_t(B_) * T_, 0),
        positions_(size_t(B_) * P_, 0),
        labels_(size_t(B_) * P_, 0),
        nsp_(size_t(B_)) {
    std::mt19937 gen(1234);
    std::uniform_int_distribution<int32_t> token(1, config.model.vocab_size - 1);
    for (auto& x : ids_) x = token(gen);
    // Positions 1, 1 + s, 1 + 2s, ... (position 0 is [CLS]; zeros end a row's labels).
    const int labelled = std::min(P_, T_ - 1), stride = std::max(1, (T_ - 1) / std::max(P_, 1));
    for (int b = 0; b < B_; b++) {
      for (int k = 0; k < labelled; k++) {
        positions_[size_t(b) * P_ + k] = 1 + k * stride;
        labels_[size_t(b) * P_ + k] = token(gen);
      }
      if (next_sentence_) {
        for (int t = T_ / 2; t < T_; t++) segments_[size_t(b) * T_ + t] = 1;
        nsp_[b] = int32_t(gen() & 1);
      }
    }
  }
  TrainableModel& model() override { return *model_; }
  void forward() override {
    const Batch in{.input_ids = ids_.data(),
                   .input_mask = mask_.data(),
                   .segment_ids = segments_.data(),
                   .masked_lm_positions = positions_.data(),
                   .masked_lm_ids = labels_.data(),
                   .next_sentence_labels = next_sentence_ ? nsp_.data() : nullptr,
                   .targets = nullptr};  // the labels are the masked positions
    loss_ = model_->forward(in, B_, /*dropout=*/true, /*dropout_seed=*/1234, index_++);
  }
  void backward() override {
    model_->backward(loss_.mlm_count ? 1.0f / float(loss_.mlm_count) : 0.0f,
                     loss_.nsp_count ? 1.0f / float(loss_.nsp_count) : 0.0f);
  }

 private:
  int B_, T_, P_;
  bool next_sentence_;
  std::unique_ptr<MaskedLanguageModel> model_;
  std::vector<int32_t> ids_, mask_, segments_;  // (B, T)
  std::vector<int32_t> positions_, labels_;     // (B, P)
  std::vector<int32_t> nsp_;                    // (B)
  MaskedLanguageModel::Loss loss_;
  uint64_t index_ = 0;  // the dropout stream's sample index
};

// warmup_steps untimed steps, then `steps` timed ones: the mean time of each part of the
// trainer's step (src/train/trainer.cpp, train_step; one micro-batch, one rank): zeroing the
// gradients, forward, backward, the gradient norm with clipping's factor, and the optimizer;
// per step the launches, host waits and (with --profile) op families.
void time_steps(BenchStep& step, Optimizer& optimizer, Backend& backend, const Config& config,
                const BenchOptions& options, BenchResult& r) {
  auto comm = make_single_comm();
  TrainableModel& model = step.model();
  Backend::Counters before;
  for (int s = 0; s < options.warmup_steps + options.steps; s++) {
    const bool timed = s >= options.warmup_steps;
    if (s == options.warmup_steps) {
      before = backend.counters();
      if (options.profile) backend.start_profile();  // nothing recorded before or without
    }
    // Each part's time, synchronized after it (a queuing backend's work included).
    auto timed_part = [&](double BenchResult::*total, const auto& part) {
      const auto start = Clock::now();
      part();
      backend.synchronize();
      if (timed) r.*total += ms_since(start) / options.steps;
    };
    float grad_scale = 1;
    timed_part(&BenchResult::zero_ms, [&] { model.zero_gradients(); });
    timed_part(&BenchResult::forward_ms, [&] { step.forward(); });
    timed_part(&BenchResult::backward_ms, [&] { step.backward(); });
    timed_part(&BenchResult::norm_ms, [&] {
      const double norm =
          std::sqrt(backend.sum_squares(model.gradient_memory(), model.num_parameters()));
      grad_scale = clipping_factor(config.optimizer, norm);
    });
    timed_part(&BenchResult::optimizer_ms, [&] {  // EDQ as configured
      optimizer.step(s + 1, learning_rate(config.optimizer, s + 1), *comm, grad_scale);
    });
  }
  const Backend::Counters after = backend.counters();
  for (OpFamilyTime family : backend.stop_profile()) {
    family.ms /= options.steps;
    family.launches /= options.steps;
    r.profile.push_back(family);
  }
  r.launches_per_step = double(after.launches - before.launches) / options.steps;
  r.synchronizations_per_step =
      double(after.synchronizations - before.synchronizations) / options.steps;
}

// What the step time means: tokens/s, the optimizer's bandwidth, model FLOP/s against the
// device's peak (model_flops.h).
void add_rates(const Config& config, int64_t num_parameters, BenchResult& r) {
  const int B = r.micro_batch, T = r.seq_len;
  r.step_ms = r.zero_ms + r.forward_ms + r.backward_ms + r.norm_ms + r.optimizer_ms;
  r.optimizer_gb = optimizer_bytes_per_parameter(config.optimizer.precision) * num_parameters / 1e9;
  r.tokens_per_s = B * T / (r.step_ms / 1e3);
  r.model_gflop = model_flops(config).per_sequence() * B / 1e9;
  r.achieved_gflops = r.model_gflop / (r.step_ms / 1e3);
  DevicePeak peak = backend_peak(r.backend, config.parallel, 0);
  // Outrun: measured once more, the higher rate kept (docs/ARCHITECTURE.md, "Model FLOPs and MFU").
  const auto again =
      remeasure_if_outrun(peak, r.achieved_gflops * 1e9, r.backend, config.parallel, 0);
  if (again && again->flops > peak.flops) peak = *again;
  r.peak_gflops = peak.flops / 1e9;
  r.peak_source = peak.source;
}

// The cpu backend's yardstick: the step's GEMMs as fp32 sgemm.
void add_sgemm_baseline(const Config& config, const BenchOptions& options, BenchResult& r) {
  const int threads = config.parallel.threads > 0 ? config.parallel.threads : omp_get_max_threads();
  const std::vector<Gemm> gemms = step_gemms(config, r.micro_batch, r.seq_len);
  double gemm_flops = 0;
  for (const Gemm& g : gemms) gemm_flops += g.flops();
  r.sgemm_ms = time_sgemm(gemms, std::max(2, options.steps), threads);
  r.sgemm_gflops = gemm_flops / 1e9 / (r.sgemm_ms / 1e3);
}

}  // namespace

BenchResult run_bench(const Config& config, const BenchOptions& options) {
  check_single_process(config, "bench");
  const BackendChoice choice = choose_backend(config.parallel.backend);
  auto backend = make_backend(choice.name, config.parallel.threads, 0, config.parallel.cpu_gemm);
  std::unique_ptr<BenchStep> step;
  if (architecture(config.model).objective == Objective::next_token) {
    step = std::make_unique<NextTokenStep>(config, *backend);
  } else {
    step = std::make_unique<MaskedLmStep>(config, *backend);
  }
  TrainableModel& model = step->model();
  model.init_weights(config.training.seed);
  std::vector<ParamSpan> spans;
  for (const ParameterInfo& p : model.parameters())
    spans.push_back({p.offset, p.numel, p.weight_decay});
  Optimizer optimizer(config.optimizer, *backend, spans, model.parameter_memory(),
                      model.gradient_memory(), model.num_parameters(),
                      {stochastic_rounding_seed(config.training.seed), {}});

  BenchResult r;
  r.micro_batch = config.training.micro_batch_size;
  r.seq_len = config.data.seq_len;
  r.backend = choice.name;
  r.backend_reason = choice.reason;
  r.gemm_engine = backend->gemm_engine();
  time_steps(*step, optimizer, *backend, config, options, r);
  r.optimizer_engine = backend->optimizer_engine();  // after the steps: what they ran into
  r.kernel_engine = backend->kernel_engine();
  add_rates(config, model.num_parameters(), r);
  if (choice.name == "cpu") add_sgemm_baseline(config, options, r);
  return r;
}

std::string format_bench(const Config& config, const std::vector<BenchResult>& results) {
  const ModelConfig& m = config.model;
  const BenchResult& first = results.front();
  const Architecture& arch = architecture(m);
  const std::string model =
      arch.heads.empty() ? std::string(arch.title) : fmt::format("{} ({}", arch.title, arch.heads);
  const std::string labelled =
      arch.objective == Objective::next_token
          ? ""
          : fmt::format(", {} labelled positions a sequence)", config.data.max_predictions);
  std::string out = fmt::format(
      "{}{} L={} C={} heads={} vocab={} (padded {}), {} threads, optimizer {}, backend {} "
      "({})\n{}{}{}\n",
      model, labelled, m.n_layer, m.hidden_size, m.n_head, m.vocab_size, m.padded_vocab(),
      config.parallel.threads > 0 ? fmt::format("{}", config.parallel.threads) : "all",
      precision_name(config.optimizer.precision), first.backend, first.backend_reason,
      first.gemm_engine.empty() ? "" : "GEMMs: " + first.gemm_engine + "\n",
      first.optimizer_engine.empty() ? "" : "Optimizer loop: " + first.optimizer_engine + "\n",
      first.kernel_engine.empty()
          ? ""
          : "Elementwise, LayerNorm and cross-entropy kernels: " + first.kernel_engine + "\n");
  // One column per shape: micro-batch x sequence length.
  out += fmt::format("| {:<28} |", "measure");
  for (const BenchResult& r : results)
    out += fmt::format(" {:>12} |", fmt::format("{} x {}", r.micro_batch, r.seq_len));
  out += fmt::format("\n|{:-<30}|", "");
  for (size_t i = 0; i < results.size(); i++) out += fmt::format("{:-<14}|", "");
  out += "\n";
  // A row: `value` (a member or a function of a result) in `format`, one column per shape.
  auto row = [&](const std::string& name, const char* format, auto value) {
    out += fmt::format("| {:<28} |", name);
    for (const BenchResult& r : results)
      out += fmt::format(" {:>12} |", fmt::format(fmt::runtime(format), std::invoke(value, r)));
    out += "\n";
  };
  using R = BenchResult;
  row("zero gradients ms", "{:.1f}", &R::zero_ms);
  row("forward ms", "{:.1f}", &R::forward_ms);
  row("backward ms", "{:.1f}", &R::backward_ms);
  row("gradient norm ms", "{:.1f}", &R::norm_ms);
  row("optimizer ms", "{:.1f}", &R::optimizer_ms);
  row("optimizer GB moved", "{:.2f}", &R::optimizer_gb);
  row("optimizer GB/s", "{:.1f}",
      [](const R& r) { return r.optimizer_gb / (r.optimizer_ms / 1e3); });
  row("step ms", "{:.1f}", &R::step_ms);
  row("tokens/s", "{:.0f}", &R::tokens_per_s);
  row("model GFLOP per step", "{:.2f}", &R::model_gflop);
  row("achieved GFLOP/s", "{:.1f}", &R::achieved_gflops);
  if (first.peak_gflops > 0) {
    row("peak GFLOP/s", "{:.1f}", &R::peak_gflops);
    row("MFU", "{:.1f}%", [](const R& r) { return 100 * r.achieved_gflops / r.peak_gflops; });
  }
  if (first.sgemm_ms > 0) {
    row("same GEMMs as fp32 sgemm ms", "{:.1f}", &R::sgemm_ms);
    row("sgemm GFLOP/s on them", "{:.1f}", &R::sgemm_gflops);
    row("step / sgemm time", "{:.2f}x", [](const R& r) { return r.step_ms / r.sgemm_ms; });
  }
  if (first.backend != "cpu") {
    row("kernel launches per step", "{:.0f}", &R::launches_per_step);
    row("host waits per step", "{:.0f}", &R::synchronizations_per_step);
  }
  out +=
      "\nModel FLOPs: 6N + 12LTC per token (docs/ARCHITECTURE.md, \"Model FLOPs and MFU\"), "
      "as the trainer's MFU.\nPeak: ";
  for (size_t i = 0; i < results.size(); i++) {
    const BenchResult& r = results[i];
    out += results.size() == 1 ? r.peak_source
                               : fmt::format("{}{} x {}: {}", i ? "; " : "", r.micro_batch,
                                             r.seq_len, r.peak_source);
  }
  out += ".\n";
  return out;
}

std::string format_profile(const BenchResult& r) {
  if (r.profile.empty()) return "";
  double total_ms = 0;
  int64_t total_launches = 0;
  for (const OpFamilyTime& f : r.profile) total_ms += f.ms, total_launches += f.launches;
  const char* what = "Emulator time";
  const char* how = "host time of each launch in the emulator, not a GPU's";
  const char* counted = "launches";
  if (r.backend == "cuda") {
    what = "GPU time";
    how = "CUDA events around every launch";
  }
  if (r.backend == "cpu") {
    what = "CPU time";
    how = "wall time of every op, which runs to completion in its call";
    counted = "ops";
  }
  std::string out = fmt::format("\n{} by op family, {} x {}, per step ({}):\n", what, r.micro_batch,
                                r.seq_len, how);
  out += fmt::format("| {:<28} | {:>12} | {:>12} | {:>12} |\n", "op family", "ms", "% of time",
                     counted);
  out += fmt::format("|{:-<30}|{:-<14}|{:-<14}|{:-<14}|\n", "", "", "", "");
  for (const OpFamilyTime& f : r.profile) {
    out += fmt::format("| {:<28} | {:>12.3f} | {:>11.1f}% | {:>12} |\n", f.family, f.ms,
                       total_ms > 0 ? 100 * f.ms / total_ms : 0.0, f.launches);
  }
  out += fmt::format("| {:<28} | {:>12.3f} | {:>11.1f}% | {:>12} |\n", "total", total_ms, 100.0,
                     total_launches);
  return out;
}

}  // namespace collage
