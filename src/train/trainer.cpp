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
#include "model/gpt.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/progress.h"
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
  spdlog::set_default_logger(logger);
}

std::string checkpoint_dir(const Config& config) {
  return config.checkpoint.dir.empty() ? (fs::path(config.logging.dir) / "checkpoints").string()
                                       : config.checkpoint.dir;
}

// Everything a run needs, built once from the config.
struct Run {
  const Config& config;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GPT> model;
  std::unique_ptr<Optimizer> optimizer;
  TrainingData data;
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // training samples read so far
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

std::vector<ParamSpan> parameter_spans(const GPT& model) {
  std::vector<ParamSpan> spans;
  for (const ParameterInfo& p : model.parameters()) {
    spans.push_back({p.offset, p.numel, p.weight_decay});
  }
  return spans;
}

Checkpoint make_checkpoint(Run& run) {
  Checkpoint ckpt;
  ckpt.step = run.step;
  ckpt.meta = {{"step", run.step},
               {"consumed_samples", run.consumed_samples},
               {"precision", precision_name(run.config.optimizer.precision)},
               {"num_parameters", run.model->num_parameters()},
               {"data_seed", run.config.data.seed},
               {"init_seed", run.config.training.seed},
               {"config", config_to_yaml(run.config)}};
  // Parameters by name, raw bf16 bits, so a resumed run continues bit for bit.
  for (const ParameterInfo& p : run.model->parameters()) {
    CheckpointTensor t{p.name, "bf16", p.shape, std::vector<uint8_t>(p.numel * sizeof(bf16))};
    run.backend->copy_to_host(t.bytes.data(), run.model->parameter_memory() + p.offset,
                              t.bytes.size());
    ckpt.tensors.push_back(std::move(t));
  }
  for (const StateComponent& c : run.optimizer->state()) {
    CheckpointTensor t{"optimizer." + c.name,
                       c.dtype,
                       {run.model->num_parameters()},
                       std::vector<uint8_t>(run.model->num_parameters() * c.element_bytes)};
    run.backend->copy_to_host(t.bytes.data(), c.data, t.bytes.size());
    ckpt.tensors.push_back(std::move(t));
  }
  return ckpt;
}

void restore_checkpoint(Run& run, const std::string& path) {
  Checkpoint ckpt = load_checkpoint(path);
  const std::string saved_precision = ckpt.meta.value("precision", "");
  COLLAGE_CHECK(saved_precision == precision_name(run.config.optimizer.precision),
                "{}: checkpoint was trained with optimizer.precision '{}' but the config says "
                "'{}'; switching strategy on resume is not supported",
                path, saved_precision, precision_name(run.config.optimizer.precision));
  for (const ParameterInfo& p : run.model->parameters()) {
    const CheckpointTensor& t = ckpt.tensor(p.name);
    COLLAGE_CHECK(t.shape == p.shape && t.dtype == "bf16",
                  "{}: parameter '{}' has shape {} ({}) in the checkpoint but {} (bf16) in the "
                  "model: the model config differs from the checkpoint's",
                  path, p.name, fmt::join(t.shape, "x"), t.dtype, fmt::join(p.shape, "x"));
    run.backend->copy_to_device(run.model->parameter_memory() + p.offset, t.bytes.data(),
                                t.bytes.size());
  }
  for (const StateComponent& c : run.optimizer->state()) {
    const CheckpointTensor& t = ckpt.tensor("optimizer." + c.name);
    COLLAGE_CHECK(t.bytes.size() == run.model->num_parameters() * c.element_bytes,
                  "{}: optimizer state '{}' has {} bytes, expected {}", path, c.name,
                  t.bytes.size(), run.model->num_parameters() * c.element_bytes);
    run.backend->copy_to_device(c.data, t.bytes.data(), t.bytes.size());
  }
  run.step = ckpt.meta.at("step").get<int64_t>();
  run.consumed_samples = ckpt.meta.at("consumed_samples").get<int64_t>();
  spdlog::info("resumed from {} at step {} ({} samples consumed)", path, run.step,
               run.consumed_samples);
}

std::string save(Run& run) {
  std::string path =
      save_checkpoint(checkpoint_dir(run.config), make_checkpoint(run), run.config.checkpoint.keep);
  spdlog::info("saved checkpoint {}", path);
  return path;
}

}  // namespace

TrainResult train(const Config& config, const TrainOptions& options) {
  setup_logging(config);
  spdlog::info("collage train: resolved config\n{}", config_to_yaml(config));
  { std::ofstream(fs::path(config.logging.dir) / "config.yaml") << config_to_yaml(config); }

  Run run(config);
  COLLAGE_CHECK(config.parallel.backend != "cuda",
                "parallel.backend: 'cuda' is not available in this build (use cpu)");
  run.backend = make_cpu_backend(config.parallel.threads);

  const TrainingConfig& tc = config.training;
  const int B = tc.micro_batch_size, T = config.data.seq_len;
  const int64_t eval_count = tc.eval_interval > 0 ? tc.max_steps / tc.eval_interval + 1 : 1;
  run.data = load_training_data(config, tc.max_steps * tc.global_batch_size,
                                std::max<int64_t>(1, int64_t(tc.eval_iters) * B * eval_count));
  spdlog::info("data: {}", run.data.summary);

  run.model = std::make_unique<GPT>(config.model, *run.backend, B, T);
  run.model->init_weights(tc.seed);
  run.optimizer = std::make_unique<Optimizer>(
      config.optimizer, *run.backend, parameter_spans(*run.model), run.model->parameter_memory(),
      run.model->gradient_memory(), run.model->num_parameters());
  const double n_params = double(run.model->num_parameters());
  spdlog::info(
      "model: {} parameters ({:.2f} M); memory: parameters {:.1f} MB, gradients {:.1f} "
      "MB, optimizer state {:.1f} MB ({}), activations {:.1f} MB",
      run.model->num_parameters(), n_params / 1e6, run.model->parameter_bytes() / 1e6,
      run.model->parameter_bytes() / 1e6, run.optimizer->state_bytes() / 1e6,
      precision_name(config.optimizer.precision), run.model->activation_bytes() / 1e6);

  if (!options.resume.empty()) {
    restore_checkpoint(run, resolve_resume(options.resume, checkpoint_dir(config)));
  }
  MetricsFile metrics((fs::path(config.logging.dir) / "metrics.jsonl").string(),
                      options.resume.empty() ? -1 : run.step);

  run.window.resize(T + 1);
  run.tokens.resize(int64_t(B) * T);
  run.targets.resize(int64_t(B) * T);
  const int micro_batches = run.micro_batches_per_step();
  const double tokens_per_step = double(tc.global_batch_size) * T;
  const float dloss = static_cast<float>(1.0 / tokens_per_step);  // mean over the global batch

  TrainResult result;
  ProgressBar progress(config.logging.progress, run.step + 1, tc.max_steps);
  spdlog::info("training steps {}..{}: {} micro-batches of {}x{} tokens per step", run.step + 1,
               tc.max_steps, micro_batches, B, T);
  if (run.step == 0 && tc.eval_interval > 0) {
    // The starting point of the validation curve (≈ ln(vocab) for a fresh model).
    result.last_val_loss = run.validation_loss();
    spdlog::info("step {:>6}/{} | val loss {:.4f}", 0, tc.max_steps, result.last_val_loss);
    metrics.write({{"step", 0}, {"val_loss", result.last_val_loss}});
  }
  while (run.step < tc.max_steps) {
    const int64_t t = run.step + 1;
    const auto start = Clock::now();
    run.model->zero_gradients();
    double loss_sum = 0;
    for (int micro = 0; micro < micro_batches; micro++) {
      run.load_batch(run.data.train, run.consumed_samples);
      run.consumed_samples += B;
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
    run.optimizer->step(t, lr);
    run.backend->synchronize();
    run.step = t;
    const double step_seconds = seconds_since(start);

    nlohmann::json record = {{"step", t},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"tokens_per_s", tokens_per_step / step_seconds},
                             {"ms_per_step", 1e3 * step_seconds},
                             {"consumed_samples", run.consumed_samples}};
    const bool evaluate = tc.eval_interval > 0 && (t % tc.eval_interval == 0 || t == tc.max_steps);
    if (evaluate) {
      record["val_loss"] = result.last_val_loss = run.validation_loss();
    }
    if (t % tc.log_interval == 0 || evaluate || t == tc.max_steps) {
      progress.clear();
      spdlog::info(
          "step {:>6}/{} | loss {:.4f}{} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | "
          "{:.0f} ms/step",
          t, tc.max_steps, loss,
          evaluate ? fmt::format(" | val loss {:.4f}", result.last_val_loss) : "", lr, grad_norm,
          tokens_per_step / step_seconds, 1e3 * step_seconds);
      metrics.write(record);
    }
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
  result.last_step = run.step;
  return result;
}

}  // namespace collage
