// Parameter tables of any architecture (parameter_table.h).
#include "model/parameter_table.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "model/trainable_model.h"

namespace collage {

void ParameterTableBuilder::add(std::string name, std::vector<int64_t> full_shape,
                                TensorSplit split, bool weight_decay) {
  std::vector<int64_t> shape = full_shape;
  if (split == TensorSplit::rows || split == TensorSplit::qkv_rows) shape[0] /= tp_;
  if (split == TensorSplit::columns) shape[1] /= tp_;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  table_.push_back({std::move(name), shape, numel, 0, weight_decay, split, full_shape});
}

void ParameterTableBuilder::linear(const std::string& name, int64_t out, int64_t in,
                                   TensorSplit split) {
  add(name + ".weight", {out, in}, split, true);
  add(name + ".bias", {out}, split == TensorSplit::columns ? TensorSplit::replicated : split,
      false);
}

void ParameterTableBuilder::layernorm(const std::string& name, int64_t C) {
  add(name + ".weight", {C}, TensorSplit::replicated, false);
  add(name + ".bias", {C}, TensorSplit::replicated, false);
}

std::vector<ParameterInfo> ParameterTableBuilder::finish() {
  // tp = 1: memory in table order; tp > 1: the sharded tensors, then the replicated ones.
  const int passes = tp_ > 1 ? 2 : 1;
  int64_t next = 0;
  for (int pass = 0; pass < passes; pass++) {
    for (ParameterInfo& info : table_) {
      const bool replicated = info.split == TensorSplit::replicated;
      if (passes == 2 && replicated != (pass == 1)) continue;
      info.offset = next;
      next += info.numel;
    }
  }
  return std::move(table_);
}

ParameterRegion replicated_region(const std::vector<ParameterInfo>& table, int tp) {
  if (tp == 1) return {};
  ParameterRegion region{INT64_MAX, 0};
  for (const ParameterInfo& info : table) {
    if (info.split != TensorSplit::replicated) continue;
    region.begin = std::min(region.begin, info.offset);
    region.end = std::max(region.end, info.offset + info.numel);
  }
  return region.begin < region.end ? region : ParameterRegion{};
}

void check_transformer_shape(const ModelConfig& c) {
  COLLAGE_CHECK(c.n_layer >= 1, "model.n_layer: {} must be >= 1", c.n_layer);
  COLLAGE_CHECK(c.hidden_size >= 1 && c.n_head >= 1 && c.hidden_size % c.n_head == 0,
                "model.n_head: {} does not divide model.hidden_size {}", c.n_head, c.hidden_size);
  COLLAGE_CHECK(c.ffn() >= 1, "model.ffn_hidden_size: {} must be >= 0", c.ffn_hidden_size);
}

void check_tensor_parallel_split(const ModelConfig& c, int tp) {
  COLLAGE_CHECK(tp >= 1 && c.n_head % tp == 0,
                "parallel.tensor_parallel: {} does not divide model.n_head {}", tp, c.n_head);
  COLLAGE_CHECK(c.ffn() % tp == 0,
                "parallel.tensor_parallel: {} does not divide the ffn size {} "
                "(model.ffn_hidden_size)",
                tp, c.ffn());
}

void check_tensor_parallel_group(const char* model, const ParallelLayout& layout,
                                 const Comm* tensor_parallel) {
  COLLAGE_CHECK(layout.tp_rank >= 0 && layout.tp_rank < layout.tp,
                "{}: tensor-parallel rank {} outside [0, {})", model, layout.tp_rank, layout.tp);
  COLLAGE_CHECK(layout.tp == 1 || (tensor_parallel && tensor_parallel->size() == layout.tp &&
                                   tensor_parallel->rank() == layout.tp_rank),
                "{}: parallel.tensor_parallel {} needs the tensor-parallel group's Comm of {} "
                "ranks with this rank {} in it",
                model, layout.tp, layout.tp, layout.tp_rank);
}

ParameterMemorySize parameter_memory_size(const std::vector<ParameterInfo>& table, int tp,
                                          int64_t memory_multiple, const char* model) {
  COLLAGE_CHECK(memory_multiple >= 1, "{}: memory multiple {} must be >= 1", model,
                memory_multiple);
  ParameterMemorySize size;
  for (const ParameterInfo& info : table) size.num_parameters += info.numel;
  size.memory_elements = padded_parameter_elements(size.num_parameters, memory_multiple);
  size.replicated = replicated_region(table, tp);
  return size;
}

}  // namespace collage
