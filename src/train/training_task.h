#pragma once
// A training task: what the training loop (trainer.cpp) leaves to the objective — the data,
// the model's forward and backward with the loss's gradient scale, and validation. The loop
// owns everything that is the same for every model: gradient reduction over the ranks,
// clipping, the schedule, the optimizer step, logging, checkpoints. There is one task per
// objective (config/architecture.h), not per architecture: a task asks the model family for
// its model (src/model/model_family.h), so a new architecture with an existing objective
// needs no task of its own.
//
//   next_token (next_token_task.cpp)  Megatron .bin/.idx samples, next-token loss (GPT)
//   masked_lm  (masked_lm_task.cpp)   HDF5 shards, masked-LM (+ next-sentence) loss (BERT,
//                                     RoBERTa)
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/parallel_run.h"
#include "model/trainable_model.h"

namespace collage {

// One step's training loss or one validation, reduced over the data-parallel ranks.
struct TaskFigures {
  double loss = 0;         // the step's loss (what clipping, logs and NaN checks see)
  nlohmann::json metrics;  // extra metrics.jsonl fields, e.g. {"mlm_loss": ...}
  std::string text;        // the same for the log line, e.g. " (mlm 6.91 nsp 0.69)"
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  virtual TrainableModel& model() = 0;
  virtual std::string data_summary() const = 0;
  virtual double tokens_per_step() const = 0;  // for tokens/s: global batch × seq_len

  // Zeroes the gradients, then runs this rank's micro-batches of the step whose first sample
  // is consumed_samples (the global count, the same on every rank): forward and backward,
  // the gradients accumulating those of the step's loss (a mean over the global batch, summed
  // over the data-parallel ranks by the loop). Returns the step's loss, reduced over DP.
  virtual TaskFigures train_step(int64_t consumed_samples) = 0;

  // The validation figures (no dropout), the same on every rank: validate_batches() of
  // training.eval_iters.
  virtual TaskFigures validate() = 0;
  // The same over the first `batches` validation micro-batches (`collage eval --iters`): the
  // batches are fixed (batch i is the same whenever it is read), so a count below
  // training.eval_iters evaluates the first of the ones training validates on.
  virtual TaskFigures validate_batches(int batches) = 0;
};

// Loads the data (rank 0 first: it prepares a corpus the config asks for, the others then
// read it), builds the model for this rank's place in `parallel` and returns the task of
// config.model.arch's objective. Weights start at zero: the trainer initialises or loads them.
std::unique_ptr<TrainingTask> make_training_task(const Config& config, Backend& backend,
                                                 ParallelRun& parallel);

// The two tasks (make_training_task picks one).
std::unique_ptr<TrainingTask> make_next_token_task(const Config& config, Backend& backend,
                                                   ParallelRun& parallel);
std::unique_ptr<TrainingTask> make_masked_lm_task(const Config& config, Backend& backend,
                                                  ParallelRun& parallel);

}  // namespace collage
