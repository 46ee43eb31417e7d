#include "train/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/training_checkpoint.h"
#include "core/error.h"
#include "dist/backend_choice.h"
#include "dist/comm.h"
#include "dist/launcher_watch.h"
#include "dist/mpi_comm.h"
#include "dist/parallel_run.h"
#include "optim/edq.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plan/memory_plan.h"
#include "plan/model_flops.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/run_directory.h"
#include "train/stop_signal.h"
#include "train/training_task.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Creates `dir` if needed and checks that a file can be written in it, before any work is
// spent: an unwritable logging.dir or checkpoint.dir is an error naming the key, not a
// filesystem exception after the first training steps.
void ensure_writable_directory(const std::string& dir, const char* key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  COLLAGE_CHECK(!ec, "{}: cannot create the directory '{}': {}", key, dir, ec.message());
  const fs::path probe = fs::path(dir) / fmt::format(".collage_write_test_{}", ::getpid());
  std::FILE* file = std::fopen(probe.c_str(), "w");
  COLLAGE_CHECK(file != nullptr, "{}: cannot write in '{}': {}", key, dir, std::strerror(errno));
  std::fclose(file);
  fs::remove(probe, ec);
}

// The console sink, silenced to log a fatal error to the files only (the CLI prints it on
// stderr itself).
std::shared_ptr<spdlog::sinks::sink> g_console_sink;

// Rank 0: console and <logging.dir>/train.log (the directory exists), same lines. Other ranks:
// errors on the console, and everything in <logging.dir>/rank_<r>.log with logging.all_ranks.
void setup_logging(const Config& config, const RankLayout& layout) {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  const bool lead = layout.world_rank == 0;
  if (!lead) console->set_level(spdlog::level::err);
  sinks.push_back(console);
  if (lead || config.logging.all_ranks) {
    const std::string name = lead ? "train.log" : fmt::format("rank_{}.log", layout.world_rank);
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(
        (fs::path(config.logging.dir) / name).string(), /*truncate=*/false));
  }
  auto logger = std::make_shared<spdlog::logger>("collage", sinks.begin(), sinks.end());
  const std::string rank =
      layout.world_size > 1 && !lead ? fmt::format("[rank {}] ", layout.world_rank) : std::string();
  // The console: time and message. The log files: date, time with ms and level on every line.
  console->set_pattern("[%H:%M:%S] " + rank + "%v");
  for (size_t i = 1; i < sinks.size(); i++)
    sinks[i]->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] " + rank + "%v");
  logger->set_level(spdlog::level::from_str(config.logging.level));
  logger->flush_on(spdlog::level::trace);  // every line reaches the file whole, at once
  g_console_sink = console;
  spdlog::set_default_logger(logger);
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a stop signal";
  }
}

// For a run that stops on an error: where to resume from.
std::string last_good_checkpoint(const Config& config) {
  const std::map<int64_t, std::string> found = list_checkpoints(checkpoint_dir(config));
  return found.empty() ? fmt::format("no checkpoint was written to {} yet", checkpoint_dir(config))
                       : fmt::format("the last good one is {}", found.rbegin()->second);
}

// Everything a run needs, built once from the config.
struct Run {
  const Config& config;
  ParallelRun& parallel;
  const RankLayout& layout;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TrainingTask> task;  // the data, the model, its loss (training_task.h)
  std::unique_ptr<Optimizer> optimizer;
  TrainingProgress progress;  // step, consumed samples, cumulative EDQ

  Run(const Config& c, ParallelRun& p) : config(c), parallel(p), layout(p.layout()) {}

  TrainableModel& model() { return task->model(); }

  // This rank's part of the parameter memory the optimizer updates: the ZeRO-1 shard, else all.
  ParameterRegion update_region() const {
    if (!layout.zero) return {0, task->model().num_parameters()};
    return zero_shard(task->model().memory_elements(), layout.dp, layout.dp_rank);
  }

  // Σ g² over every parameter of the model once: this rank's update region, the replicated
  // tensors counted by TP rank 0 only, reduced over the TP group (over every rank when the
  // gradients are sharded over DP too: one collective either way).
  double gradient_norm() {
    const ParameterRegion region = update_region();
    const ParameterRegion replicated = model().replicated_region();
    const int64_t sharded_end = replicated.size() > 0 ? replicated.begin : region.end;
    const bf16* grads = model().gradient_memory();
    auto sum_squares = [&](int64_t begin, int64_t end) {
      begin = std::max(begin, region.begin), end = std::min(end, region.end);
      return begin < end ? backend->sum_squares(grads + begin, end - begin) : 0.0;
    };
    double sum = sum_squares(0, sharded_end);
    if (layout.tp_rank == 0 && replicated.size() > 0)
      sum += sum_squares(replicated.begin, replicated.end);
    (layout.zero ? parallel.host_world() : parallel.host_tp()).all_reduce_sum(&sum, 1);
    return std::sqrt(sum);
  }

  // After the micro-batches: make every rank's gradients the global batch's. The replicated
  // tensors' gradients are averaged over TP; then the sum over the data-parallel replicas
  // (dloss already divides by the global batch's tokens): all-reduced, or reduce-scattered
  // onto each rank's ZeRO-1 shard in place.
  void reduce_gradients() {
    model().all_reduce_replicated_gradients();
    if (layout.dp == 1) return;
    bf16* grads = model().gradient_memory();
    if (layout.zero) {
      const ParameterRegion shard = update_region();
      parallel.dp().reduce_scatter_sum(grads, grads + shard.begin, shard.size());
    } else {
      parallel.dp().all_reduce_sum(grads, model().num_parameters());
    }
  }

  // ZeRO-1: every rank updated its shard; gather the others' (in place).
  void gather_parameters() {
    if (!layout.zero || layout.dp == 1) return;
    const ParameterRegion shard = update_region();
    bf16* params = model().parameter_memory();
    parallel.dp().all_gather(params + shard.begin, params, shard.size() * int64_t(sizeof(bf16)));
  }
};

// One span per parameter tensor, tagged with its EDQ group when groups are logged; the
// replicated tensors' EDQ is counted on TP rank 0 only, and with ZeRO-1 the optimizer keeps
// the state of this rank's shard only.
std::unique_ptr<Optimizer> make_optimizer(const Config& config, Backend& backend,
                                          TrainableModel& model, const RankLayout& layout) {
  std::vector<std::string> names;
  for (const ParameterInfo& p : model.parameters()) names.push_back(p.name);
  const EdqGroups groups = edq_groups_of(names);
  OptimizerOptions options;
  options.rounding_seed = stochastic_rounding_seed(config.training.seed);
  if (config.logging.edq_groups) options.edq_groups = groups.names;
  if (layout.zero) {
    const ParameterRegion shard = zero_shard(model.memory_elements(), layout.dp, layout.dp_rank);
    options.shard_begin = shard.begin;
    options.shard_end = shard.end;
  }
  std::vector<ParamSpan> spans;
  for (size_t i = 0; i < model.parameters().size(); i++) {
    const ParameterInfo& p = model.parameters()[i];
    const bool counted = p.split != TensorSplit::replicated || layout.tp_rank == 0;
    spans.push_back({p.offset, p.numel, p.weight_decay, groups.index[i], counted});
  }
  return std::make_unique<Optimizer>(config.optimizer, backend, std::move(spans),
                                     model.parameter_memory(), model.gradient_memory(),
                                     model.num_parameters(), std::move(options));
}

std::string save(Run& run) {
  Checkpoint part = make_training_checkpoint(run.config, *run.backend, run.model(), *run.optimizer,
                                             run.progress, run.layout);
  const std::string path =
      run.parallel.multi_rank()
          ? save_checkpoint_set(checkpoint_dir(run.config), part, run.layout,
                                run.parallel.host_world(), run.config.checkpoint.keep)
          : save_checkpoint(checkpoint_dir(run.config), part, run.config.checkpoint.keep);
  spdlog::info("saved checkpoint {}", path);
  return path;
}

// " | edq_ratio 0.998 lost 0.1%": the step's EDQ in the step line.
std::string edq_summary(const EdqFigures& f) {
  return fmt::format(" | edq_ratio {:.3f} lost {:.1f}%", f.edq_ratio, 100 * f.lost_frac);
}

}  // namespace

void check_single_process(const Config& config, const char* command) {
  const int ranks = launched_world_size();
  COLLAGE_CHECK(ranks == 1 && config.parallel.tensor_parallel == 1,
                "collage {} measures one process: it was started as {} rank(s) with "
                "parallel.tensor_parallel {}; run it without mpirun and with tensor_parallel 1 "
                "(collage plan shows a layout's memory and communication)",
                command, ranks, config.parallel.tensor_parallel);
}

namespace {

// " | comm TP 12.6 MB DP 248.4 MB": payload bytes this rank handed to each group's
// collectives during the step.
std::string comm_summary(const RankLayout& layout, int64_t tp_bytes, int64_t dp_bytes) {
  if (layout.world_size == 1) return "";
  return fmt::format(" | comm TP {} DP {}", format_bytes(double(tp_bytes)),
                     format_bytes(double(dp_bytes)));
}

TrainResult train_ranks(const Config& config, const TrainOptions& options, ParallelRun& parallel) {
  const RankLayout& layout = parallel.layout();
  const bool lead = layout.world_rank == 0;  // logs, metrics, config.yaml
  if (lead) {
    spdlog::info("collage train: resolved config\n{}", config_to_yaml(config));
    std::ofstream(fs::path(config.logging.dir) / "config.yaml") << config_to_yaml(config);
  }
  Run run(config, parallel);
  ensure_writable_directory(checkpoint_dir(config), config.checkpoint.dir.empty()
                                                        ? "checkpoint.dir (default: "
                                                          "<logging.dir>/checkpoints)"
                                                        : "checkpoint.dir");
  if (parallel.multi_rank()) {
    spdlog::info(
        "ranks: {} = tensor-parallel {} x data-parallel {}{} (this is world rank {}: TP "
        "rank {}, DP rank {})",
        layout.world_size, layout.tp, layout.dp, layout.zero ? ", ZeRO-1" : "", layout.world_rank,
        layout.tp_rank, layout.dp_rank);
  }
  // The run directory and the checkpoint to continue are settled before any data is loaded
  // or prepared (which may take long): a refused resume or fresh run costs nothing.
  COLLAGE_CHECK(options.init_from.empty() || options.resume.empty(),
                "--init-from {} and --resume {}: a run either continues a checkpoint or starts "
                "from its weights, not both",
                options.init_from, options.resume);
  // --resume auto (a requeued job): continue when there is a checkpoint, else start fresh.
  std::string resume = options.resume;
  const std::map<int64_t, std::string> existing = list_checkpoints(checkpoint_dir(config));
  if (resume == "auto") {
    resume = existing.empty() ? "" : "latest";
    if (resume.empty())
      spdlog::info("--resume auto: no checkpoint in {}: starting fresh", checkpoint_dir(config));
  }
  // A fresh run must not mix its checkpoints and metrics with an earlier run's.
  COLLAGE_CHECK(!resume.empty() || existing.empty() || options.overwrite,
                "{} holds checkpoints of an earlier run (the last: {}): continue it with "
                "--resume (or --resume auto), or start over with --overwrite, which deletes "
                "them",
                checkpoint_dir(config), existing.empty() ? "" : existing.rbegin()->second);
  const std::string resume_path =
      resume.empty() ? "" : resolve_resume(resume, checkpoint_dir(config));
  if (!resume_path.empty())
    check_resume_allowed(resume_path, config, options.convert_precision,
                         options.allow_config_change);
  const std::string init_path =
      options.init_from.empty() ? "" : resolve_resume(options.init_from, checkpoint_dir(config));

  const BackendChoice backend = choose_backend(config.parallel.backend);
  run.backend = make_backend(backend.name, config.parallel.threads, node_local_rank(),
                             config.parallel.cpu_gemm);
  parallel.attach_backend(*run.backend);
  spdlog::info("backend: {} ({})", run.backend->name(), backend.reason);
  if (!run.backend->gemm_engine().empty()) spdlog::info("GEMMs: {}", run.backend->gemm_engine());

  const TrainingConfig& tc = config.training;
  const int B = tc.micro_batch_size, T = config.data.seq_len;
  run.task = make_training_task(config, *run.backend, parallel);
  spdlog::info("data: {}", run.task->data_summary());
  TrainableModel& model = run.model();
  model.init_weights(tc.seed);
  if (!init_path.empty()) {
    const int64_t init_step = load_checkpoint_weights(init_path, config, *run.backend, model);
    spdlog::info(
        "initialised the weights from {} (step {}); optimizer state and schedule start fresh",
        init_path, init_step);
  }
  // After the weights: fp32-master's master copy starts as them.
  run.optimizer = make_optimizer(config, *run.backend, model, layout);
  // What this rank allocated, read from the arenas themselves.
  const MemoryReport memory = measure_memory(model, *run.optimizer, layout.dp, layout.zero);
  spdlog::info(
      "{}", format_memory_report(memory, fmt::format("memory of rank {} of {}", layout.world_rank,
                                                     layout.world_size)));

  // --overwrite: the earlier run's checkpoints go only now that the data and model are ready.
  if (resume.empty() && !existing.empty()) {
    parallel.host_world().barrier();  // every rank has seen them before rank 0 deletes them
    if (lead) {
      remove_checkpoints(checkpoint_dir(config));
      spdlog::warn("--overwrite: deleted the {} checkpoint(s) of an earlier run in {}",
                   existing.size(), checkpoint_dir(config));
    }
    parallel.host_world().barrier();
  }
  if (!resume_path.empty()) {
    run.progress =
        restore_training_checkpoint(resume_path, config, *run.backend, model, *run.optimizer,
                                    options.convert_precision, options.allow_config_change);
  }
  int64_t& step = run.progress.step;
  int64_t& consumed_samples = run.progress.consumed_samples;
  std::unique_ptr<MetricsFile> metrics;
  if (lead)
    metrics = std::make_unique<MetricsFile>(
        (fs::path(config.logging.dir) / "metrics.jsonl").string(), resume.empty() ? -1 : step);
  auto write_metrics = [&](const nlohmann::json& record) {
    if (metrics) metrics->write(record);
  };

  const int micro_batches = tc.global_batch_size / (B * layout.dp);
  const double tokens_per_step = run.task->tokens_per_step();
  // Model FLOPs (model_flops.h) per device per second, against the device's peak.
  const ModelFlops flops = model_flops(config);
  const double flops_per_step = flops.per_sequence() * tc.global_batch_size;
  DevicePeak peak;
  if (lead) {
    peak = backend_peak(backend.name, config.parallel.threads, node_local_rank());
    spdlog::info(
        "model FLOPs: {:.3g} per token (6N + 12LTC, N = {:.4g}M), {:.3g} per step; MFU "
        "against {}",
        flops.per_token(), flops.body_parameters / 1e6, flops_per_step, peak.source);
  }
  auto device_flop_rate = [&](double step_seconds) {
    return flops_per_step / step_seconds / layout.world_size;
  };

  TrainResult result;
  ProgressBar progress(lead ? config.logging.progress : "off", step + 1, tc.max_steps);
  if (step >= tc.max_steps)
    spdlog::warn(
        "the run is already at step {} of training.max_steps {}: nothing to train (raise "
        "training.max_steps to continue it)",
        step, tc.max_steps);
  else
    spdlog::info("training steps {}..{}: {} micro-batches of {}x{} tokens per step{}", step + 1,
                 tc.max_steps, micro_batches, B, T,
                 layout.dp > 1 ? fmt::format(" on each of {} data-parallel ranks", layout.dp) : "");
  if (step == 0) {
    // A fresh run's step-0 record: what the strategy costs, and the starting point of the
    // validation curve (≈ ln(vocab) for a fresh model).
    nlohmann::json record = {{"step", 0},
                             {"time", utc_timestamp()},
                             {"tokens", 0},
                             {"precision", precision_name(config.optimizer.precision)},
                             {"bytes_per_parameter", memory.bytes_per_parameter()},
                             {"model_flops_per_token", flops.per_token()}};
    if (peak.flops > 0) record["peak_tflops"] = peak.flops / 1e12;
    if (tc.eval_interval > 0) {
      const TaskFigures val = run.task->validate();
      record["val_loss"] = result.last_val_loss = val.loss;
      record.update(val.metrics);
      spdlog::info("step {:>6}/{} | val loss {:.4f}{}", 0, tc.max_steps, val.loss, val.text);
    }
    write_metrics(record);
  }
  // Fault injection for tests/parallel/preemption.py: COLLAGE_TEST_STEP_SECONDS=S makes every
  // step last at least S seconds (a large model's steps, without its memory or compute).
  const char* slow_steps = std::getenv("COLLAGE_TEST_STEP_SECONDS");
  const double test_step_seconds = slow_steps ? std::atof(slow_steps) : 0;
  while (step < tc.max_steps) {
    stop_if_launcher_gone();  // mpirun killed: not one more step (launcher_watch.h)
    const int64_t t = step + 1;
    const auto start = Clock::now();
    const CommTraffic tp_before = parallel.tp_traffic, dp_before = parallel.dp_traffic;
    const TaskFigures train = run.task->train_step(consumed_samples);
    consumed_samples += tc.global_batch_size;
    run.reduce_gradients();
    const double loss = train.loss;
    if (!std::isfinite(loss)) {
      progress.clear();
      fail("step {}: the training loss is {}; stopping without writing a checkpoint ({})", t, loss,
           last_good_checkpoint(config));
    }
    // Global-norm clipping of the averaged gradient.
    const double grad_norm = run.gradient_norm();
    if (!std::isfinite(grad_norm)) {
      progress.clear();
      fail("step {}: the gradient norm is {}; stopping without writing a checkpoint ({})", t,
           grad_norm, last_good_checkpoint(config));
    }
    if (config.optimizer.grad_clip > 0 && grad_norm > config.optimizer.grad_clip) {
      const ParameterRegion region = run.update_region();
      run.backend->scale(model.gradient_memory() + region.begin,
                         float(config.optimizer.grad_clip / grad_norm), region.size());
    }
    const double lr = learning_rate(config.optimizer, t);
    // EDQ sums over every parameter once: over TP, and over DP when the updates are sharded.
    const StepEdq edq =
        run.optimizer->step(t, lr, layout.zero ? parallel.host_world() : parallel.host_tp());
    run.gather_parameters();
    run.backend->synchronize();
    const double test_sleep_seconds = test_step_seconds - seconds_since(start);
    if (test_sleep_seconds > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(test_sleep_seconds));
    step = t;
    const double step_seconds = seconds_since(start);
    const int64_t tp_bytes = parallel.tp_traffic.bytes - tp_before.bytes;
    const int64_t dp_bytes = parallel.dp_traffic.bytes - dp_before.bytes;

    nlohmann::json record = {{"step", t},
                             {"time", utc_timestamp()},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"tokens_per_s", tokens_per_step / step_seconds},
                             {"ms_per_step", 1e3 * step_seconds},
                             {"consumed_samples", consumed_samples},
                             {"tokens", consumed_samples * T}};
    record.update(train.metrics);
    const double flop_rate = device_flop_rate(step_seconds);
    record["model_tflops"] = flop_rate / 1e12;  // per device
    if (peak.flops > 0) record["mfu"] = flop_rate / peak.flops;
    if (parallel.multi_rank()) {
      record["comm_tp_bytes"] = tp_bytes;
      record["comm_dp_bytes"] = dp_bytes;
    }
    if (config.optimizer.edq) {
      run.progress.edq.add(edq.total);
      const EdqFigures figures = edq_figures(edq.total);
      record["edq"] = figures.edq;
      record["edq_ratio"] = figures.edq_ratio;
      record["lost_frac"] = figures.lost_frac;
      record["updated"] = edq.total.updated;  // parameters with a non-zero update, each once
      record["edq_ratio_cumulative"] = run.progress.edq.ratio();
      if (!edq.groups.empty()) {
        nlohmann::json groups = nlohmann::json::object();
        for (size_t k = 0; k < edq.groups.size(); k++)
          groups[run.optimizer->edq_groups()[k]] = edq_figures(edq.groups[k]).edq_ratio;
        record["edq_groups"] = groups;
      }
    }
    const bool evaluate = tc.eval_interval > 0 && (t % tc.eval_interval == 0 || t == tc.max_steps);
    TaskFigures val;
    if (evaluate) {
      val = run.task->validate();
      record["val_loss"] = result.last_val_loss = val.loss;
      record.update(val.metrics);
    }
    if (t % tc.log_interval == 0 || evaluate || t == tc.max_steps) {
      progress.clear();
      spdlog::info(
          "step {:>6}/{} | loss {:.4f}{}{} | lr {:.3e} | grad norm {:.3f}{} | {:.0f} tok/s | "
          "{}{} | {:.0f} ms/step{}",
          t, tc.max_steps, loss, train.text,
          evaluate ? fmt::format(" | val loss {:.4f}{}", val.loss, val.text) : "", lr, grad_norm,
          config.optimizer.edq ? edq_summary(edq_figures(edq.total)) : "",
          tokens_per_step / step_seconds, format_flop_rate(flop_rate),
          peak.flops > 0 ? fmt::format(" MFU {:.1f}%", 100 * flop_rate / peak.flops) : "",
          1e3 * step_seconds, comm_summary(layout, tp_bytes, dp_bytes));
    }
    write_metrics(record);  // every step; the console only every log_interval steps
    progress.update(t, loss);
    result.last_loss = loss;
    result.steps_run++;
    const bool checkpoint_now =
        (config.checkpoint.interval > 0 && t % config.checkpoint.interval == 0) ||
        t == tc.max_steps;
    if (checkpoint_now) {
      progress.clear();
      result.last_checkpoint = save(run);
    }
    // Preemption (stop_signal.h): the ranks agree on the step, whichever rank was signalled.
    float stop_signal = float(stop_signal_received());
    if (parallel.multi_rank()) parallel.host_world().all_reduce_max(&stop_signal, 1);
    if (stop_signal > 0 && t < tc.max_steps) {
      progress.clear();
      const int signal = int(stop_signal);
      if (!checkpoint_now) result.last_checkpoint = save(run);
      spdlog::warn(
          "{} received: stopped after step {} with checkpoint {}; continue with --resume (exit "
          "status {})",
          signal_name(signal), t, result.last_checkpoint, kExitStopped);
      result.stopped_by_signal = signal;
      break;
    }
  }
  progress.finish();
  spdlog::default_logger()->flush();  // train.log complete when train() returns
  result.last_step = step;
  return result;
}

}  // namespace

TrainResult train(const Config& config, const TrainOptions& options) {
  ParallelRun parallel(config);  // MPI (under mpirun) lives as long as this
  // One run per directory it writes, held by world rank 0 (run_directory.h).
  std::unique_ptr<RunDirectoryLock> logging_lock, checkpoint_lock;
  ensure_writable_directory(config.logging.dir, "logging.dir");
  if (parallel.layout().world_rank == 0) {
    try {
      logging_lock = std::make_unique<RunDirectoryLock>(config.logging.dir, "logging.dir",
                                                        options.wait_lock_seconds);
      const std::string checkpoints = checkpoint_dir(config);
      ensure_writable_directory(checkpoints, "checkpoint.dir");
      // One directory for both (checkpoint.dir: <logging.dir>): already locked, and a second
      // flock of the same file from this process would wait for itself.
      if (fs::canonical(checkpoints) != fs::canonical(config.logging.dir))
        checkpoint_lock = std::make_unique<RunDirectoryLock>(checkpoints, "checkpoint.dir",
                                                             options.wait_lock_seconds);
    } catch (const std::exception& e) {
      parallel.abort_job(e.what());  // the other ranks would wait for rank 0 for ever
      throw;
    }
  }
  setup_logging(config, parallel.layout());
  install_stop_signals();
  try {
    return train_ranks(config, options, parallel);
  } catch (const std::exception& e) {
    // The error in the log files too: stderr gets it from the CLI (one process) or from
    // abort_job, which logs it as well (several ranks).
    if (!parallel.multi_rank()) {
      g_console_sink->set_level(spdlog::level::off);
      spdlog::critical("{}", e.what());
      g_console_sink->set_level(spdlog::level::trace);
    }
    // A rank that fails alone would leave the others blocked in a collective: end the job.
    if (parallel.multi_rank()) parallel.abort_job(e.what());
    throw;
  }
}

}  // namespace collage
