#pragma once
// The memory one rank needs for a config, measured from a constructed model and optimizer
// (the trainer's start-of-run log) or planned without allocating (`collage plan`): both
// come from the same plans, so the planned numbers are the allocated ones.
#include "config/config.h"
#include "model/gpt.h"
#include "optim/memory_report.h"
#include "optim/optimizer.h"

namespace collage {

// The real allocations: arena capacities and state component sizes.
MemoryReport measure_memory(const GPT& model, const Optimizer& optimizer);

// One rank of `config` split tensor_parallel ways, running micro_batch × data.seq_len
// tokens per forward; with data_parallel > 1 the optimizer state is the rank's ZeRO-1
// shard (ceil(parameters / data_parallel) elements of each component). No allocation.
MemoryReport plan_memory(const Config& config, int tensor_parallel, int data_parallel,
                         int micro_batch);

// The largest micro-batch (<= max_micro_batch) whose total_bytes() fits in budget_bytes,
// or 0 when not even one sequence fits.
int largest_micro_batch(const Config& config, int tensor_parallel, int data_parallel,
                        double budget_bytes, int max_micro_batch = 1 << 20);

}  // namespace collage
