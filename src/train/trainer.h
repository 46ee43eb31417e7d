#pragma once
// Trainer: the training loop. Builds backend, model, optimizer and data from a Config,
// then per step: micro-batches with gradient accumulation, global-norm clipping, the
// scheduled learning rate, one optimizer step; logs, validates and checkpoints.
#include <string>

#include "config/config.h"

namespace collage {

struct TrainOptions {
  std::string resume;  // "" (fresh run), "latest", or a checkpoint path
};

struct TrainResult {
  int64_t last_step = 0;
  double last_loss = 0;
  double last_val_loss = -1;  // -1: never evaluated
  std::string last_checkpoint;
};

TrainResult train(const Config& config, const TrainOptions& options);

}  // namespace collage
