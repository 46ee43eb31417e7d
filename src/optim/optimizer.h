#pragma once
// Optimizer: AdamW under one precision strategy (optimizer.precision). It owns the
// strategy's state in one optimizer-state arena, runs the backend's per-tensor step and
// returns the step's EDQ sums reduced over the ranks. Parameters are seen as spans of one
// contiguous parameter/gradient memory, so this layer does not depend on the model.
#include <memory>
#include <string>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "config/config.h"
#include "dist/comm.h"

namespace collage {

struct ParamSpan {
  int64_t offset = 0;  // elements into parameter/gradient memory
  int64_t numel = 0;
  bool weight_decay = false;
  int edq_group = 0;  // index into OptimizerOptions::edq_groups (ignored when that is empty)
  // false: updated, but its EDQ is not counted on this rank (a tensor replicated over the
  // tensor-parallel ranks is counted by TP rank 0 only)
  bool count_edq = true;
};

// One named state component, one value per parameter. Names: "master", "m", "v" (fp32 for
// fp32-master, bf16 otherwise), "dtheta" (δθ), "dv" (δv), "compensation" (Kahan).
struct StateComponent {
  std::string name;
  std::string dtype;  // "f32" or "bf16" (checkpoint dtype names)
  size_t element_bytes = 0;
  size_t bytes = 0;      // num_parameters · element_bytes (0 in components())
  void* data = nullptr;  // device memory in the state arena (null in a plan)
};

// The state arena of a strategy for n parameters, as the Optimizer allocates it.
struct StatePlan {
  std::vector<StateComponent> components;  // in the backend's state order, data null
  size_t arena_bytes = 0;                  // components + alignment gaps: the allocation
};

struct OptimizerOptions {
  // Key of the stochastic-rounding RNG (see stochastic_rounding_seed()); with the step and
  // the element's offset in parameter memory it fixes every random bit of a run.
  uint64_t rounding_seed = 0;
  // Names of the EDQ groups that ParamSpan::edq_group indexes; empty: global EDQ only.
  std::vector<std::string> edq_groups;
  // ZeRO-1: this rank updates, and keeps state for, only the elements [shard_begin,
  // shard_end) of parameter memory (the spans are cut to it). shard_end < 0: all of them.
  int64_t shard_begin = 0, shard_end = -1;
};

// EDQ sums of one step over every rank: total, and per group when groups were given.
struct StepEdq {
  EdqSums total;
  std::vector<EdqSums> groups;  // parallel to OptimizerOptions::edq_groups
};

class Optimizer {
 public:
  // Allocates and initialises the state for the shard (options.shard_*): zeros, except
  // fp32-master's master = widened θ (so construct it after the weights are initialised or
  // loaded).
  Optimizer(const OptimizerConfig& config, Backend& backend, std::vector<ParamSpan> spans,
            bf16* params, bf16* grads, int64_t num_parameters, OptimizerOptions options = {});

  // One AdamW step with learning rate lr; t is the 1-based step counter. grad_scale is
  // global-norm clipping's factor (1: none), applied as the step reads each gradient
  // (OptimizerStep::grad_scale). EDQ sums (zero when optimizer.edq is false) are all-reduced
  // over `comm` (sum of doubles, one call).
  StepEdq step(int64_t t, double lr, Comm& comm, float grad_scale = 1.0f);

  const std::vector<StateComponent>& state() const { return state_; }
  const StateComponent& component(const std::string& name) const;  // throws if absent
  size_t state_bytes() const { return state_arena_->capacity(); }
  Precision precision() const { return config_.precision; }
  int64_t num_parameters() const { return num_parameters_; }
  // The elements [shard_begin(), shard_begin() + shard_elements()) this rank updates; the
  // state components hold one value for each of them.
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_elements() const { return shard_end_ - shard_begin_; }
  uint64_t rounding_seed() const { return options_.rounding_seed; }
  void set_rounding_seed(uint64_t seed) { options_.rounding_seed = seed; }  // on resume
  const std::vector<std::string>& edq_groups() const { return options_.edq_groups; }

  // The state components a strategy keeps besides θ and g, in the backend's order
  // (optimizer_step.h), with names and element types.
  static std::vector<StateComponent> components(Precision precision);
  // The state arena for num_parameters parameters, without allocating.
  static StatePlan plan_state(Precision precision, int64_t num_parameters);

 private:
  OptimizerConfig config_;
  Backend& backend_;
  std::vector<ParamSpan> spans_;
  bf16* params_;
  bf16* grads_;
  int64_t num_parameters_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  OptimizerOptions options_;
  std::unique_ptr<Arena> state_arena_;
  std::vector<StateComponent> state_;
};

// Global-norm clipping's factor for a gradient of norm grad_norm: optimizer.grad_clip / grad_norm
// above the limit, else 1 (also when clipping is off, grad_clip 0). The optimizer applies it as
// it reads each gradient (OptimizerStep::grad_scale).
float clipping_factor(const OptimizerConfig& config, double grad_norm);

// The stochastic-rounding key of a run: training.seed mixed with a fixed salt, so that the
// rounding stream is not the init stream of the same seed.
uint64_t stochastic_rounding_seed(uint64_t training_seed);

}  // namespace collage
