#pragma once
// Trainer: the training loop. Builds backend, model, optimizer and data from a Config,
// then per step: micro-batches with gradient accumulation, global-norm clipping, the
// scheduled learning rate, one optimizer step; logs (with the step's EDQ), validates and
// checkpoints. At the start it logs the memory it allocated per rank (memory_plan.h).
#include <string>

#include "config/config.h"

namespace collage {

struct TrainOptions {
  // "" (fresh run), "latest", "auto" (latest when a checkpoint exists, else fresh), or a
  // checkpoint path or directory
  std::string resume;
  // Resume a checkpoint of another optimizer.precision by converting its state
  // (precision_conversion.h); without it such a resume is refused.
  bool convert_precision = false;
  // Resume although the config changes the model, the data order or the batch (see
  // restore_training_checkpoint); without it such a resume is refused, listing the keys.
  bool allow_config_change = false;
  // A checkpoint (file, set manifest or directory = its latest) whose weights start this run;
  // optimizer state, schedule and data position start fresh. Excludes `resume`.
  std::string init_from;
  // A fresh run into a checkpoint.dir that holds checkpoints deletes them; without it such a run
  // is refused (resume it, or start over with this).
  bool overwrite = false;
  // When another run holds logging.dir or checkpoint.dir (run_directory.h), wait up to this long
  // for it to end before failing: a requeued job whose previous incarnation is still dying.
  double wait_lock_seconds = 0;
};

struct TrainResult {
  int64_t last_step = 0;
  int64_t steps_run = 0;  // by this call (0: a resumed run that was already at max_steps)
  double last_loss = 0;
  double last_val_loss = -1;  // -1: never evaluated
  std::string last_checkpoint;
  // The signal that stopped the run before max_steps (stop_signal.h), after it saved
  // last_checkpoint; 0: the run reached max_steps.
  int stopped_by_signal = 0;
};

// For commands that measure one process (bench): throws Error when started by mpirun with
// several ranks or configured for tensor parallelism.
void check_single_process(const Config& config, const char* command);

// Trains; under mpirun every rank calls it (docs/PARALLEL.md §1). An error on any rank ends the
// whole job (docs/PARALLEL.md §6).
TrainResult train(const Config& config, const TrainOptions& options);

}  // namespace collage
