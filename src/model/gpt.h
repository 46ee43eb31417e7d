#pragma once
// GPT: decoder-only transformer, pre-LayerNorm, GELU (tanh), causal multi-head attention,
// learned or rotary positions, tied or untied output head, biases everywhere except the
// head. Written once against BackendT<Storage>; GPT = GptT<bf16> trains, GptT<float> runs
// the same code at fp32 for finite-difference tests.
//
// Parameter table (names GPT-2-like, shapes per rank, PyTorch [out, in]; C hidden,
// F ffn, Vp padded vocab, T_max max_position_embeddings, tp tensor-parallel size):
//   wte.weight              (Vp/tp, C)   token embedding; also the head when tied
//   wpe.weight              (T_max, C)   learned positions only
//   h.{l}.ln_1.weight/bias  (C)
//   h.{l}.attn.qkv.weight   (3C/tp, C)   rows [q | k | v], head h at [h·HS, (h+1)·HS)
//   h.{l}.attn.qkv.bias     (3C/tp)
//   h.{l}.attn.proj.weight  (C, C/tp)
//   h.{l}.attn.proj.bias    (C)
//   h.{l}.ln_2.weight/bias  (C)
//   h.{l}.mlp.fc1.weight    (F/tp, C)     h.{l}.mlp.fc1.bias  (F/tp)
//   h.{l}.mlp.fc2.weight    (C, F/tp)     h.{l}.mlp.fc2.bias  (C)
//   ln_f.weight/bias        (C)
//   lm_head.weight          (Vp/tp, C)   untied only
// Padding rows of wte/lm_head (token ids >= vocab_size) are initialised to zero; they never
// receive a gradient (tokens are checked < vocab_size and the loss ignores padding columns).
//
// Tensor parallelism (tp > 1, Megatron's, docs/PARALLEL.md §3): QKV (by heads) and fc1 are
// column-parallel, attention proj and fc2 row-parallel with one all-reduce of their output in
// the forward (the replicated bias added by TP rank 0 only) and one of the column-parallel
// inputs' gradients in the backward; the embedding is vocab-parallel (masked lookup + all-reduce,
// wpe added by rank 0) and so is the loss (all-reduced row max, Σ exp and target logit). The
// replicated tensors sit behind the sharded ones in memory (replicated_region()); their
// gradients are all-reduced once per step by all_reduce_replicated_gradients().
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "config/config.h"
#include "dist/comm.h"
#include "model/gpt_activations.h"
#include "model/parameter_info.h"
#include "model/parameter_table.h"
#include "model/trainable_model.h"

namespace collage {

// The parameter table of a GPT split tp ways (validates the config; no backend needed).
std::vector<ParameterInfo> gpt_parameter_table(const ModelConfig& config, int tp = 1);

template <typename Storage>
class GptT : public TrainableModelT<Storage> {
 public:
  struct Loss {
    double sum = 0;     // sum of per-token losses
    int64_t count = 0;  // number of non-ignored targets
  };

  // micro_batch: the largest B forward() accepts; seq_len: the T every forward uses.
  // Allocates the parameter, gradient and activation arenas from `backend`, which must
  // outlive the model. Parameters start at zero: call init_weights or load_parameters.
  // tp > 1 needs `tensor_parallel`, the TP group's Comm on this backend's memory (it must
  // outlive the model). memory_multiple: the parameter and gradient memory holds
  // num_parameters() rounded up to a multiple of it (zeros behind), so that ZeRO-1 can cut it
  // into equal shards.
  GptT(const ModelConfig& config, BackendT<Storage>& backend, int micro_batch, int seq_len,
       ParallelLayout layout = {}, Comm* tensor_parallel = nullptr, int64_t memory_multiple = 1);

  // The parameter table without a backend (shapes per rank of a tp-way split).
  static std::vector<ParameterInfo> parameter_table(const ModelConfig& config, int tp = 1);

  const std::vector<ParameterInfo>& parameters() const override { return table_; }
  int64_t num_parameters() const override { return num_parameters_; }
  // num_parameters() rounded up to the constructor's memory_multiple: the elements of
  // parameter_memory() and gradient_memory().
  int64_t memory_elements() const override { return memory_elements_; }
  // The replicated tensors' elements (empty at tp = 1).
  ParameterRegion replicated_region() const override { return replicated_; }
  Storage* parameter_memory() override { return params_; }
  Storage* gradient_memory() override { return grads_; }
  const Storage* parameter_memory() const override { return params_; }
  const Storage* gradient_memory() const { return grads_; }

  // GPT-2/Megatron init: N(0, init_std); attn proj and fc2 weights N(0, init_std/√(2L));
  // layernorm weights 1, biases 0, padding vocab rows 0. Values come from a seeded
  // mt19937_64 per tensor (Box-Muller), are rounded to bf16 for every Storage, and do not
  // depend on tp (each rank takes its shard of the full tensor).
  void init_weights(uint64_t seed) override;
  void load_parameters(const float* host_values);  // num_parameters() floats, table order
  void save_parameters(float* host_values) const;

  // One micro-batch. tokens, targets: host (B, T) int32, B <= micro_batch, T == seq_len;
  // targets < 0 are ignored; targets may be nullptr (no loss, backward not allowed).
  Loss forward(const int32_t* tokens, const int32_t* targets, int B);
  // Gradient of dloss · Σ token losses of the last forward (which needs targets),
  // accumulated into gradient_memory(): over micro-batches, call forward + backward for each
  // and zero_gradients() once per step. dloss = 1 / count gives the mean loss's gradient.
  void backward(float dloss);
  void zero_gradients() override;
  // tp > 1: the gradients of the replicated tensors (layernorms, row-parallel biases, wpe),
  // averaged over the TP group once per step, after the last backward: every TP rank computes
  // them from the same replicated activations, and this keeps the copies identical.
  void all_reduce_replicated_gradients() override;

  const Storage* logits() const { return acts_.logits; }  // (B·T, Vp/tp) of the last forward

  size_t parameter_bytes() const override { return param_arena_->capacity(); }
  size_t gradient_bytes() const override { return grad_arena_->capacity(); }
  size_t activation_bytes() const override { return act_arena_->capacity(); }

  // The activation_bytes() a model of this shape (micro_batch × seq_len, split tp ways)
  // allocates, without a backend: the same activation plan run on a counting Arena. For
  // memory planning (`collage plan`); validates the config like parameter_table().
  static size_t planned_activation_bytes(const ModelConfig& config, int micro_batch, int seq_len,
                                         int tp = 1);

  const ModelConfig& config() const override { return config_; }
  const ParallelLayout& layout() const override { return layout_; }
  int micro_batch() const override { return micro_batch_; }
  int seq_len() const override { return seq_len_; }

 private:
  struct LayerWeights {
    Storage *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    Storage *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
  };
  struct Weights {  // views into parameter or gradient memory
    Storage* wte = nullptr;
    Storage* wpe = nullptr;  // null with rope
    std::vector<LayerWeights> layers;
    Storage *lnf_w = nullptr, *lnf_b = nullptr;
    Storage* head = nullptr;  // wte when tied, lm_head otherwise
  };
  Weights bind_weights(Storage* base) const;
  // Carves every activation buffer from `arena` (a counting Arena only sizes them).
  static GptActivations<Storage> plan_activations(const ModelConfig& config, int micro_batch,
                                                  int seq_len, int tp, Arena& arena);
  void check_tokens(const int32_t* tokens, const int32_t* targets, int B) const;
  // Sums `data` over the TP group (a no-op at tp = 1).
  void all_reduce_tp(Storage* data, int64_t n);

  ModelConfig config_;
  BackendT<Storage>& backend_;
  int micro_batch_, seq_len_;
  ParallelLayout layout_;
  Comm* tp_comm_ = nullptr;
  bool rope_;
  int C_, NH_, HS_, F_, V_, Vp_;     // full sizes
  int local_heads_, local_ffn_;      // per-rank sizes
  int64_t vocab_begin_, vocab_end_;  // this rank's rows of the padded vocab

  std::vector<ParameterInfo> table_;
  int64_t num_parameters_ = 0;
  int64_t memory_elements_ = 0;
  ParameterRegion replicated_;
  std::unique_ptr<Arena> param_arena_, grad_arena_, act_arena_;
  Storage* params_ = nullptr;
  Storage* grads_ = nullptr;
  Weights weights_, grad_weights_;
  GptActivations<Storage> acts_;

  int last_B_ = 0;  // the last forward's batch size; 0: no forward with targets yet
};

using GPT = GptT<bf16>;

extern template class GptT<bf16>;
extern template class GptT<float>;

}  // namespace collage
