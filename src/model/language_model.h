#pragma once
// What a training task drives, per objective (config/architecture.h): a causal language model
// (next_token) or a masked one (masked_lm). A model family (model_family.h) makes one; the
// tasks in src/train, bench, generate and eval use these interfaces and never a model class,
// so a new architecture with an existing objective needs no code outside src/model.
#include <cstdint>

#include "model/batch.h"
#include "model/trainable_model.h"

namespace collage {

template <typename Storage>
class CausalLanguageModelT : public TrainableModelT<Storage> {
 public:
  struct Loss {
    double sum = 0;     // sum of per-token losses
    int64_t count = 0;  // number of non-ignored targets
  };
  // One micro-batch of B <= micro_batch() rows: batch.input_ids and batch.targets (B, T), T =
  // seq_len(); null targets compute the logits only (no loss, backward not allowed).
  virtual Loss forward(const Batch& batch, int B) = 0;
  // Accumulates the gradient of dloss · Σ token losses of the last forward (which needs
  // targets) into gradient_memory(); dloss = 1 / count gives the mean loss's gradient.
  virtual void backward(float dloss) = 0;
  // (B·T, Vp/tp) on the device: the last forward's logits, this rank's vocabulary columns.
  virtual const Storage* logits() const = 0;
};

template <typename Storage>
class MaskedLanguageModelT : public TrainableModelT<Storage> {
 public:
  struct Loss {
    double mlm_sum = 0;  // Σ MLM token losses
    int64_t mlm_count = 0;
    double nsp_sum = 0;  // Σ next-sentence losses (an architecture with that head)
    int64_t nsp_count = 0;
  };
  // One micro-batch of B <= micro_batch() rows. dropout: whether to drop (training) and the
  // key of this micro-batch's masks, which depend on (dropout_seed, dropout_index) only.
  virtual Loss forward(const Batch& batch, int B, bool dropout, uint64_t dropout_seed = 0,
                       uint64_t dropout_index = 0) = 0;
  // Accumulates the gradient of dloss_mlm · Σ MLM losses + dloss_nsp · Σ NSP losses.
  virtual void backward(float dloss_mlm, float dloss_nsp) = 0;
  // Of the last forward: the labelled tokens (and sequences) predicted right. Every
  // tensor-parallel rank calls them together.
  virtual int64_t mlm_correct() const = 0;
  virtual int64_t nsp_correct() const = 0;
};

using CausalLanguageModel = CausalLanguageModelT<bf16>;
using MaskedLanguageModel = MaskedLanguageModelT<bf16>;

}  // namespace collage
