#pragma once
// BERT and RoBERTa: the bidirectional encoders of the Collage paper's first experiments,
// written once against BackendT<Storage> like the GPT (BertT<bf16> trains, BertT<float> runs
// the same code at fp32 for the PyTorch-fixture and finite-difference tests).
//
//   embeddings  x = LN(word[ids] + position[pos] + token_type[segments]), dropout
//   block       x = LN1(x + dropout(proj(attention(x, padding mask))))
//               x = LN2(x + dropout(fc2(gelu(fc1(x)))))          post-LayerNorm, erf GELU
//   MLM head    rows at the masked positions: LN(gelu(dense(x))) · wordᵀ + decoder bias
//   BERT only   pooler tanh(dense(x[CLS])) and the next-sentence classifier; loss MLM + NSP
// Inference (forward()'s comment): without MLM labels the head runs on every position of every
// row and without NSP labels the classifier still runs; neither computes a loss.
// RoBERTa (arch roberta): one token type, no pooler or NSP, positions offset past the padding
// id (pad_token_id + cumulative count of real tokens; padding tokens sit at pad_token_id), as
// the reference model computes them. Dropout masks come from a counter-based RNG
// (Philox, src/numerics/elementwise_math.h) keyed by a seed and each element's index, so every
// backend draws the same masks and a resumed run replays them.
//
// Parameter table (shapes per rank, PyTorch [out, in]; C hidden, F ffn, Vp padded vocab,
// tp tensor-parallel size; the split in brackets, parameter_info.h):
//   embeddings.word.weight        (Vp/tp, C)  [rows] also the MLM decoder's weight (tied)
//   embeddings.position.weight    (max_position_embeddings, C)
//   embeddings.token_type.weight  (type_vocab_size, C)
//   embeddings.ln.weight/bias     (C)
//   h.{l}.attn.qkv.weight/bias    (3C/tp, C), (3C/tp)  [qkv_rows] rows [q | k | v] of the
//                                                       rank's heads, head h at [h·HS, (h+1)·HS)
//   h.{l}.attn.proj.weight/bias   (C, C/tp) [columns], (C)
//   h.{l}.ln_1.weight/bias        (C)       after the attention residual
//   h.{l}.mlp.fc1.weight/bias     (F/tp, C), (F/tp)  [rows]
//   h.{l}.mlp.fc2.weight/bias     (C, F/tp) [columns], (C)
//   h.{l}.ln_2.weight/bias        (C)       after the MLP residual
//   mlm.dense.weight/bias         (C, C), (C)
//   mlm.ln.weight/bias            (C)
//   mlm.decoder.bias              (Vp/tp)   [rows] with the vocabulary
//   pooler.dense.weight/bias      (C, C), (C)    BERT only
//   nsp.weight/bias               (2, C), (2)    BERT only
// Unbracketed tensors are replicated. Vocab padding rows (ids >= vocab_size) start at zero and
// never receive a gradient.
//
// Tensor parallelism (tp > 1) is the GPT's (gpt.h, docs/PARALLEL.md §3), Megatron's split: QKV
// (by heads) and fc1 are column-parallel; proj and fc2 row-parallel, one all-reduce of their output
// in the forward (the replicated bias added by TP rank 0) and one of the column-parallel layers'
// input gradients in the backward. The word embedding is vocab-parallel (masked lookup +
// all-reduce) and so are the tied MLM decoder and its loss (all-reduced row max, Σ exp and target
// logit). Everything else (embedding layernorm, positions and token types, the MLM transform,
// pooler and NSP) runs whole on every rank on replicated activations. Dropout draws the masks of
// tp = 1: hidden dropout acts on replicated (N, C) tensors, and attention dropout numbers each
// probability by its global head. The replicated tensors sit behind the sharded ones in memory
// (replicated_region()); all_reduce_replicated_gradients() averages their gradients once a step.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "config/config.h"
#include "dist/comm.h"
#include "model/language_model.h"
#include "model/parameter_info.h"
#include "model/transformer_model.h"

namespace collage {

// The parameter table of a BERT or RoBERTa config split tp ways (validates it; no backend
// needed).
std::vector<ParameterInfo> bert_parameter_table(const ModelConfig& config, int tp = 1);

// One micro-batch as the HDF5 files hold it, on the host, row-major (batch.h's masked_lm fields;
// next_sentence_labels may be null for RoBERTa). forward() also takes one without labels.
using BertInputs = Batch;

template <typename Storage>
class BertT : public TransformerModelT<Storage, MaskedLanguageModelT<Storage>> {
  using Base = TransformerModelT<Storage, MaskedLanguageModelT<Storage>>;

 public:
  // Σ MLM token losses and their count; Σ NSP sequence losses (BERT) and their count.
  using Loss = typename MaskedLanguageModelT<Storage>::Loss;

  // micro_batch: the largest B forward() accepts; seq_len: the T every forward uses;
  // max_predictions: P, the labelled positions per sequence. Parameters start at zero: call
  // init_weights or load_parameters. layout, tensor_parallel and memory_multiple as GptT's:
  // tp > 1 needs the TP group's Comm on this backend's memory (outliving the model), and the
  // parameter/gradient memory holds num_parameters() rounded up to memory_multiple (zeros
  // behind).
  BertT(const ModelConfig& config, BackendT<Storage>& backend, int micro_batch, int seq_len,
        int max_predictions, ParallelLayout layout = {}, Comm* tensor_parallel = nullptr,
        int64_t memory_multiple = 1);

  // The activation_bytes() such a model allocates, without a backend (`collage plan`): the
  // same activation plan run on a counting Arena. Validates the config like the table.
  static size_t planned_activation_bytes(const ModelConfig& config, int micro_batch, int seq_len,
                                         int max_predictions, int tp = 1);
  ~BertT();  // in bert.cpp, where Activations is complete
  BertT(const BertT&) = delete;
  BertT& operator=(const BertT&) = delete;

  // BERT's init: N(0, init_std) for weights and embeddings, layernorms 1, biases 0, vocab
  // padding rows 0; per-tensor streams as the GPT's (model/weight_init.h), drawn for the whole
  // tensor, so the values do not depend on tp (each rank takes its shard).
  void init_weights(uint64_t seed) override;

  // One micro-batch. dropout: whether to drop (training) and the key of this micro-batch's
  // masks; its masks depend on (dropout_seed, dropout_index) only, so give each micro-batch a
  // distinct index (the trainer: its first sample's index).
  // Inference, for checks against other implementations (a masked position 0 ends a row's
  // labels, so the labelled rows never reach [CLS]): masked_lm_positions and masked_lm_ids both
  // null predict at every position, row b·T + t of mlm_logits() being (b, t), without MLM loss
  // (the model needs max_predictions = seq_len, the rows it has room for); BERT with null
  // next_sentence_labels computes nsp_logits() without NSP loss. backward(), mlm_correct() and
  // nsp_correct() need the labels of the heads the model has.
  Loss forward(const BertInputs& batch, int B, bool dropout, uint64_t dropout_seed = 0,
               uint64_t dropout_index = 0) override;
  // Accumulates the gradient of dloss_mlm · Σ MLM token losses + dloss_nsp · Σ NSP losses of the
  // last forward (which had every label) into gradient_memory().
  void backward(float dloss_mlm, float dloss_nsp) override;

  // Of the last forward: how many labelled tokens (and, BERT, sequences) the model predicted
  // right (argmax over the real vocabulary, the first of equal maxima). Copies the logits to the
  // host: for evaluation. Under TP the argmax spans every rank's shard (two all-reduces of M
  // floats, so every TP rank must call mlm_correct() together) and every rank gets the count.
  int64_t mlm_correct() const override;
  int64_t nsp_correct() const override;
  // The last forward's MLM logits, (M, Vp/tp) on the device: M labelled rows in batch order
  // (without labels M = B·T, every position), this rank's vocabulary columns
  // [tp_rank·Vp/tp, (tp_rank + 1)·Vp/tp).
  const Storage* mlm_logits() const;
  // The last forward's NSP logits, (B, 2) on the device, [is next, random], replicated over TP
  // ranks; null for an architecture without the head (RoBERTa).
  const Storage* nsp_logits() const;

  int max_predictions() const { return max_predictions_; }

 private:
  struct LayerWeights {
    Storage *qkv_w, *qkv_b, *proj_w, *proj_b, *ln1_w, *ln1_b;
    Storage *fc1_w, *fc1_b, *fc2_w, *fc2_b, *ln2_w, *ln2_b;
  };
  struct Weights {  // views into parameter or gradient memory
    Storage *word, *position, *token_type, *emb_ln_w, *emb_ln_b;
    std::vector<LayerWeights> layers;
    Storage *mlm_dense_w, *mlm_dense_b, *mlm_ln_w, *mlm_ln_b, *decoder_b;
    Storage *pooler_w = nullptr, *pooler_b = nullptr, *nsp_w = nullptr, *nsp_b = nullptr;
  };
  struct LayerActivations {  // per rank: NH/tp heads, F/tp ffn columns
    Storage* qkv;            // (N, 3C/tp)
    Storage* atty;           // (N, C/tp)
    float* lse;              // (B, NH/tp, T)
    Storage* res1;           // (N, C) x + attention branch
    Storage* ln1;            // (N, C)
    float *ln1_mean, *ln1_rstd;
    Storage* fch;       // (N, F/tp)
    Storage* fch_gelu;  // (N, F/tp)
    Storage* res2;      // (N, C) ln1 + MLP branch
    Storage* ln2;       // (N, C) the layer's output
    float *ln2_mean, *ln2_rstd;
  };
  struct Activations;

  Weights bind_weights(Storage* base) const;
  // Carves every activation buffer from `arena` (a counting Arena only sizes them).
  static void plan_activations(const ModelConfig& config, int micro_batch, int seq_len,
                               int max_predictions, int tp, Arena& arena, Activations& acts);
  // Dropout of n elements of `site` in this micro-batch, in place; backward: dinp = the same
  // mask applied to dout. Identity (a copy in the backward) when dropout is off or p = 0.
  void dropout_forward(Storage* x, int64_t n, float p, int site);
  void dropout_backward(Storage* dinp, const Storage* dout, int64_t n, float p, int site);
  uint64_t dropout_offset(int site) const;
  // Layer l's attention over this rank's heads, with the dropout masks of tp = 1.
  void attention_forward(LayerActivations& la, int B, int l);
  void attention_backward(const LayerActivations& la, int B, int l);

  // The shared members this class uses (transformer_model.h).
  using Base::backend_, Base::config_, Base::layout_, Base::micro_batch_, Base::seq_len_;
  using Base::C_, Base::NH_, Base::HS_, Base::V_, Base::Vp_, Base::local_heads_, Base::local_ffn_,
      Base::vocab_begin_, Base::vocab_end_;
  using Base::table_, Base::num_parameters_, Base::params_, Base::grads_, Base::tp_comm_,
      Base::all_reduce_tp;
  int max_predictions_;
  bool nsp_;                     // BERT: pooler + NSP head
  bool positions_past_padding_;  // RoBERTa: positions start at pad_token_id + 1
  Weights weights_, grad_weights_;
  std::unique_ptr<Activations> acts_;

  // the last forward
  int last_B_ = 0, last_rows_ = 0;  // batch size, MLM rows (labelled, or B·T without labels)
  bool last_mlm_labels_ = false, last_nsp_labels_ = false;  // whether it computed each loss
  bool last_dropout_ = false;
  uint64_t dropout_seed_ = 0, dropout_index_ = 0;
  std::vector<int32_t> host_mlm_targets_, host_nsp_targets_;
};

using BERT = BertT<bf16>;

extern template class BertT<bf16>;
extern template class BertT<float>;

}  // namespace collage
