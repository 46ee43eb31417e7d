#pragma once
// ParameterInfo: one row of a model's parameter table. The table fixes the order of the
// tensors in the contiguous parameter and gradient memory (and in checkpoints), their
// per-rank shard shapes, and which ones get weight decay.
#include <cstdint>
#include <string>
#include <vector>

namespace collage {

// How a tensor is split over the tensor-parallel ranks (docs/PARALLEL.md §3). Shapes are in
// PyTorch [out, in] order, so "rows" is the output dimension.
enum class TensorSplit {
  replicated,  // every rank holds the full tensor (layernorms, row-parallel biases, wpe)
  rows,        // column-parallel weight/bias and vocab-parallel embedding: rank r holds
               // rows [r·R/tp, (r+1)·R/tp)
  qkv_rows,    // fused QKV weight/bias (3C rows): rank r holds its heads' rows of each of
               // the q, k and v blocks, stacked [q_r | k_r | v_r]
  columns,     // row-parallel weight: rank r holds columns [r·K/tp, (r+1)·K/tp)
};

struct ParameterInfo {
  std::string name;            // e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // per-rank shard shape, PyTorch [out, in] order
  int64_t numel = 0;           // elements of the shard
  int64_t offset = 0;          // elements into the contiguous parameter/gradient memory
  bool weight_decay = false;   // matrices and embeddings yes; biases and layernorms no
  TensorSplit split = TensorSplit::replicated;
  std::vector<int64_t> full_shape;  // shape of the whole tensor (tp = 1)
};

// Where this process sits in its tensor-parallel group (docs/PARALLEL.md §1).
struct ParallelLayout {
  int tp = 1;
  int tp_rank = 0;
};

// Elements [begin, end) of the parameter/gradient memory.
struct ParameterRegion {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

}  // namespace collage
