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
#include <optional>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/resume_plan.h"
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

// Everything a run needs, built once from the config (prepare_run() below).
struct Run {
  const Config& config;
  ParallelRun& parallel;
  const RankLayout& layout;
  const bool lead;           // world rank 0: logs, metrics, config.yaml
  std::string backend_name;  // cpu | cuda | cuda-emulated (backend_choice.h)
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TrainingTask> task;  // the data, the model, its loss (training_task.h)
  std::unique_ptr<Optimizer> optimizer;
  MemoryReport memory;        // what this rank allocated (memory_plan.h)
  TrainingProgress progress;  // step, consumed samples, cumulative EDQ

  // Recording the steps: metrics.jsonl (world rank 0 only), the model FLOPs (model_flops.h)
  // against the device's peak, the progress bar.
  std::unique_ptr<MetricsFile> metrics;
  ModelFlops flops;
  double flops_per_step = 0;
  DevicePeak peak;        // known on world rank 0 only
  int peak_rechecks = 0;  // times a step outran a measured peak, which was then measured again
  std::optional<ProgressBar> progress_bar;

  // Fault injection for tests/parallel/preemption.py: COLLAGE_TEST_STEP_SECONDS=S makes every
  // step last at least S seconds (a large model's steps, without its memory or compute).
  double test_step_seconds = 0;

  Run(const Config& c, ParallelRun& p)
      : config(c), parallel(p), layout(p.layout()), lead(p.layout().world_rank == 0) {}

  TrainableModel& model() { return task->model(); }

  void write_metrics(const nlohmann::json& record) {
    if (metrics) metrics->write(record);
  }

  // Model FLOPs per device per second.
  double device_flop_rate(double step_seconds) const {
    return flops_per_step / step_seconds / layout.world_size;
  }

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
  return save_training_checkpoint(run.config, *run.backend, run.model(), *run.optimizer,
                                  run.progress, run.layout, run.parallel.host_world());
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

// ---- Preparing the run --------------------------------------------------------------------

// The resolved config (logged, and saved as <logging.dir>/config.yaml), a checkpoint directory
// that can be written, and this rank's place in the job.
void log_run_setup(const Run& run) {
  const Config& config = run.config;
  if (run.lead) {
    spdlog::info("collage train: resolved config\n{}", config_to_yaml(config));
    std::ofstream(fs::path(config.logging.dir) / "config.yaml") << config_to_yaml(config);
  }
  ensure_writable_directory(checkpoint_dir(config), config.checkpoint.dir.empty()
                                                        ? "checkpoint.dir (default: "
                                                          "<logging.dir>/checkpoints)"
                                                        : "checkpoint.dir");
  const RankLayout& layout = run.layout;
  if (run.parallel.multi_rank()) {
    spdlog::info(
        "ranks: {} = tensor-parallel {} x data-parallel {}{} (this is world rank {}: TP "
        "rank {}, DP rank {})",
        layout.world_size, layout.tp, layout.dp, layout.zero ? ", ZeRO-1" : "", layout.world_rank,
        layout.tp_rank, layout.dp_rank);
  }
}

ResumeRequest resume_request(const TrainOptions& options) {
  ResumeRequest request;
  request.resume = options.resume;
  request.init_from = options.init_from;
  request.overwrite = options.overwrite;
  request.convert_precision = options.convert_precision;
  request.allow_config_change = options.allow_config_change;
  return request;
}

// parallel.backend -> the Backend this rank computes on, which its Comms then use.
void start_backend(Run& run) {
  const BackendChoice choice = choose_backend(run.config.parallel.backend);
  run.backend_name = choice.name;
  run.backend = make_backend(choice.name, run.config.parallel.threads, node_local_rank(),
                             run.config.parallel.cpu_gemm);
  run.parallel.attach_backend(*run.backend);
  spdlog::info("backend: {} ({})", run.backend->name(), choice.reason);
  if (!run.backend->gemm_engine().empty()) spdlog::info("GEMMs: {}", run.backend->gemm_engine());
  if (!run.backend->optimizer_engine().empty())
    spdlog::info("optimizer loop: {}", run.backend->optimizer_engine());
  if (!run.backend->kernel_engine().empty())
    spdlog::info("elementwise, LayerNorm and cross-entropy kernels: {}",
                 run.backend->kernel_engine());
}

// The data, the model (its weights initialised, or --init-from's) and the optimizer, and the
// memory they took.
void build_task_and_optimizer(Run& run, const ResumePlan& start) {
  run.task = make_training_task(run.config, *run.backend, run.parallel);
  spdlog::info("data: {}", run.task->data_summary());
  run.model().init_weights(run.config.training.seed);
  load_initial_weights(start, run.config, *run.backend, run.model());
  // After the weights: fp32-master's master copy starts as them.
  run.optimizer = make_optimizer(run.config, *run.backend, run.model(), run.layout);
  // What this rank allocated, read from the arenas themselves.
  const RankLayout& layout = run.layout;
  run.memory = measure_memory(run.model(), *run.optimizer, layout.dp, layout.zero);
  spdlog::info("{}",
               format_memory_report(run.memory, fmt::format("memory of rank {} of {}",
                                                            layout.world_rank, layout.world_size)));
}

// metrics.jsonl (a resumed run's cut back to its step), the model FLOPs and the device's peak
// (world rank 0), the progress bar.
void open_records(Run& run, bool resuming) {
  const Config& config = run.config;
  if (run.lead)
    run.metrics =
        std::make_unique<MetricsFile>((fs::path(config.logging.dir) / "metrics.jsonl").string(),
                                      resuming ? run.progress.step : -1);
  run.flops = model_flops(config);
  run.flops_per_step = run.flops.per_sequence() * config.training.global_batch_size;
  if (run.lead) {
    run.peak = backend_peak(run.backend_name, config.parallel, node_local_rank());
    spdlog::info(
        "model FLOPs: {:.3g} per token (6N + 12LTC, N = {:.4g}M), {:.3g} per step; MFU "
        "against {}",
        run.flops.per_token(), run.flops.body_parameters / 1e6, run.flops_per_step,
        run.peak.source);
  }
  run.progress_bar.emplace(run.lead ? config.logging.progress : "off", run.progress.step + 1,
                           config.training.max_steps);
  const char* slow_steps = std::getenv("COLLAGE_TEST_STEP_SECONDS");
  run.test_step_seconds = slow_steps ? std::atof(slow_steps) : 0;
  // Tests: a start-up measurement of the peak taken in a disturbed moment (recheck_peak).
  if (const char* scale = std::getenv("COLLAGE_TEST_PEAK_SCALE"))
    run.peak.flops *= std::atof(scale);
}

// The steps this call will train, or why there are none.
void log_training_plan(const Run& run) {
  const TrainingConfig& tc = run.config.training;
  const int64_t step = run.progress.step;
  const int micro_batches = tc.global_batch_size / (tc.micro_batch_size * run.layout.dp);
  if (step >= tc.max_steps)
    spdlog::warn(
        "the run is already at step {} of training.max_steps {}: nothing to train (raise "
        "training.max_steps to continue it)",
        step, tc.max_steps);
  else
    spdlog::info(
        "training steps {}..{}: {} micro-batches of {}x{} tokens per step{}", step + 1,
        tc.max_steps, micro_batches, tc.micro_batch_size, run.config.data.seq_len,
        run.layout.dp > 1 ? fmt::format(" on each of {} data-parallel ranks", run.layout.dp) : "");
}

// The backend, the task, the model and optimizer, and the state they start from. Where the run
// starts (fresh, --init-from, --resume) is settled first, before any data is loaded or
// prepared (which may take long): a refused resume or fresh run costs nothing.
void prepare_run(Run& run, const TrainOptions& options) {
  log_run_setup(run);
  const ResumePlan start = plan_resume(run.config, resume_request(options));
  start_backend(run);
  build_task_and_optimizer(run, start);
  run.progress = start_training_state(start, run.config, *run.backend, run.model(), *run.optimizer,
                                      run.parallel.host_world());
  open_records(run, start.resuming());
  log_training_plan(run);
}

// A fresh run's step-0 record: what the strategy costs, and the starting point of the
// validation curve (≈ ln(vocab) for a fresh model).
void record_step_zero(Run& run, TrainResult& result) {
  const TrainingConfig& tc = run.config.training;
  nlohmann::json record = {{"step", 0},
                           {"time", utc_timestamp()},
                           {"tokens", 0},
                           {"precision", precision_name(run.config.optimizer.precision)},
                           {"bytes_per_parameter", run.memory.bytes_per_parameter()},
                           {"model_flops_per_token", run.flops.per_token()}};
  if (run.peak.flops > 0) record["peak_tflops"] = run.peak.flops / 1e12;
  if (tc.eval_interval > 0) {
    const TaskFigures val = run.task->validate();
    record["val_loss"] = result.last_val_loss = val.loss;
    record.update(val.metrics);
    spdlog::info("step {:>6}/{} | val loss {:.4f}{}", 0, tc.max_steps, val.loss, val.text);
  }
  run.write_metrics(record);
}

// ---- One step ---------------------------------------------------------------------------

// What one step did, for its record.
struct StepFigures {
  int64_t step = 0;   // the step just completed, from 1
  TaskFigures train;  // the training loss and the task's figures
  double grad_norm = 0;
  double lr = 0;
  StepEdq edq;
  double seconds = 0;
  int64_t tp_bytes = 0, dp_bytes = 0;  // payload handed to the TP and DP collectives
};

// A non-finite loss or gradient norm ends the run with an error, before anything is saved.
void stop_unless_finite(Run& run, int64_t step, const char* what, double value) {
  if (std::isfinite(value)) return;
  run.progress_bar->clear();
  fail("step {}: {} is {}; stopping without writing a checkpoint ({})", step, what, value,
       last_good_checkpoint(run.config));
}

// Micro-batches with gradient accumulation, the gradients reduced over the ranks and clipped,
// one optimizer step (docs/ARCHITECTURE.md, "One training step").
StepFigures train_step(Run& run) {
  const auto start = Clock::now();
  ParallelRun& parallel = run.parallel;
  const CommTraffic tp_before = parallel.tp_traffic, dp_before = parallel.dp_traffic;
  StepFigures s;
  s.step = run.progress.step + 1;
  s.train = run.task->train_step(run.progress.consumed_samples);
  run.progress.consumed_samples += run.config.training.global_batch_size;
  run.reduce_gradients();
  stop_unless_finite(run, s.step, "the training loss", s.train.loss);
  s.grad_norm = run.gradient_norm();
  stop_unless_finite(run, s.step, "the gradient norm", s.grad_norm);
  s.lr = learning_rate(run.config.optimizer, s.step);
  // EDQ sums over every parameter once: over TP, and over DP when the updates are sharded.
  // Clipping is fused into the step's reads of the gradients: the bits of Backend::scale over
  // the update region first, without that pass over them (at GPT 1.3B, 5.3 GB of reads and
  // writes a clipped step).
  s.edq = run.optimizer->step(s.step, s.lr,
                              run.layout.zero ? parallel.host_world() : parallel.host_tp(),
                              clipping_factor(run.config.optimizer, s.grad_norm));
  run.gather_parameters();
  run.backend->synchronize();
  const double test_sleep_seconds = run.test_step_seconds - seconds_since(start);
  if (test_sleep_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(test_sleep_seconds));
  run.progress.step = s.step;
  if (run.config.optimizer.edq) run.progress.edq.add(s.edq.total);
  s.seconds = seconds_since(start);
  s.tp_bytes = parallel.tp_traffic.bytes - tp_before.bytes;
  s.dp_bytes = parallel.dp_traffic.bytes - dp_before.bytes;
  return s;
}

// ---- Recording the step -----------------------------------------------------------------

// The step's EDQ (docs/PRECISION.md §7): its ratio and lost fraction, the run's cumulative ratio,
// and with logging.edq_groups each group's ratio.
void add_edq(const Run& run, const StepEdq& edq, nlohmann::json& record) {
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

// The step's line of metrics.jsonl (without the validation's figures).
nlohmann::json step_record(const Run& run, const StepFigures& s) {
  const int64_t consumed_samples = run.progress.consumed_samples;
  nlohmann::json record = {{"step", s.step},
                           {"time", utc_timestamp()},
                           {"loss", s.train.loss},
                           {"lr", s.lr},
                           {"grad_norm", s.grad_norm},
                           {"tokens_per_s", run.task->tokens_per_step() / s.seconds},
                           {"ms_per_step", 1e3 * s.seconds},
                           {"consumed_samples", consumed_samples},
                           {"tokens", consumed_samples * run.config.data.seq_len}};
  record.update(s.train.metrics);
  const double flop_rate = run.device_flop_rate(s.seconds);
  record["model_tflops"] = flop_rate / 1e12;  // per device
  if (run.peak.flops > 0) record["mfu"] = flop_rate / run.peak.flops;
  if (run.parallel.multi_rank()) {
    record["comm_tp_bytes"] = s.tp_bytes;
    record["comm_dp_bytes"] = s.dp_bytes;
  }
  if (run.config.optimizer.edq) add_edq(run, s.edq, record);
  return record;
}

// The step's console line: loss, validation, learning rate, gradient norm, EDQ, speed, MFU,
// communication.
void log_step_line(const Run& run, const StepFigures& s, const std::optional<TaskFigures>& val) {
  const double flop_rate = run.device_flop_rate(s.seconds);
  spdlog::info(
      "step {:>6}/{} | loss {:.4f}{}{} | lr {:.3e} | grad norm {:.3f}{} | {:.0f} tok/s | "
      "{}{} | {:.0f} ms/step{}",
      s.step, run.config.training.max_steps, s.train.loss, s.train.text,
      val ? fmt::format(" | val loss {:.4f}{}", val->loss, val->text) : "", s.lr, s.grad_norm,
      run.config.optimizer.edq ? edq_summary(edq_figures(s.edq.total)) : "",
      run.task->tokens_per_step() / s.seconds, format_flop_rate(flop_rate),
      run.peak.flops > 0 ? fmt::format(" MFU {:.1f}%", 100 * flop_rate / run.peak.flops) : "",
      1e3 * s.seconds, comm_summary(run.layout, s.tp_bytes, s.dp_bytes));
}

// Every eval_interval steps and after the last: the validation loss and the task's figures.
std::optional<TaskFigures> validate_if_due(Run& run, int64_t step, TrainResult& result) {
  const TrainingConfig& tc = run.config.training;
  if (tc.eval_interval <= 0 || (step % tc.eval_interval != 0 && step != tc.max_steps))
    return std::nullopt;
  TaskFigures val = run.task->validate();
  result.last_val_loss = val.loss;
  return val;
}

// A step that ran faster than the measured GEMM peak it is divided by shows that the peak was
// measured in a slow moment (a shared machine's neighbours, a start-up transient: on the 2-core
// development VM the demo's start-up measurement once gave 206 GFLOP/s where oneDNN does 427,
// and its steps showed MFU 102–131%). The peak is then measured again, at most twice a run, and
// the higher rate kept, the log and the step's record saying so. Datasheet peaks stay.
constexpr int kPeakRechecks = 2;
bool recheck_peak(Run& run, const StepFigures& s) {
  if (!run.lead || run.peak_rechecks >= kPeakRechecks) return false;
  const double flop_rate = run.device_flop_rate(s.seconds);
  const std::optional<DevicePeak> remeasured = remeasure_if_outrun(
      run.peak, flop_rate, run.backend_name, run.config.parallel, node_local_rank());
  if (!remeasured) return false;
  run.peak_rechecks++;
  const DevicePeak& again = *remeasured;
  const bool higher = again.flops > run.peak.flops;
  spdlog::warn(
      "step {} ran at {}, above the GEMM peak it is measured against ({}); measured "
      "again: {}{}",
      s.step, format_flop_rate(flop_rate), format_flop_rate(run.peak.flops), again.source,
      higher ? ", which MFU now uses"
             : "; kept the first (this machine's speed varies: MFU may pass 100%)");
  if (higher) run.peak = again;
  return higher;
}

// Every step to metrics.jsonl, with the validation's figures when it is due; to the console
// every log_interval steps, at a validation and after the last step.
void record_step(Run& run, const StepFigures& s, TrainResult& result) {
  const TrainingConfig& tc = run.config.training;
  const bool new_peak = recheck_peak(run, s);
  nlohmann::json record = step_record(run, s);
  if (new_peak) record["peak_tflops"] = run.peak.flops / 1e12;
  const std::optional<TaskFigures> val = validate_if_due(run, s.step, result);
  if (val) {
    record["val_loss"] = val->loss;
    record.update(val->metrics);
  }
  if (s.step % tc.log_interval == 0 || val || s.step == tc.max_steps) {
    run.progress_bar->clear();
    log_step_line(run, s, val);
  }
  run.write_metrics(record);
  run.progress_bar->update(s.step, s.train.loss);
  result.last_loss = s.train.loss;
  result.steps_run++;
}

// ---- Checkpointing and stopping ---------------------------------------------------------

// Every checkpoint.interval steps and after the last. Returns whether it saved.
bool checkpoint_if_due(Run& run, int64_t step, TrainResult& result) {
  const int interval = run.config.checkpoint.interval;
  const bool due = (interval > 0 && step % interval == 0) || step == run.config.training.max_steps;
  if (due) {
    run.progress_bar->clear();
    result.last_checkpoint = save(run);
  }
  return due;
}

// Preemption (stop_signal.h): the ranks agree on the step, whichever rank was signalled; the
// run saves a checkpoint (unless this step did) and stops. Returns whether it stops.
bool stop_on_signal(Run& run, int64_t step, bool checkpointed, TrainResult& result) {
  float stop_signal = float(stop_signal_received());
  if (run.parallel.multi_rank()) run.parallel.host_world().all_reduce_max(&stop_signal, 1);
  if (stop_signal <= 0 || step >= run.config.training.max_steps) return false;
  run.progress_bar->clear();
  const int signal = int(stop_signal);
  if (!checkpointed) result.last_checkpoint = save(run);
  spdlog::warn(
      "{} received: stopped after step {} with checkpoint {}; continue with --resume (exit "
      "status {})",
      signal_name(signal), step, result.last_checkpoint, kExitStopped);
  result.stopped_by_signal = signal;
  return true;
}

// ---- The loop ---------------------------------------------------------------------------

TrainResult train_ranks(const Config& config, const TrainOptions& options, ParallelRun& parallel) {
  Run run(config, parallel);
  prepare_run(run, options);
  TrainResult result;
  if (run.progress.step == 0) record_step_zero(run, result);
  while (run.progress.step < config.training.max_steps) {
    stop_if_launcher_gone();  // mpirun killed: not one more step (launcher_watch.h)
    const StepFigures step = train_step(run);
    record_step(run, step, result);
    const bool checkpointed = checkpoint_if_due(run, step.step, result);
    if (stop_on_signal(run, step.step, checkpointed, result)) break;
  }
  run.progress_bar->finish();
  // Again at the end, where the cpu loop also says how many blocks it had to redo exactly.
  if (!run.backend->optimizer_engine().empty())
    spdlog::info("optimizer loop: {}", run.backend->optimizer_engine());
  spdlog::default_logger()->flush();  // train.log complete when train() returns
  result.last_step = run.progress.step;
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
