#pragma once
// Where a tensor-parallel shard's elements sit in the whole tensor (docs/PARALLEL.md §3): a shard
// is a list of runs of consecutive elements, each a run in the whole tensor too. Weight init
// cuts shards with it, and checkpoints use it both ways: to put saved shards back together
// and to cut them again for another tensor-parallel size (docs/PARALLEL.md §5).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/parameter_info.h"

namespace collage {

struct ShardRun {
  int64_t shard_offset = 0;  // elements into the shard
  int64_t full_offset = 0;   // elements into the whole tensor (full_shape, row-major)
  int64_t count = 0;
};

// The runs of `info`'s shard on TP rank layout.tp_rank of layout.tp, in shard order; they
// cover the shard (info.numel elements) exactly.
std::vector<ShardRun> shard_runs(const ParameterInfo& info, const ParallelLayout& layout);

// Copies the shard's elements (element_bytes each) out of the whole tensor, or into it.
void copy_shard_out_of(const void* full, void* shard, const ParameterInfo& info,
                       const ParallelLayout& layout, size_t element_bytes);
void copy_shard_into(const void* shard, void* full, const ParameterInfo& info,
                     const ParallelLayout& layout, size_t element_bytes);

}  // namespace collage
