#include "checkpoint/resume_plan.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_weights.h"
#include "core/error.h"

namespace collage {

ResumePlan plan_resume(const Config& config, const ResumeRequest& request) {
  const std::string dir = checkpoint_dir(config);
  COLLAGE_CHECK(request.init_from.empty() || request.resume.empty(),
                "--init-from {} and --resume {}: a run either continues a checkpoint or starts "
                "from its weights, not both",
                request.init_from, request.resume);
  // --resume auto (a requeued job): continue when there is a checkpoint, else start fresh.
  std::string resume = request.resume;
  const std::map<int64_t, std::string> existing = list_checkpoints(dir);
  if (resume == "auto") {
    resume = existing.empty() ? "" : "latest";
    if (resume.empty()) spdlog::info("--resume auto: no checkpoint in {}: starting fresh", dir);
  }
  // A fresh run must not mix its checkpoints and metrics with an earlier run's.
  COLLAGE_CHECK(!resume.empty() || existing.empty() || request.overwrite,
                "{} holds checkpoints of an earlier run (the last: {}): continue it with "
                "--resume (or --resume auto), or start over with --overwrite, which deletes "
                "them",
                dir, existing.empty() ? "" : existing.rbegin()->second);
  ResumePlan plan;
  plan.convert_precision = request.convert_precision;
  plan.allow_config_change = request.allow_config_change;
  if (!resume.empty()) {
    plan.resume_path = resolve_resume(resume, dir);
    check_resume_allowed(plan.resume_path, config, request.convert_precision,
                         request.allow_config_change);
  } else {
    plan.earlier_checkpoints = existing;
  }
  if (is_hf_source(request.init_from)) {
    // A Hugging Face directory: its config.json is checked against the config now, before any
    // data is prepared; the weights are read once the model is built.
    check_hf_directory(hf_source_directory(request.init_from), config.model);
    plan.init_path = request.init_from;
  } else if (!request.init_from.empty()) {
    plan.init_path = resolve_resume(request.init_from, dir);
  }
  return plan;
}

void load_initial_weights(const ResumePlan& plan, const Config& config, Backend& backend,
                          TrainableModel& model) {
  if (plan.init_path.empty()) return;
  if (is_hf_source(plan.init_path)) {
    const HfWeights w = read_hf_weights(hf_source_directory(plan.init_path), &config.model);
    load_whole_weights(w.values, config.model, backend, model);
    spdlog::info(
        "initialised the weights from {} ({}, {} tensors{}{}); optimizer state and schedule "
        "start fresh",
        plan.init_path, w.naming, w.tensors_read,
        w.values_rounded ? fmt::format(", {} values rounded to bf16", w.values_rounded) : "",
        w.skipped.empty() ? "" : fmt::format(", skipped {}", fmt::join(w.skipped, " ")));
    return;
  }
  const int64_t init_step = load_checkpoint_weights(plan.init_path, config, backend, model);
  spdlog::info(
      "initialised the weights from {} (step {}); optimizer state and schedule start fresh",
      plan.init_path, init_step);
}

TrainingProgress start_training_state(const ResumePlan& plan, const Config& config,
                                      Backend& backend, TrainableModel& model, Optimizer& optimizer,
                                      Comm& world) {
  if (!plan.earlier_checkpoints.empty()) {
    world.barrier();  // every rank has seen them before rank 0 deletes them
    if (world.rank() == 0) {
      remove_checkpoints(checkpoint_dir(config));
      spdlog::warn("--overwrite: deleted the {} checkpoint(s) of an earlier run in {}",
                   plan.earlier_checkpoints.size(), checkpoint_dir(config));
    }
    world.barrier();
  }
  if (!plan.resuming()) return {};
  return restore_training_checkpoint(plan.resume_path, config, backend, model, optimizer,
                                     plan.convert_precision, plan.allow_config_change);
}

}  // namespace collage
