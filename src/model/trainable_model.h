#pragma once
// What the trainer, the optimizer wiring, checkpoints and the memory report need of a model,
// whatever its architecture (GPT, BERT, RoBERTa): the parameter table, the contiguous
// parameter and gradient memory, the tensor-parallel layout and the arena sizes. The forward
// and backward differ per objective (language_model.h); src/train/*_task.cpp drive them.
#include <cstdint>
#include <vector>

#include "config/config.h"
#include "model/parameter_info.h"
#include "numerics/bf16.h"

namespace collage {

template <typename Storage>
class TrainableModelT {
 public:
  virtual ~TrainableModelT() = default;

  virtual const std::vector<ParameterInfo>& parameters() const = 0;
  virtual int64_t num_parameters() const = 0;
  // num_parameters() rounded up to the constructor's memory_multiple (ZeRO-1 cuts it into
  // equal shards): the elements of parameter_memory() and gradient_memory().
  virtual int64_t memory_elements() const = 0;
  // The tensors every tensor-parallel rank holds whole (empty at tp = 1).
  virtual ParameterRegion replicated_region() const = 0;
  virtual Storage* parameter_memory() = 0;
  virtual const Storage* parameter_memory() const = 0;
  virtual Storage* gradient_memory() = 0;

  virtual void init_weights(uint64_t seed) = 0;
  virtual void zero_gradients() = 0;
  // tp > 1: averages the replicated tensors' gradients over the TP group, once per step after
  // the last backward (a no-op at tp = 1).
  virtual void all_reduce_replicated_gradients() = 0;

  virtual const ModelConfig& config() const = 0;
  virtual const ParallelLayout& layout() const = 0;
  virtual int micro_batch() const = 0;
  virtual int seq_len() const = 0;
  virtual size_t parameter_bytes() const = 0;
  virtual size_t gradient_bytes() const = 0;
  virtual size_t activation_bytes() const = 0;
};

using TrainableModel = TrainableModelT<bf16>;

// The parameter table of config.arch split tp ways (validates the config; no backend needed;
// model_family.h).
std::vector<ParameterInfo> model_parameter_table(const ModelConfig& config, int tp = 1);

// The elements of parameter/gradient memory for num_parameters and a memory_multiple (>= 1).
inline int64_t padded_parameter_elements(int64_t num_parameters, int64_t memory_multiple) {
  return (num_parameters + memory_multiple - 1) / memory_multiple * memory_multiple;
}

}  // namespace collage
