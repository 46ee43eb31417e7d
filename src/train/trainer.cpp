#include "train/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/mpi_comm.h"
#include "model/gpt.h"
#include "optim/edq.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/training_checkpoint.h"
#include "train/training_data.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Console and <logging.dir>/train.log, same lines.
void setup_logging(const Config& config) {
  fs::create_directories(config.logging.dir);
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(
      (fs::path(config.logging.dir) / "train.log").string(), /*truncate=*/false);
  auto logger = std::make_shared<spdlog::logger>("collage", spdlog::sinks_init_list{console, file});
  logger->set_pattern("[%H:%M:%S] %v");
  logger->set_level(spdlog::level::from_str(config.logging.level));
  logger->flush_on(spdlog::level::warn);  // warnings reach train.log even if the run dies
  spdlog::set_default_logger(logger);
}

std::string checkpoint_dir(const Config& config) {
  return config.checkpoint.dir.empty() ? (fs::path(config.logging.dir) / "checkpoints").string()
                                       : config.checkpoint.dir;
}

// Everything a run needs, built once from the config.
struct Run {
  const Config& config;
  std::unique_ptr<Comm> comm;  // one process for now; reduces the EDQ sums over ranks
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GPT> model;
  std::unique_ptr<Optimizer> optimizer;
  TrainingData data;
  TrainingProgress progress;  // step, consumed samples, cumulative EDQ
  std::vector<int32_t> window, tokens, targets;

  explicit Run(const Config& c) : config(c) {}

  int micro_batches_per_step() const {
    return config.training.global_batch_size / config.training.micro_batch_size;
  }

  // Fills tokens/targets (B, T) from samples [first, first + B) of a split.
  void load_batch(const SampleSet& split, int64_t first) {
    const int B = config.training.micro_batch_size, T = config.data.seq_len;
    for (int b = 0; b < B; b++) {
      split.get((first + b) % split.size, window.data());
      std::copy(window.begin(), window.begin() + T, tokens.begin() + int64_t(b) * T);
      std::copy(window.begin() + 1, window.end(), targets.begin() + int64_t(b) * T);
    }
  }

  double validation_loss() {
    const int B = config.training.micro_batch_size;
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < config.training.eval_iters; i++) {
      load_batch(data.valid, int64_t(i) * B);
      GPT::Loss loss = model->forward(tokens.data(), targets.data(), B);
      sum += loss.sum;
      count += loss.count;
    }
    return sum / std::max<int64_t>(count, 1);
  }
};

// One span per parameter tensor, tagged with its EDQ group when groups are logged.
std::unique_ptr<Optimizer> make_optimizer(const Config& config, Backend& backend, GPT& model) {
  std::vector<std::string> names;
  for (const ParameterInfo& p : model.parameters()) names.push_back(p.name);
  const EdqGroups groups = edq_groups_of(names);
  OptimizerOptions options;
  options.rounding_seed = stochastic_rounding_seed(config.training.seed);
  if (config.logging.edq_groups) options.edq_groups = groups.names;
  std::vector<ParamSpan> spans;
  for (size_t i = 0; i < model.parameters().size(); i++) {
    const ParameterInfo& p = model.parameters()[i];
    spans.push_back({p.offset, p.numel, p.weight_decay, groups.index[i]});
  }
  return std::make_unique<Optimizer>(config.optimizer, backend, std::move(spans),
                                     model.parameter_memory(), model.gradient_memory(),
                                     model.num_parameters(), std::move(options));
}

std::string save(Run& run) {
  std::string path = save_checkpoint(
      checkpoint_dir(run.config),
      make_training_checkpoint(run.config, *run.backend, *run.model, *run.optimizer, run.progress),
      run.config.checkpoint.keep);
  spdlog::info("saved checkpoint {}", path);
  return path;
}

// " | edq_ratio 0.998 lost 0.1%": the step's EDQ in the step line.
std::string edq_summary(const EdqFigures& f) {
  return fmt::format(" | edq_ratio {:.3f} lost {:.1f}%", f.edq_ratio, 100 * f.lost_frac);
}

}  // namespace

void check_trainable_layout(const Config& config) {
  // Tensor parallelism is planned for (parameter shards, `collage plan --tensor-parallel`) but
  // not trained yet: refuse rather than silently train at 1.
  COLLAGE_CHECK(config.parallel.tensor_parallel == 1,
                "parallel.tensor_parallel: {}: tensor-parallel training is not available yet; "
                "train with 1 (collage plan --tensor-parallel {} shows the memory it will need)",
                config.parallel.tensor_parallel, config.parallel.tensor_parallel);
  // Several ranks would each train the whole model on the same data into the same directory.
  const int ranks = launched_world_size();
  COLLAGE_CHECK(ranks == 1,
                "collage was started as {} ranks (mpirun -np {}): multi-rank (data- and "
                "tensor-parallel) training is not available yet; start one process",
                ranks, ranks);
}

TrainResult train(const Config& config, const TrainOptions& options) {
  setup_logging(config);
  spdlog::info("collage train: resolved config\n{}", config_to_yaml(config));
  { std::ofstream(fs::path(config.logging.dir) / "config.yaml") << config_to_yaml(config); }

  Run run(config);
  run.comm = make_single_comm();
  check_trainable_layout(config);
  const BackendChoice backend = choose_backend(config.parallel.backend);
  run.backend = make_backend(backend.name, config.parallel.threads);
  spdlog::info("backend: {} ({})", run.backend->name(), backend.reason);

  const TrainingConfig& tc = config.training;
  const int B = tc.micro_batch_size, T = config.data.seq_len;
  const int64_t eval_count = tc.eval_interval > 0 ? tc.max_steps / tc.eval_interval + 1 : 1;
  run.data = load_training_data(config, tc.max_steps * tc.global_batch_size,
                                std::max<int64_t>(1, int64_t(tc.eval_iters) * B * eval_count));
  spdlog::info("data: {}", run.data.summary);

  run.model = std::make_unique<GPT>(config.model, *run.backend, B, T);
  run.model->init_weights(tc.seed);
  run.optimizer = make_optimizer(config, *run.backend, *run.model);
  // What this rank allocated, read from the arenas themselves.
  const MemoryReport memory = measure_memory(*run.model, *run.optimizer);
  spdlog::info("{}", format_memory_report(memory, fmt::format("memory of rank {} of {}",
                                                              run.comm->rank(), run.comm->size())));

  if (!options.resume.empty()) {
    run.progress = restore_training_checkpoint(
        resolve_resume(options.resume, checkpoint_dir(config)), config, *run.backend, *run.model,
        *run.optimizer, options.convert_precision);
  }
  int64_t& step = run.progress.step;
  int64_t& consumed_samples = run.progress.consumed_samples;
  MetricsFile metrics((fs::path(config.logging.dir) / "metrics.jsonl").string(),
                      options.resume.empty() ? -1 : step);

  run.window.resize(T + 1);
  run.tokens.resize(int64_t(B) * T);
  run.targets.resize(int64_t(B) * T);
  const int micro_batches = run.micro_batches_per_step();
  const double tokens_per_step = double(tc.global_batch_size) * T;
  const float dloss = static_cast<float>(1.0 / tokens_per_step);  // mean over the global batch

  TrainResult result;
  ProgressBar progress(config.logging.progress, step + 1, tc.max_steps);
  spdlog::info("training steps {}..{}: {} micro-batches of {}x{} tokens per step", step + 1,
               tc.max_steps, micro_batches, B, T);
  if (step == 0) {
    // A fresh run's step-0 record: what the strategy costs, and the starting point of the
    // validation curve (≈ ln(vocab) for a fresh model).
    nlohmann::json record = {{"step", 0},
                             {"precision", precision_name(config.optimizer.precision)},
                             {"bytes_per_parameter", memory.bytes_per_parameter()}};
    if (tc.eval_interval > 0) {
      record["val_loss"] = result.last_val_loss = run.validation_loss();
      spdlog::info("step {:>6}/{} | val loss {:.4f}", 0, tc.max_steps, result.last_val_loss);
    }
    metrics.write(record);
  }
  while (step < tc.max_steps) {
    const int64_t t = step + 1;
    const auto start = Clock::now();
    run.model->zero_gradients();
    double loss_sum = 0;
    for (int micro = 0; micro < micro_batches; micro++) {
      run.load_batch(run.data.train, consumed_samples);
      consumed_samples += B;
      loss_sum += run.model->forward(run.tokens.data(), run.targets.data(), B).sum;
      run.model->backward(dloss);
    }
    const double loss = loss_sum / tokens_per_step;
    if (!std::isfinite(loss)) {
      progress.clear();
      fail(
          "step {}: the training loss is {}; stopping without writing a checkpoint (the last "
          "good one is in {})",
          t, loss, checkpoint_dir(config));
    }
    // Global-norm clipping of the averaged gradient.
    bf16* grads = run.model->gradient_memory();
    const double grad_norm =
        std::sqrt(run.backend->sum_squares(grads, run.model->num_parameters()));
    if (!std::isfinite(grad_norm)) {
      progress.clear();
      fail(
          "step {}: the gradient norm is {}; stopping without writing a checkpoint (the last good "
          "one is in {})",
          t, grad_norm, checkpoint_dir(config));
    }
    if (config.optimizer.grad_clip > 0 && grad_norm > config.optimizer.grad_clip) {
      run.backend->scale(grads, float(config.optimizer.grad_clip / grad_norm),
                         run.model->num_parameters());
    }
    const double lr = learning_rate(config.optimizer, t);
    const StepEdq edq = run.optimizer->step(t, lr, *run.comm);
    run.backend->synchronize();
    step = t;
    const double step_seconds = seconds_since(start);

    nlohmann::json record = {{"step", t},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"tokens_per_s", tokens_per_step / step_seconds},
                             {"ms_per_step", 1e3 * step_seconds},
                             {"consumed_samples", consumed_samples}};
    if (config.optimizer.edq) {
      run.progress.edq.add(edq.total);
      const EdqFigures figures = edq_figures(edq.total);
      record["edq"] = figures.edq;
      record["edq_ratio"] = figures.edq_ratio;
      record["lost_frac"] = figures.lost_frac;
      record["edq_ratio_cumulative"] = run.progress.edq.ratio();
      if (!edq.groups.empty()) {
        nlohmann::json groups = nlohmann::json::object();
        for (size_t k = 0; k < edq.groups.size(); k++)
          groups[run.optimizer->edq_groups()[k]] = edq_figures(edq.groups[k]).edq_ratio;
        record["edq_groups"] = groups;
      }
    }
    const bool evaluate = tc.eval_interval > 0 && (t % tc.eval_interval == 0 || t == tc.max_steps);
    if (evaluate) {
      record["val_loss"] = result.last_val_loss = run.validation_loss();
    }
    if (t % tc.log_interval == 0 || evaluate || t == tc.max_steps) {
      progress.clear();
      spdlog::info(
          "step {:>6}/{} | loss {:.4f}{} | lr {:.3e} | grad norm {:.3f}{} | {:.0f} tok/s | "
          "{:.0f} ms/step",
          t, tc.max_steps, loss,
          evaluate ? fmt::format(" | val loss {:.4f}", result.last_val_loss) : "", lr, grad_norm,
          config.optimizer.edq ? edq_summary(edq_figures(edq.total)) : "",
          tokens_per_step / step_seconds, 1e3 * step_seconds);
    }
    metrics.write(record);  // every step; the console only every log_interval steps
    progress.update(t, loss);
    result.last_loss = loss;
    const bool checkpoint_now =
        (config.checkpoint.interval > 0 && t % config.checkpoint.interval == 0) ||
        t == tc.max_steps;
    if (checkpoint_now) {
      progress.clear();
      result.last_checkpoint = save(run);
    }
  }
  progress.finish();
  spdlog::default_logger()->flush();  // train.log complete when train() returns
  result.last_step = step;
  return result;
}

}  // namespace collage
