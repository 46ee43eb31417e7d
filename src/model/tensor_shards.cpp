// Shard runs of the four tensor splits (tensor_shards.h, parameter_info.h).
#include "model/tensor_shards.h"

#include <cstring>

#include "core/error.h"

namespace collage {

std::vector<ShardRun> shard_runs(const ParameterInfo& info, const ParallelLayout& layout) {
  const int64_t tp = layout.tp, r = layout.tp_rank;
  const int64_t rows = info.full_shape.at(0);
  const int64_t cols = info.full_shape.size() > 1 ? info.full_shape[1] : 1;
  std::vector<ShardRun> runs;
  switch (info.split) {
    case TensorSplit::replicated:
      runs.push_back({0, 0, rows * cols});
      break;
    case TensorSplit::rows:  // rows [r·R/tp, (r+1)·R/tp): one run
      runs.push_back({0, r * (rows / tp) * cols, rows / tp * cols});
      break;
    case TensorSplit::qkv_rows: {  // the rank's heads from each of the q, k, v blocks
      const int64_t block = rows / 3, local = block / tp;
      for (int64_t part = 0; part < 3; ++part)
        runs.push_back({part * local * cols, (part * block + r * local) * cols, local * cols});
      break;
    }
    case TensorSplit::columns: {  // columns [r·K/tp, (r+1)·K/tp) of every row
      const int64_t local = cols / tp;
      for (int64_t i = 0; i < rows; ++i) runs.push_back({i * local, i * cols + r * local, local});
      break;
    }
  }
  int64_t covered = 0;
  for (const ShardRun& run : runs) covered += run.count;
  COLLAGE_CHECK(covered == info.numel, "{}: shard runs cover {} elements, the shard has {}",
                info.name, covered, info.numel);
  return runs;
}

void copy_shard_out_of(const void* full, void* shard, const ParameterInfo& info,
                       const ParallelLayout& layout, size_t element_bytes) {
  for (const ShardRun& run : shard_runs(info, layout))
    std::memcpy(static_cast<char*>(shard) + run.shard_offset * element_bytes,
                static_cast<const char*>(full) + run.full_offset * element_bytes,
                run.count * element_bytes);
}

void copy_shard_into(const void* shard, void* full, const ParameterInfo& info,
                     const ParallelLayout& layout, size_t element_bytes) {
  for (const ShardRun& run : shard_runs(info, layout))
    std::memcpy(static_cast<char*>(full) + run.full_offset * element_bytes,
                static_cast<const char*>(shard) + run.shard_offset * element_bytes,
                run.count * element_bytes);
}

}  // namespace collage
