#pragma once
// A run's state <-> a Checkpoint: the weights by parameter name, every optimizer state
// component by name ("optimizer.m", "optimizer.dtheta", ...), the counters, the
// stochastic-rounding seed and the cumulative EDQ sums, so that a resumed run continues bit
// for bit under every precision strategy. Resuming under another strategy converts the state
// (precision_conversion.h) only when asked to.
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/edq.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace collage {

// What the loop has done so far.
struct TrainingProgress {
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // training samples read so far
  EdqCumulative edq;             // Σ ⟨Δ, u⟩ and Σ ‖u‖² over the steps so far
};

Checkpoint make_training_checkpoint(const Config& config, Backend& backend, const GPT& model,
                                    const Optimizer& optimizer, const TrainingProgress& progress);

// Loads `path` into the model and optimizer (already constructed from `config`) and returns
// the progress it records. A checkpoint of another optimizer.precision is refused, naming
// both strategies and --convert-precision, unless convert_precision is set: then its state
// is converted to the config's strategy.
TrainingProgress restore_training_checkpoint(const std::string& path, const Config& config,
                                             Backend& backend, GPT& model, Optimizer& optimizer,
                                             bool convert_precision);

}  // namespace collage
