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
#include "model/language_model.h"
#include "model/parameter_info.h"
#include "model/parameter_table.h"
#include "model/transformer_model.h"

namespace collage {

// The parameter table of a GPT split tp ways (validates the config; no backend needed).
std::vector<ParameterInfo> gpt_parameter_table(const ModelConfig& config, int tp = 1);

template <typename Storage>
class GptT : public TransformerModelT<Storage, CausalLanguageModelT<Storage>> {
  using Base = TransformerModelT<Storage, CausalLanguageModelT<Storage>>;

 public:
  using Loss = typename CausalLanguageModelT<Storage>::Loss;  // Σ token losses and their count

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

  // GPT-2/Megatron init: N(0, init_std); attn proj and fc2 weights N(0, init_std/√(2L));
  // layernorm weights 1, biases 0, padding vocab rows 0. Values come from a seeded
  // mt19937_64 per tensor (Box-Muller), are rounded to bf16 for every Storage, and do not
  // depend on tp (each rank takes its shard of the full tensor).
  void init_weights(uint64_t seed) override;

  // One micro-batch. tokens, targets: host (B, T) int32, B <= micro_batch, T == seq_len;
  // targets < 0 are ignored; targets may be nullptr (no loss, backward not allowed).
  Loss forward(const int32_t* tokens, const int32_t* targets, int B);
  Loss forward(const Batch& batch, int B) override {
    return forward(batch.input_ids, batch.targets, B);
  }
  // Gradient of dloss · Σ token losses of the last forward (which needs targets),
  // accumulated into gradient_memory(): over micro-batches, call forward + backward for each
  // and zero_gradients() once per step. dloss = 1 / count gives the mean loss's gradient.
  void backward(float dloss) override;

  // (B·T, Vp/tp) of the last forward.
  const Storage* logits() const override { return acts_.logits; }

  // The activation_bytes() a model of this shape (micro_batch × seq_len, split tp ways)
  // allocates, without a backend: the same activation plan run on a counting Arena. For
  // memory planning (`collage plan`); validates the config like parameter_table().
  static size_t planned_activation_bytes(const ModelConfig& config, int micro_batch, int seq_len,
                                         int tp = 1);

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

  // The shared members this class uses (transformer_model.h).
  using Base::backend_, Base::config_, Base::layout_, Base::micro_batch_, Base::seq_len_;
  using Base::C_, Base::HS_, Base::V_, Base::Vp_, Base::local_heads_, Base::local_ffn_,
      Base::vocab_begin_, Base::vocab_end_;
  using Base::table_, Base::num_parameters_, Base::params_, Base::grads_, Base::tp_comm_,
      Base::all_reduce_tp;
  bool rope_;
  Weights weights_, grad_weights_;
  GptActivations<Storage> acts_;

  int last_B_ = 0;  // the last forward's batch size; 0: no forward with targets yet
};

using GPT = GptT<bf16>;

extern template class GptT<bf16>;
extern template class GptT<float>;

}  // namespace collage
