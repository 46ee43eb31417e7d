// Per-rank memory, measured or planned (memory_plan.h).
#include "train/memory_plan.h"

#include "core/error.h"

namespace collage {

MemoryReport measure_memory(const GPT& model, const Optimizer& optimizer) {
  MemoryReport r;
  r.precision = optimizer.precision();
  r.tensor_parallel = model.layout().tp;
  r.micro_batch = model.micro_batch();
  r.seq_len = model.seq_len();
  r.parameters = model.num_parameters();
  r.parameter_bytes = model.parameter_bytes();
  r.gradient_bytes = model.gradient_bytes();
  r.state = optimizer.state();
  for (StateComponent& c : r.state) c.data = nullptr;
  r.state_bytes = optimizer.state_bytes();
  r.activation_bytes = model.activation_bytes();
  return r;
}

MemoryReport plan_memory(const Config& config, int tensor_parallel, int data_parallel,
                         int micro_batch) {
  COLLAGE_CHECK(tensor_parallel >= 1 && data_parallel >= 1,
                "tensor-parallel {} and data-parallel {} must be >= 1", tensor_parallel,
                data_parallel);
  MemoryReport r;
  r.precision = config.optimizer.precision;
  r.tensor_parallel = tensor_parallel;
  r.data_parallel = data_parallel;
  r.micro_batch = micro_batch;
  r.seq_len = config.data.seq_len;
  const std::vector<ParameterInfo> table = GPT::parameter_table(config.model, tensor_parallel);
  r.parameters = table.back().offset + table.back().numel;
  // The model's parameter and gradient arenas hold exactly the bf16 parameters (gpt.cpp).
  r.parameter_bytes = size_t(r.parameters) * sizeof(bf16);
  r.gradient_bytes = r.parameter_bytes;
  const int64_t shard = (r.parameters + data_parallel - 1) / data_parallel;
  StatePlan state = Optimizer::plan_state(config.optimizer.precision, shard);
  r.state = state.components;
  r.state_bytes = state.arena_bytes;
  r.activation_bytes = GPT::planned_activation_bytes(config.model, micro_batch, config.data.seq_len,
                                                     tensor_parallel);
  return r;
}

int largest_micro_batch(const Config& config, int tensor_parallel, int data_parallel,
                        double budget_bytes, int max_micro_batch) {
  auto fits = [&](int b) {
    return double(plan_memory(config, tensor_parallel, data_parallel, b).total_bytes()) <=
           budget_bytes;
  };
  if (!fits(1)) return 0;
  int lo = 1, hi = max_micro_batch;  // fits(lo); find the last b that fits
  if (fits(hi)) return hi;
  while (hi - lo > 1) {  // invariant: fits(lo), !fits(hi)
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace collage
