#pragma once
// The arguments of one optimizer step over one parameter tensor. The strategy (src/optim/)
// decides which state components exist; the backend runs the per-element math.
#include <cstdint>

#include "core/bf16.h"

namespace collage {

// optimizer.precision in YAML. Only fp32_master is implemented so far; the bf16 strategies
// of COLLAGE.md come behind the same interface.
enum class Precision { fp32_master, bf16, collage_light, collage_plus, kahan, stochastic };

struct OptimizerStep {
  Precision precision = Precision::fp32_master;
  void* param = nullptr;       // (n) the weights the model reads, in the backend's storage type
  const void* grad = nullptr;  // (n) clipped, averaged gradient, same type
  int64_t n = 0;
  // Strategy state, in the order the strategy declares. fp32_master: {master f32, m f32,
  // v f32}.
  void* state[4] = {nullptr, nullptr, nullptr, nullptr};
  // AdamW hyperparameters of this step (weight_decay already 0 for no-decay tensors).
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t t = 1;  // step counter, starts at 1
};

}  // namespace collage
