#include "train/bench.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "dist/comm.h"
#include "model/gpt.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/kernel_costs.h"
#include "train/model_flops.h"
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

// Every matrix product of one micro-batch step (forward, input and weight gradients).
std::vector<Gemm> step_gemms(const ModelConfig& model, int B, int T) {
  const int64_t N = int64_t(B) * T, C = model.hidden_size, F = model.ffn();
  const int64_t Vp = model.padded_vocab(), NH = model.n_head, HS = model.head_size();
  std::vector<Gemm> gemms;
  auto linear = [&](int64_t in, int64_t out, int64_t times) {
    gemms.push_back({N, out, in, times});  // forward
    gemms.push_back({N, in, out, times});  // input gradient
    gemms.push_back({out, in, N, times});  // weight gradient
  };
  linear(C, 3 * C, model.n_layer);
  linear(C, C, model.n_layer);
  linear(C, F, model.n_layer);
  linear(F, C, model.n_layer);
  linear(C, Vp, 1);
  // attention per (b, head): scores, P·V forward; dP, dV, dQ, dK backward
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

}  // namespace

BenchResult run_bench(const Config& config, const BenchOptions& options) {
  const int B = config.training.micro_batch_size, T = config.data.seq_len;
  check_single_process(config, "bench");
  const BackendChoice choice = choose_backend(config.parallel.backend);
  auto backend = make_backend(choice.name, config.parallel.threads, 0, config.parallel.cpu_gemm);
  GPT model(config.model, *backend, B, T);
  model.init_weights(config.training.seed);
  std::vector<ParamSpan> spans;
  for (const ParameterInfo& p : model.parameters())
    spans.push_back({p.offset, p.numel, p.weight_decay});
  Optimizer optimizer(config.optimizer, *backend, spans, model.parameter_memory(),
                      model.gradient_memory(), model.num_parameters(),
                      {stochastic_rounding_seed(config.training.seed), {}});
  auto comm = make_single_comm();

  std::mt19937 gen(1234);
  std::uniform_int_distribution<int32_t> token(0, config.model.vocab_size - 1);
  std::vector<int32_t> tokens(int64_t(B) * T), targets(int64_t(B) * T);
  for (auto& x : tokens) x = token(gen);
  for (auto& x : targets) x = token(gen);

  BenchResult r;
  r.micro_batch = B;
  r.seq_len = T;
  r.backend = choice.name;
  r.backend_reason = choice.reason;
  r.gemm_engine = backend->gemm_engine();
  Backend::Counters before;
  for (int s = 0; s < options.warmup_steps + options.steps; s++) {
    const bool timed = s >= options.warmup_steps;
    if (s == options.warmup_steps) before = backend->counters();
    model.zero_gradients();
    auto start = Clock::now();
    model.forward(tokens.data(), targets.data(), B);
    backend->synchronize();
    const double fwd = ms_since(start);
    start = Clock::now();
    model.backward(1.0f / (B * T));
    backend->synchronize();
    const double bwd = ms_since(start);
    start = Clock::now();
    optimizer.step(s + 1, learning_rate(config.optimizer, s + 1), *comm);  // EDQ as configured
    backend->synchronize();
    const double opt = ms_since(start);
    if (timed) {
      r.forward_ms += fwd / options.steps;
      r.backward_ms += bwd / options.steps;
      r.optimizer_ms += opt / options.steps;
    }
  }
  const Backend::Counters after = backend->counters();
  r.launches_per_step = double(after.launches - before.launches) / options.steps;
  r.synchronizations_per_step =
      double(after.synchronizations - before.synchronizations) / options.steps;
  r.step_ms = r.forward_ms + r.backward_ms + r.optimizer_ms;
  r.optimizer_gb =
      optimizer_bytes_per_parameter(config.optimizer.precision) * model.num_parameters() / 1e9;
  r.tokens_per_s = B * T / (r.step_ms / 1e3);
  r.model_gflop = model_flops(config).per_sequence() * B / 1e9;
  r.achieved_gflops = r.model_gflop / (r.step_ms / 1e3);
  const DevicePeak peak = backend_peak(choice.name, config.parallel.threads, 0);
  r.peak_gflops = peak.flops / 1e9;
  r.peak_source = peak.source;
  if (choice.name == "cpu") {
    const int threads =
        config.parallel.threads > 0 ? config.parallel.threads : omp_get_max_threads();
    const std::vector<Gemm> gemms = step_gemms(config.model, B, T);
    double gemm_flops = 0;
    for (const Gemm& g : gemms) gemm_flops += g.flops();
    r.sgemm_ms = time_sgemm(gemms, std::max(2, options.steps), threads);
    r.sgemm_gflops = gemm_flops / 1e9 / (r.sgemm_ms / 1e3);
  }
  return r;
}

std::string format_bench(const Config& config, const std::vector<BenchResult>& results) {
  const ModelConfig& m = config.model;
  const BenchResult& first = results.front();
  std::string out = fmt::format(
      "GPT L={} C={} heads={} vocab={} (padded {}), {} threads, optimizer {}, backend {} "
      "({})\n{}\n",
      m.n_layer, m.hidden_size, m.n_head, m.vocab_size, m.padded_vocab(),
      config.parallel.threads > 0 ? fmt::format("{}", config.parallel.threads) : "all",
      precision_name(config.optimizer.precision), first.backend, first.backend_reason,
      first.gemm_engine.empty() ? "" : "GEMMs: " + first.gemm_engine + "\n");
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
  row("forward ms", "{:.1f}", &R::forward_ms);
  row("backward ms", "{:.1f}", &R::backward_ms);
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

}  // namespace collage
