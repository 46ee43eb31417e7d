#pragma once
// Building a model's parameter table (parameter_info.h), the same for every architecture:
// tensors are added in table order with their whole shape and tensor-parallel split; each
// gets its per-rank shape and an offset into the contiguous memory. Under tensor parallelism
// the replicated tensors are placed behind the sharded ones (the table keeps its order), so
// their gradients are one all-reduce and the gradient norm and EDQ can count them on one rank
// only (docs/PARALLEL.md §3).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "dist/comm.h"
#include "model/parameter_info.h"

namespace collage {

class ParameterTableBuilder {
 public:
  explicit ParameterTableBuilder(int tp) : tp_(tp) {}
  void add(std::string name, std::vector<int64_t> full_shape, TensorSplit split, bool weight_decay);
  // A linear layer's `name`.weight (out, in), with weight decay, and `name`.bias (out), without:
  // the bias splits with the weight's rows, and is replicated when the weight is split by
  // columns (a row-parallel layer adds its bias once, after the all-reduce) or not at all.
  void linear(const std::string& name, int64_t out, int64_t in, TensorSplit split);
  // A layernorm's `name`.weight and `name`.bias (C), replicated, without weight decay.
  void layernorm(const std::string& name, int64_t C);
  std::vector<ParameterInfo> finish();  // assigns the offsets

 private:
  int tp_;
  std::vector<ParameterInfo> table_;
};

// Where a table's replicated tensors lie in memory: one region when tp > 1, empty at tp = 1.
ParameterRegion replicated_region(const std::vector<ParameterInfo>& table, int tp);

// What every model's table needs of its config: layers, heads that divide the hidden size, an
// ffn width. Throws Error naming the key.
void check_transformer_shape(const ModelConfig& config);

// Megatron's split needs tp to divide the heads and the ffn width: throws Error naming the keys.
void check_tensor_parallel_split(const ModelConfig& config, int tp);

// A model's place in its tensor-parallel group: the rank is in range, and tp > 1 comes with the
// group's Comm of tp ranks holding this rank. `model` names the model in the message.
void check_tensor_parallel_group(const char* model, const ParallelLayout& layout,
                                 const Comm* tensor_parallel);

// The sizes of a model's parameter (and gradient) memory for its table: the parameters, the
// elements allocated (rounded up to memory_multiple, zeros behind, for ZeRO-1's equal shards)
// and the replicated tensors' region.
struct ParameterMemorySize {
  int64_t num_parameters = 0;
  int64_t memory_elements = 0;
  ParameterRegion replicated;
};
ParameterMemorySize parameter_memory_size(const std::vector<ParameterInfo>& table, int tp,
                                          int64_t memory_multiple, const char* model);

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace collage
