#pragma once
// The memory one rank needs for a config, measured from a constructed model and optimizer
// (the trainer's start-of-run log) or planned without allocating (`collage plan`): both
// come from the same plans, so the planned numbers are the allocated ones.
#include "config/config.h"
#include "model/trainable_model.h"
#include "optim/memory_report.h"
#include "optim/optimizer.h"

namespace collage {

// ZeRO-1's cut of the parameter memory (docs/PARALLEL.md §4): the model pads its parameter and
// gradient memory to a multiple of zero_memory_multiple() elements, and data-parallel rank r
// owns the r-th of data_parallel equal shards. Every shard starts 128-byte aligned. Without
// ZeRO (zero = false) the multiple is 1 and the one shard is the whole memory.
int64_t zero_memory_multiple(int data_parallel, bool zero);
ParameterRegion zero_shard(int64_t memory_elements, int data_parallel, int dp_rank);

// The real allocations: arena capacities and state component sizes.
MemoryReport measure_memory(const TrainableModel& model, const Optimizer& optimizer,
                            int data_parallel = 1, bool zero = false);

// One rank of `config` split tensor_parallel ways, running micro_batch × data.seq_len
// tokens per forward; with parallel.zero: 1 the optimizer state is the rank's ZeRO-1 shard
// of the padded parameter memory (zero_shard()). No allocation.
MemoryReport plan_memory(const Config& config, int tensor_parallel, int data_parallel,
                         int micro_batch);

// The largest micro-batch (<= max_micro_batch) whose total_bytes() fits in budget_bytes,
// or 0 when not even one sequence fits.
int largest_micro_batch(const Config& config, int tensor_parallel, int data_parallel,
                        double budget_bytes, int max_micro_batch = 1 << 20);

}  // namespace collage
