// Per-rank memory, measured or planned (memory_plan.h).
#include "plan/memory_plan.h"

#include "core/error.h"
#include "model/model_family.h"

namespace collage {

namespace {
// Shard starts are multiples of this many elements: 64 bf16 = 128 bytes, the widest vector
// access of the kernels.
constexpr int64_t kShardAlignment = 64;
}  // namespace

int64_t zero_memory_multiple(int data_parallel, bool zero) {
  return zero ? int64_t{data_parallel} * kShardAlignment : 1;
}

ParameterRegion zero_shard(int64_t memory_elements, int data_parallel, int dp_rank) {
  COLLAGE_CHECK(data_parallel >= 1 && dp_rank >= 0 && dp_rank < data_parallel &&
                    memory_elements % data_parallel == 0,
                "ZeRO-1: {} elements do not cut into {} shards (rank {})", memory_elements,
                data_parallel, dp_rank);
  const int64_t shard = memory_elements / data_parallel;
  return {dp_rank * shard, (dp_rank + 1) * shard};
}

MemoryReport measure_memory(const TrainableModel& model, const Optimizer& optimizer,
                            int data_parallel, bool zero) {
  MemoryReport r;
  r.precision = optimizer.precision();
  r.tensor_parallel = model.layout().tp;
  r.data_parallel = data_parallel;
  r.zero = zero;
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
  r.zero = config.parallel.zero == 1;
  const std::vector<ParameterInfo> table = model_parameter_table(config.model, tensor_parallel);
  r.parameters = 0;
  for (const ParameterInfo& info : table) r.parameters += info.numel;
  // The model's parameter and gradient arenas hold the bf16 parameters, padded for ZeRO-1's
  // equal shards (gpt.cpp); the optimizer keeps state for its shard only (optimizer.cpp).
  const int64_t elements =
      padded_parameter_elements(r.parameters, zero_memory_multiple(data_parallel, r.zero));
  r.parameter_bytes = size_t(elements) * sizeof(bf16);
  r.gradient_bytes = r.parameter_bytes;
  const int64_t shard = r.zero ? zero_shard(elements, data_parallel, 0).size() : r.parameters;
  StatePlan state = Optimizer::plan_state(config.optimizer.precision, shard);
  r.state = state.components;
  r.state_bytes = state.arena_bytes;
  ModelShape shape = model_shape(config);
  shape.micro_batch = micro_batch;
  r.activation_bytes =
      model_family(config.model).planned_activation_bytes(config.model, shape, tensor_parallel);
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
