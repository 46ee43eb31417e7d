#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace collage {

double learning_rate(const OptimizerConfig& config, int64_t t) {
  if (config.warmup_steps > 0 && t <= config.warmup_steps) {
    return config.lr * static_cast<double>(t) / static_cast<double>(config.warmup_steps);
  }
  if (config.schedule == "constant") return config.lr;
  const int64_t decay_span = config.decay_steps - config.warmup_steps;
  if (decay_span <= 0 || t >= config.decay_steps) return config.min_lr;
  // progress through the decay phase, in [0, 1)
  const double progress = static_cast<double>(t - config.warmup_steps) / decay_span;
  const double range = config.lr - config.min_lr;
  if (config.schedule == "linear") return config.lr - range * progress;
  return config.min_lr + range * 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace collage
