#pragma once
// Optimizer: AdamW under one precision strategy (optimizer.precision). It owns the
// strategy's state in one optimizer-state arena and runs the backend's per-tensor step.
// Parameters are seen as spans of one contiguous parameter/gradient memory, so this layer
// does not depend on the model.
#include <memory>
#include <string>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "config/config.h"

namespace collage {

struct ParamSpan {
  int64_t offset = 0;  // elements into parameter/gradient memory
  int64_t numel = 0;
  bool weight_decay = false;
};

// One named state component, e.g. "master" (f32) or "m" (f32); one value per parameter.
struct StateComponent {
  std::string name;
  std::string dtype;  // "f32" or "bf16"
  size_t element_bytes = 0;
  void* data = nullptr;  // device memory, num_parameters elements
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, Backend& backend, std::vector<ParamSpan> spans,
            bf16* params, bf16* grads, int64_t num_parameters);

  // One AdamW step with learning rate lr; t is the 1-based step counter.
  void step(int64_t t, double lr);

  const std::vector<StateComponent>& state() const { return state_; }
  size_t state_bytes() const { return state_arena_ ? state_arena_->used() : 0; }
  Precision precision() const { return config_.precision; }

  // The state components a strategy keeps besides θ and g (names and element types).
  static std::vector<StateComponent> components(Precision precision);

 private:
  OptimizerConfig config_;
  Backend& backend_;
  std::vector<ParamSpan> spans_;
  bf16* params_;
  bf16* grads_;
  int64_t num_parameters_;
  std::unique_ptr<Arena> state_arena_;
  std::vector<StateComponent> state_;
};

}  // namespace collage
