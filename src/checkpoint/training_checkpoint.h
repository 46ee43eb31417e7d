#pragma once
// A run's state <-> checkpoints: the weights by parameter name, every optimizer state
// component by name ("optimizer.m", "optimizer.dtheta", ...), the counters, the
// stochastic-rounding seed and the cumulative EDQ sums, so that a resumed run continues bit
// for bit under every precision strategy. Resuming under another strategy converts the state
// (precision_conversion.h) only when asked to.
//
// Under parallelism (docs/PARALLEL.md §5) each rank saves its part: the weights
// of its tensor-parallel shard (data-parallel rank 0 only: the replicas hold the same), and
// the optimizer state it keeps (its ZeRO-1 shard; without ZeRO, data-parallel rank 0's).
// Restoring puts the saved parts back into whole tensors and cuts them for the current
// layout, so a run resumes at any tensor- or data-parallel size, and bit for bit at the same.
#include <string>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "dist/comm.h"
#include "dist/parallel_run.h"
#include "model/trainable_model.h"
#include "optim/edq.h"
#include "optim/optimizer.h"

namespace collage {

// What the loop has done so far.
struct TrainingProgress {
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // training samples read so far
  EdqCumulative edq;             // Σ ⟨Δ, u⟩ and Σ ‖u‖² over the steps so far
};

// Whether a rank of `layout` has a part to save (see above).
bool saves_checkpoint_part(const RankLayout& layout);

// This rank's part. Its metadata holds the run's (step, counters, config, layout) and, under
// "part", the rank's place (tp_rank, dp_rank, state_begin).
Checkpoint make_training_checkpoint(const Config& config, Backend& backend,
                                    const TrainableModel& model, const Optimizer& optimizer,
                                    const TrainingProgress& progress,
                                    const RankLayout& layout = {});

// A multi-rank save: every rank calls it with its part (ignored when !saves_checkpoint_part);
// the parts go to <dir>/step_N.shards/rank_R.ckpt, then rank 0 commits the set's manifest
// <dir>/step_N.ckpt (checkpoint.h). Stamps the set's save_id into part.meta. Returns the
// manifest's path on every rank, once it is committed.
std::string save_checkpoint_set(const std::string& dir, Checkpoint& part, const RankLayout& layout,
                                Comm& world, int keep);

// The run's state into checkpoint_dir(config), keeping the newest checkpoint.keep: one file, or
// with several ranks a set (every rank calls it, `world` holding them all). Logs and returns
// the path written (a set's manifest).
std::string save_training_checkpoint(const Config& config, Backend& backend,
                                     const TrainableModel& model, const Optimizer& optimizer,
                                     const TrainingProgress& progress, const RankLayout& layout,
                                     Comm& world);

// checkpoint.dir, or <logging.dir>/checkpoints when it is empty.
std::string checkpoint_dir(const Config& config);

// Only the weights of `path` (any layout) into the model: `collage train --init-from`, a new
// run from another's weights with a fresh optimizer state, schedule and data position (BERT's
// phase 2 starts from phase 1 this way). Construct the optimizer after it.
// Returns the step the weights were saved after.
int64_t load_checkpoint_weights(const std::string& path, const Config& config, Backend& backend,
                                TrainableModel& model);

// Weights given whole, as at tensor-parallel 1 (`values` laid out as model_parameter_table(
// config, 1)), into this rank's model, sharded as load_checkpoint_weights() shards a
// checkpoint's (the vocabulary's padding rows grow with tp, zero): `--init-from hf:DIR`.
void load_whole_weights(const std::vector<bf16>& values, const ModelConfig& config,
                        Backend& backend, TrainableModel& model);

// The refusals of restore_training_checkpoint() below (changed keys, another precision), from
// the checkpoint's header alone: plan_resume() (resume_plan.h) asks before any data is loaded.
void check_resume_allowed(const std::string& path, const Config& config, bool convert_precision,
                          bool allow_config_change);

// Loads `path` (a single checkpoint or a set's manifest, saved at any layout) into the model
// and optimizer (already constructed from `config` for this rank) and returns the progress it
// records. A checkpoint of another optimizer.precision is refused, naming both strategies and
// --convert-precision, unless convert_precision is set: then its state is converted.
// A config that differs from the checkpoint's in keys that change the run (the model, the data
// and its order, the seeds, the batch sizes) is refused listing each key with both values,
// unless allow_config_change; other changed keys are logged.
TrainingProgress restore_training_checkpoint(const std::string& path, const Config& config,
                                             Backend& backend, TrainableModel& model,
                                             Optimizer& optimizer, bool convert_precision,
                                             bool allow_config_change = false);

}  // namespace collage
