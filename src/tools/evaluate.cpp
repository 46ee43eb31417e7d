// `collage eval` (evaluate.h): training's validation on a checkpoint's weights.
#include "tools/evaluate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_info.h"
#include "checkpoint/training_checkpoint.h"
#include "config/architecture.h"
#include "core/error.h"
#include "core/logging.h"
#include "dist/backend_choice.h"
#include "dist/parallel_run.h"
#include "train/training_task.h"

namespace collage {
namespace {

// Keys of the config that change what validation computes when they differ from the
// checkpoint's: the model, and which validation samples form the batches.
bool changes_validation(const std::string& key) {
  static const std::vector<std::string> keys = {
      "data.datasets",          "data.split",
      "data.seq_len",           "data.seed",
      "data.hdf5_valid",        "data.max_predictions",
      "data.dynamic_masking",   "data.mask_token_id",
      "data.special_token_ids", "training.micro_batch_size"};
  if (key == "model.init_std" || key == "model.hidden_dropout" || key == "model.attention_dropout")
    return false;  // not used by validation
  return key.starts_with("model.") || std::find(keys.begin(), keys.end(), key) != keys.end();
}

// The validation micro-batches to run: --iters, else training.eval_iters; a masked LM needs its
// validation shards.
int validation_iters(const Config& config, const EvalOptions& options) {
  const int iters = options.iters > 0 ? options.iters : config.training.eval_iters;
  COLLAGE_CHECK(iters >= 1, "training.eval_iters: {}: nothing to evaluate (give --iters N)",
                config.training.eval_iters);
  COLLAGE_CHECK(architecture(config.model).objective != Objective::masked_lm ||
                    !config.data.hdf5_valid.empty(),
                "data.hdf5_valid: empty: collage eval needs the validation shards of the {} "
                "model (a shard file or directory)",
                config.model.arch);
  return iters;
}

// Evaluating under another model or other validation batches than the checkpoint's is allowed,
// with a warning listing the keys.
void warn_validation_changes(const std::string& path, const Config& saved, const Config& config) {
  std::string differences;
  for (const ConfigChange& c : config_changes(saved, config))
    if (changes_validation(c.key))
      differences +=
          fmt::format("\n  {}: {} (checkpoint) -> {} (config)", c.key, c.old_value, c.new_value);
  if (!differences.empty())
    spdlog::warn(
        "{}: the config differs from the checkpoint's in keys that change validation; "
        "evaluating with the config's:{}",
        path, differences);
}

// parallel.backend -> this rank's Backend, which its Comms then use.
std::unique_ptr<Backend> start_backend(const Config& config, ParallelRun& parallel) {
  const BackendChoice choice = choose_backend(config.parallel.backend);
  std::unique_ptr<Backend> backend = make_backend(choice.name, config.parallel.threads,
                                                  node_local_rank(), config.parallel.cpu_gemm);
  parallel.attach_backend(*backend);
  spdlog::info("backend: {} ({})", backend->name(), choice.reason);
  const RankLayout& layout = parallel.layout();
  if (parallel.multi_rank())
    spdlog::info("ranks: {} = tensor-parallel {} x data-parallel {}", layout.world_size, layout.tp,
                 layout.dp);
  return backend;
}

// " (saved at tensor-parallel 2 x data-parallel 2)", or "" for a single-process checkpoint.
std::string saved_layout_note(const CheckpointInfo& info) {
  const nlohmann::json saved_layout = info.meta.value("layout", nlohmann::json::object());
  if (saved_layout.value("tensor_parallel", 1) == 1 && saved_layout.value("data_parallel", 1) == 1)
    return "";
  return fmt::format(" (saved at tensor-parallel {} x data-parallel {})",
                     saved_layout.value("tensor_parallel", 1),
                     saved_layout.value("data_parallel", 1));
}

// The figures of the validation `val`: the record (JSON) and the line.
EvalResult eval_result(const Config& config, const CheckpointInfo& info, const std::string& path,
                       int iters, const TaskFigures& val, const Backend& backend,
                       const RankLayout& layout, double seconds) {
  const TrainingConfig& tc = config.training;
  EvalResult result;
  result.checkpoint = path;
  result.step = info.step;
  result.iters = iters;
  result.loss = val.loss;
  result.lead = layout.world_rank == 0;
  const bool encoder = architecture(config.model).objective == Objective::masked_lm;
  const double per_token = encoder ? val.metrics.at("val_mlm_loss").get<double>() : val.loss;
  result.perplexity = std::exp(per_token);
  const char* perplexity_key = encoder ? "val_mlm_perplexity" : "val_perplexity";
  result.record = {{"checkpoint", path},
                   {"step", info.step},
                   {"iters", iters},
                   {"micro_batch_size", tc.micro_batch_size},
                   {"seq_len", config.data.seq_len},
                   {"val_loss", val.loss}};
  result.record.update(val.metrics);
  result.record[perplexity_key] = result.perplexity;
  result.record["backend"] = backend.name();
  result.record["world_size"] = layout.world_size;
  result.record["seconds"] = seconds;
  result.text = fmt::format(
      "step {} | val loss {:.4f}{} | {}perplexity {:.2f} | {} micro-batches of "
      "{}x{} tokens | {}",
      info.step, val.loss, val.text, encoder ? "mlm " : "", result.perplexity, iters,
      tc.micro_batch_size, config.data.seq_len, path);
  return result;
}

EvalResult evaluate_ranks(const Config& config, const EvalOptions& options, ParallelRun& parallel) {
  using Clock = std::chrono::steady_clock;
  const TrainingConfig& tc = config.training;
  const int iters = validation_iters(config, options);
  COLLAGE_CHECK(!options.checkpoint.empty(), "--checkpoint: no checkpoint given");
  const std::string path = resolve_resume(options.checkpoint, checkpoint_dir(config));
  const CheckpointInfo info = read_checkpoint_info(path);
  warn_validation_changes(path, info.config, config);
  const std::unique_ptr<Backend> backend = start_backend(config, parallel);

  // The GPT's validation samples are built for training.eval_iters batches (at every
  // validation of the run): enough for --iters above it too.
  Config task_config = config;
  task_config.training.eval_iters = std::max(tc.eval_iters, iters);
  std::unique_ptr<TrainingTask> task = make_training_task(task_config, *backend, parallel);
  spdlog::info("data: {}", task->data_summary());
  load_checkpoint_weights(path, config, *backend, task->model());
  spdlog::info("weights: step {} from {}{}; evaluating {} validation micro-batches of {}x{}",
               info.step, path, saved_layout_note(info), iters, tc.micro_batch_size,
               config.data.seq_len);

  const auto start = Clock::now();
  const TaskFigures val = task->validate_batches(iters);
  backend->synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EvalResult result =
      eval_result(config, info, path, iters, val, *backend, parallel.layout(), seconds);
  spdlog::info("evaluated in {:.1f} s", seconds);
  return result;
}

}  // namespace

EvalResult evaluate(const Config& config, const EvalOptions& options) {
  ParallelRun parallel(config);  // MPI (under mpirun) lives as long as this
  log_to_stderr(config.logging.level, parallel.layout().world_rank);
  try {
    return evaluate_ranks(config, options, parallel);
  } catch (const std::exception& e) {
    // A rank that fails alone would leave the others blocked in a collective: end the job.
    if (parallel.multi_rank()) parallel.abort_job(e.what());
    throw;
  }
}

}  // namespace collage
