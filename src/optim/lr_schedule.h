#pragma once
// Learning-rate schedules: linear warmup from 0, then cosine, linear or constant decay to
// min_lr at decay_steps, then min_lr (Megatron's OptimizerParamScheduler semantics).
#include <cstdint>

#include "config/config.h"

namespace collage {

// The learning rate of optimizer step t (t = 1 for the first step).
double learning_rate(const OptimizerConfig& config, int64_t t);

}  // namespace collage
