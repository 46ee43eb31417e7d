#pragma once
// What every model class shares, written once: the parameter and gradient memory (one arena
// each, laid out by the parameter table), the activation arena, the tensor-parallel layout
// with its share of heads, ffn columns and vocabulary rows, and the TrainableModel plumbing
// (sizes, loading, saving, zeroing, the replicated gradients' all-reduce). GptT (gpt.h) and
// BertT (bert.h) derive from it and add their weights, activations, forward and backward.
//
// Interface is the objective's model interface (language_model.h). A derived class template
// names the members it uses with a using-declaration (they sit in a dependent base).
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "config/config.h"
#include "dist/comm.h"
#include "model/parameter_info.h"

namespace collage {

template <typename Storage, typename Interface>
class TransformerModelT : public Interface {
 public:
  const std::vector<ParameterInfo>& parameters() const override { return table_; }
  int64_t num_parameters() const override { return num_parameters_; }
  int64_t memory_elements() const override { return memory_elements_; }
  ParameterRegion replicated_region() const override { return replicated_; }
  Storage* parameter_memory() override { return params_; }
  const Storage* parameter_memory() const override { return params_; }
  Storage* gradient_memory() override { return grads_; }
  const Storage* gradient_memory() const { return grads_; }
  size_t parameter_bytes() const override { return param_arena_->capacity(); }
  size_t gradient_bytes() const override { return grad_arena_->capacity(); }
  size_t activation_bytes() const override { return act_arena_->capacity(); }
  const ModelConfig& config() const override { return config_; }
  const ParallelLayout& layout() const override { return layout_; }
  int micro_batch() const override { return micro_batch_; }
  int seq_len() const override { return seq_len_; }

  // This rank's shards: num_parameters() floats, each tensor at its table offset.
  void load_parameters(const float* host_values);
  void save_parameters(float* host_values) const;
  void zero_gradients() override;
  // tp > 1: the gradients of the replicated tensors (layernorms, row-parallel biases, the
  // tables every rank holds), averaged over the TP group once per step after the last backward:
  // every TP rank computes them from the same replicated activations, and this keeps the copies
  // identical.
  void all_reduce_replicated_gradients() override;

 protected:
  // `table`: the model's parameter table split layout.tp ways (which validated the config);
  // `model` names the class in errors ("GPT"). Checks the TP group and the micro-batch, then
  // allocates the parameter and gradient memory (zero). tp > 1 needs `tensor_parallel`, the TP
  // group's Comm on this backend's memory (outliving the model); the memory holds
  // num_parameters() rounded up to memory_multiple elements (zeros behind) for ZeRO-1.
  TransformerModelT(const ModelConfig& config, BackendT<Storage>& backend, int micro_batch,
                    int seq_len, ParallelLayout layout, Comm* tensor_parallel,
                    int64_t memory_multiple, std::vector<ParameterInfo> table, const char* model);
  // The derived class's activation arena, once it knows its size.
  void allocate_activations(size_t bytes);
  // Sums `data` over the TP group (a no-op at tp = 1).
  void all_reduce_tp(Storage* data, int64_t n);

  ModelConfig config_;
  BackendT<Storage>& backend_;
  int micro_batch_, seq_len_;
  ParallelLayout layout_;
  Comm* tp_comm_ = nullptr;
  int C_, NH_, HS_, F_, V_, Vp_;     // full sizes (Vp_: the vocabulary padded for tp)
  int local_heads_, local_ffn_;      // per-rank sizes
  int64_t vocab_begin_, vocab_end_;  // this rank's rows of the padded vocabulary

  std::vector<ParameterInfo> table_;
  int64_t num_parameters_ = 0;
  int64_t memory_elements_ = 0;
  ParameterRegion replicated_;
  std::unique_ptr<Arena> param_arena_, grad_arena_, act_arena_;
  Storage* params_ = nullptr;
  Storage* grads_ = nullptr;
};

}  // namespace collage
