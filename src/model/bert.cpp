// BERT / RoBERTa: activations, one micro-batch's forward and backward, accuracy (bert.h; the
// parameter table, views, init and load/save: bert_parameters.cpp).
#include "model/bert.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "config/architecture.h"
#include "core/error.h"
#include "model/parameter_table.h"
#include "model/vocab_parallel_loss.h"

namespace collage {

// Every activation and backward scratch buffer; N = B·T rows, M = B·P labelled rows at most
// (without labels M = B·T, which P = T makes room for).
// Shapes per rank: C3l = 3C/tp, Cl = C/tp, Fl = F/tp, Vl = Vp/tp.
template <typename Storage>
struct BertT<Storage>::Activations {
  int32_t *ids, *key_mask, *segments, *positions;  // (N) device copies
  int32_t *mlm_rows, *mlm_targets;                 // (M) rows of x, label ids
  int32_t *cls_rows, *nsp_targets;                 // (B)
  Storage* emb;                                    // (N, C) word + position + token type
  float *emb_mean, *emb_rstd;
  Storage* x0;  // (N, C) the embeddings' layernorm, dropped: layer 0's input
  std::vector<LayerActivations> layers;
  Storage* branch;  // (N, C) attention proj / fc2 output before the residual (scratch)
  // MLM head
  Storage *picked, *dense, *dense_gelu, *mlm_ln;  // (M, C)
  float *mlm_mean, *mlm_rstd;
  Storage* logits;  // (M, Vl)
  float* mlm_losses;
  // vocab-parallel cross-entropy (tp > 1 only): row max (M), Σ exp and target logit (2M), the
  // log-sum-exp the backward reads (M), and mlm_correct()'s all-reduced row values (M)
  float *row_max = nullptr, *row_sums = nullptr, *row_lse = nullptr, *argmax_scratch = nullptr;
  // NSP head (BERT)
  Storage *cls, *pooled_pre, *pooled;  // (B, C)
  Storage* nsp_logits;                 // (B, 2)
  float* nsp_losses;
  // backward scratch, written by the ops (dx, dres and ddense_gelu, which ops add into, are
  // zeroed first)
  Storage *dx, *dx_prev, *dres, *dbranch, *dln;  // (N, C)
  Storage* dqkv;                                 // (N, C3l)
  Storage* datty;                                // (N, Cl)
  Storage *dfch, *dfch_gelu;                     // (N, Fl)
  Storage* dlogits;                              // (M, Vl)
  Storage *dmlm_ln, *ddense_gelu, *ddense, *dpicked;
  Storage *dnsp_logits, *dpooled, *dpooled_pre, *dcls;
};

template <typename Storage>
BertT<Storage>::BertT(const ModelConfig& config, BackendT<Storage>& backend, int micro_batch,
                      int seq_len, int max_predictions, ParallelLayout layout,
                      Comm* tensor_parallel, int64_t memory_multiple)
    : Base(config, backend, micro_batch, seq_len, layout, tensor_parallel, memory_multiple,
           bert_parameter_table(config, layout.tp) /* validates the config and tp */, "BERT"),
      max_predictions_(max_predictions),
      nsp_(architecture(config).next_sentence),
      positions_past_padding_(architecture(config).positions_past_padding) {
  COLLAGE_CHECK(max_predictions >= 1 && max_predictions <= seq_len,
                "data.max_predictions: {} must be in [1, data.seq_len = {}]", max_predictions,
                seq_len);
  // RoBERTa's positions run up to pad_token_id + T.
  const int64_t positions_needed =
      positions_past_padding_ ? int64_t{seq_len} + config.pad_token_id + 1 : seq_len;
  COLLAGE_CHECK(seq_len >= 1 && positions_needed <= config.max_position_embeddings,
                "data.seq_len: {} needs {} positions, more than model.max_position_embeddings {}",
                seq_len, positions_needed, config.max_position_embeddings);
  weights_ = bind_weights(params_);
  grad_weights_ = bind_weights(grads_);
  acts_ = std::make_unique<Activations>();
  this->allocate_activations(
      planned_activation_bytes(config, micro_batch, seq_len, max_predictions, layout.tp));
  plan_activations(config, micro_batch, seq_len, max_predictions, layout.tp, *this->act_arena_,
                   *acts_);
}

template <typename Storage>
size_t BertT<Storage>::planned_activation_bytes(const ModelConfig& config, int micro_batch,
                                                int seq_len, int max_predictions, int tp) {
  bert_parameter_table(config, tp);  // validates the config and tp
  COLLAGE_CHECK(micro_batch >= 1 && seq_len >= 1 && max_predictions >= 1,
                "BERT activations: micro-batch {}, sequence length {} and max predictions {} "
                "must be >= 1",
                micro_batch, seq_len, max_predictions);
  Arena counting;
  Activations unused;
  plan_activations(config, micro_batch, seq_len, max_predictions, tp, counting, unused);
  return counting.used();
}

template <typename Storage>
BertT<Storage>::~BertT() = default;

template <typename Storage>
void BertT<Storage>::plan_activations(const ModelConfig& config, int micro_batch, int seq_len,
                                      int max_predictions, int tp, Arena& arena, Activations& a) {
  const int64_t N = int64_t{micro_batch} * seq_len, M = int64_t{micro_batch} * max_predictions;
  const int64_t B = micro_batch, C = config.hidden_size, T = seq_len;
  const int64_t C3l = 3 * C / tp, Cl = C / tp, Fl = config.ffn() / tp;
  const int64_t NHl = config.n_head / tp, Vl = config.padded_vocab(tp) / tp;
  auto take = [&](int64_t count) { return arena.take<Storage>(count); };
  auto take_f32 = [&](int64_t count) { return arena.take<float>(count); };
  auto take_i32 = [&](int64_t count) { return arena.take<int32_t>(count); };
  a.ids = take_i32(N), a.key_mask = take_i32(N), a.segments = take_i32(N);
  a.positions = take_i32(N);
  a.mlm_rows = take_i32(M), a.mlm_targets = take_i32(M);
  a.cls_rows = take_i32(B), a.nsp_targets = take_i32(B);
  a.emb = take(N * C), a.emb_mean = take_f32(N), a.emb_rstd = take_f32(N);
  a.x0 = take(N * C);
  a.layers.resize(config.n_layer);
  for (LayerActivations& l : a.layers) {
    l.qkv = take(N * C3l), l.atty = take(N * Cl), l.lse = take_f32(B * NHl * T);
    l.res1 = take(N * C), l.ln1 = take(N * C), l.ln1_mean = take_f32(N), l.ln1_rstd = take_f32(N);
    l.fch = take(N * Fl), l.fch_gelu = take(N * Fl);
    l.res2 = take(N * C), l.ln2 = take(N * C), l.ln2_mean = take_f32(N), l.ln2_rstd = take_f32(N);
  }
  a.branch = take(N * C);
  a.picked = take(M * C), a.dense = take(M * C), a.dense_gelu = take(M * C);
  a.mlm_ln = take(M * C), a.mlm_mean = take_f32(M), a.mlm_rstd = take_f32(M);
  a.logits = take(M * Vl), a.mlm_losses = take_f32(M), a.row_lse = take_f32(M);
  if (tp > 1) {
    a.row_max = take_f32(M), a.row_sums = take_f32(2 * M);
    a.argmax_scratch = take_f32(M);
  }
  a.cls = take(B * C), a.pooled_pre = take(B * C), a.pooled = take(B * C);
  a.nsp_logits = take(B * 2), a.nsp_losses = take_f32(B);
  a.dx = take(N * C), a.dx_prev = take(N * C), a.dres = take(N * C), a.dbranch = take(N * C);
  a.dln = take(N * C), a.dqkv = take(N * C3l), a.datty = take(N * Cl);
  a.dfch = take(N * Fl), a.dfch_gelu = take(N * Fl);
  a.dlogits = take(M * Vl);
  a.dmlm_ln = take(M * C), a.ddense_gelu = take(M * C), a.ddense = take(M * C);
  a.dpicked = take(M * C);
  a.dnsp_logits = take(B * 2), a.dpooled = take(B * C), a.dpooled_pre = take(B * C);
  a.dcls = take(B * C);
}

// Dropout sites of one micro-batch: 0 the embeddings; per layer 3l + 1 the attention
// probabilities, 3l + 2 the attention output, 3l + 3 the MLP output. Each site's elements are
// numbered from its own offset, micro-batches 2^40 apart.
template <typename Storage>
uint64_t BertT<Storage>::dropout_offset(int site) const {
  return (dropout_index_ << 40) + (uint64_t(site) << 32);
}

template <typename Storage>
void BertT<Storage>::dropout_forward(Storage* x, int64_t n, float p, int site) {
  if (!last_dropout_ || p == 0.0f) return;
  backend_.dropout_forward(x, x, n, p, dropout_seed_, dropout_offset(site));
}

template <typename Storage>
void BertT<Storage>::dropout_backward(Storage* dinp, const Storage* dout, int64_t n, float p,
                                      int site) {
  if (!last_dropout_ || p == 0.0f) {  // the identity: dinp = dout, as dropout_backward writes
    backend_.copy(dinp, dout, size_t(n) * sizeof(Storage));
    return;
  }
  backend_.dropout_backward(dinp, dout, n, p, dropout_seed_, dropout_offset(site));
}

// The attention op numbers probability (b, h, i, j) offset + ((b·NH + h)·T + i)·T + j with h
// counted among the heads it is given. At tp = 1 those are all heads, so one call draws the
// masks. A TP rank holds global heads [r·NHl, (r + 1)·NHl): called per sequence b (B = 1, on
// that sequence's slices), the op numbers (h_local·T + i)·T + j from its offset, and starting
// that offset at (b·NH + r·NHl)·T·T gives exactly the global index of tp = 1.
template <typename Storage>
void BertT<Storage>::attention_forward(LayerActivations& la, int B, int l) {
  const Activations& a = *acts_;
  const int T = seq_len_, NHl = local_heads_, HS = HS_;
  const float p = config_.attention_dropout;
  if (!last_dropout_ || p == 0.0f) {
    backend_.attention_forward(la.atty, la.lse, la.qkv, a.key_mask, false, B, T, NHl, HS);
    return;
  }
  const uint64_t site = dropout_offset(3 * l + 1);
  if (layout_.tp == 1) {
    backend_.attention_forward_dropout(la.atty, la.lse, la.qkv, a.key_mask, false, B, T, NHl, HS, p,
                                       dropout_seed_, site);
    return;
  }
  const int64_t C3l = 3 * int64_t{NHl} * HS, Cl = int64_t{NHl} * HS;
  for (int b = 0; b < B; b++) {
    const uint64_t first_head = uint64_t(b) * NH_ + uint64_t(layout_.tp_rank) * NHl;
    backend_.attention_forward_dropout(la.atty + b * T * Cl, la.lse + int64_t{b} * NHl * T,
                                       la.qkv + b * T * C3l, a.key_mask + int64_t{b} * T, false, 1,
                                       T, NHl, HS, p, dropout_seed_,
                                       site + first_head * uint64_t(T) * uint64_t(T));
  }
}

template <typename Storage>
void BertT<Storage>::attention_backward(const LayerActivations& la, int B, int l) {
  const Activations& a = *acts_;
  const int T = seq_len_, NHl = local_heads_, HS = HS_;
  const float p = config_.attention_dropout;
  if (!last_dropout_ || p == 0.0f) {
    backend_.attention_backward(a.dqkv, a.datty, la.atty, la.qkv, la.lse, a.key_mask, false, B, T,
                                NHl, HS);
    return;
  }
  const uint64_t site = dropout_offset(3 * l + 1);
  if (layout_.tp == 1) {
    backend_.attention_backward_dropout(a.dqkv, a.datty, la.atty, la.qkv, la.lse, a.key_mask, false,
                                        B, T, NHl, HS, p, dropout_seed_, site);
    return;
  }
  const int64_t C3l = 3 * int64_t{NHl} * HS, Cl = int64_t{NHl} * HS;
  for (int b = 0; b < B; b++) {  // per sequence, as attention_forward
    const uint64_t first_head = uint64_t(b) * NH_ + uint64_t(layout_.tp_rank) * NHl;
    backend_.attention_backward_dropout(
        a.dqkv + b * T * C3l, a.datty + b * T * Cl, la.atty + b * T * Cl, la.qkv + b * T * C3l,
        la.lse + int64_t{b} * NHl * T, a.key_mask + int64_t{b} * T, false, 1, T, NHl, HS, p,
        dropout_seed_, site + first_head * uint64_t(T) * uint64_t(T));
  }
}

template <typename Storage>
typename BertT<Storage>::Loss BertT<Storage>::forward(const BertInputs& batch, int B, bool dropout,
                                                      uint64_t dropout_seed,
                                                      uint64_t dropout_index) {
  COLLAGE_CHECK(B >= 1 && B <= micro_batch_, "BERT forward: batch {} outside [1, {}]", B,
                micro_batch_);
  COLLAGE_CHECK(batch.input_ids && batch.input_mask && batch.segment_ids,
                "BERT forward: the batch lacks input_ids, input_mask or segment_ids");
  // Without labels (inference, bert.h): every position, which needs room for T rows a sequence.
  const bool mlm_labels = batch.masked_lm_positions != nullptr;
  const bool nsp_labels = nsp_ && batch.next_sentence_labels != nullptr;
  COLLAGE_CHECK(mlm_labels == (batch.masked_lm_ids != nullptr),
                "BERT forward: masked_lm_positions and masked_lm_ids must both be given or both "
                "be null (logits at every position)");
  COLLAGE_CHECK(mlm_labels || max_predictions_ >= seq_len_,
                "BERT forward: logits at every position (no masked_lm_positions) need the model "
                "built with max_predictions {} >= seq_len {}",
                max_predictions_, seq_len_);
  const int T = seq_len_, P = max_predictions_, C = C_;
  const int C3l = 3 * C / layout_.tp, Cl = C / layout_.tp, Fl = local_ffn_;
  const int Vl = Vp_ / layout_.tp;
  const int64_t N = int64_t{B} * T;
  const float eps = config_.layernorm_eps;
  const Weights& w = weights_;
  Activations& a = *acts_;
  BackendT<Storage>& be = backend_;
  last_dropout_ = dropout;
  dropout_seed_ = dropout_seed;
  dropout_index_ = dropout_index;

  // Host side: check the ids, derive positions, the MLM head's rows and the [CLS] rows.
  std::vector<int32_t> positions(N), key_mask(N);
  for (int b = 0; b < B; b++) {
    int32_t real_tokens = 0;
    for (int t = 0; t < T; t++) {
      const int64_t i = int64_t{b} * T + t;
      COLLAGE_CHECK(batch.input_ids[i] >= 0 && batch.input_ids[i] < V_,
                    "BERT forward: token {} at ({}, {}) is outside the vocab [0, {})",
                    batch.input_ids[i], b, t, V_);
      COLLAGE_CHECK(batch.segment_ids[i] >= 0 && batch.segment_ids[i] < config_.type_vocab_size,
                    "BERT forward: segment id {} at ({}, {}) is outside [0, {})",
                    batch.segment_ids[i], b, t, config_.type_vocab_size);
      key_mask[i] = batch.input_mask[i] != 0;
      real_tokens += key_mask[i];
      // RoBERTa: real tokens count up from pad_token_id + 1, padding sits at pad_token_id.
      positions[i] = !positions_past_padding_ ? t
                     : key_mask[i]            ? config_.pad_token_id + real_tokens
                                              : config_.pad_token_id;
    }
  }
  std::vector<int32_t> rows, cls_rows(B);
  host_mlm_targets_.clear();
  for (int b = 0; b < B; b++) {
    cls_rows[b] = b * T;
    if (!mlm_labels) {  // every position, in batch order
      for (int t = 0; t < T; t++) rows.push_back(b * T + t);
      continue;
    }
    for (int k = 0; k < P; k++) {
      const int32_t position = batch.masked_lm_positions[int64_t{b} * P + k];
      if (position == 0) break;  // zero padding: the row's labels end here
      const int32_t label = batch.masked_lm_ids[int64_t{b} * P + k];
      COLLAGE_CHECK(position > 0 && position < T && label >= 0 && label < V_,
                    "BERT forward: masked position {} (label {}) of sequence {} is outside the "
                    "sequence [1, {}) or the vocab [0, {})",
                    position, label, b, T, V_);
      rows.push_back(b * T + position);
      host_mlm_targets_.push_back(label);
    }
  }
  const int M = int(rows.size());
  be.copy_to_device(a.ids, batch.input_ids, N * sizeof(int32_t));
  be.copy_to_device(a.key_mask, key_mask.data(), N * sizeof(int32_t));
  be.copy_to_device(a.segments, batch.segment_ids, N * sizeof(int32_t));
  be.copy_to_device(a.positions, positions.data(), N * sizeof(int32_t));
  if (M > 0) be.copy_to_device(a.mlm_rows, rows.data(), M * sizeof(int32_t));
  if (M > 0 && mlm_labels)
    be.copy_to_device(a.mlm_targets, host_mlm_targets_.data(), M * sizeof(int32_t));

  // Embeddings: three lookups summed, layernorm, dropout. The word lookup is vocab-parallel:
  // each rank fills the rows of the tokens it owns (zeros elsewhere), and the all-reduce, which
  // adds only zeros to each row, gives tp = 1's lookup exactly. The replicated positions and
  // token types are added after it, once, identically on every rank: the embeddings then equal
  // tp = 1's bit for bit (adding them on rank 0 before the all-reduce would round differently).
  be.embedding_forward(a.emb, a.ids, w.word, nullptr, B, T, C, vocab_begin_, vocab_end_);
  all_reduce_tp(a.emb, N * C);
  be.embedding_forward(a.branch, a.positions, w.position, nullptr, B, T, C, 0,
                       config_.max_position_embeddings);
  be.add(a.emb, a.emb, a.branch, N * C);
  be.embedding_forward(a.branch, a.segments, w.token_type, nullptr, B, T, C, 0,
                       config_.type_vocab_size);
  be.add(a.emb, a.emb, a.branch, N * C);
  be.layernorm_forward(a.x0, a.emb_mean, a.emb_rstd, a.emb, w.emb_ln_w, w.emb_ln_b, N, C, eps);
  dropout_forward(a.x0, N * C, config_.hidden_dropout, 0);

  // Row-parallel layers (proj, fc2) sum partial products over the TP ranks: the replicated
  // bias is added by rank 0 only.
  const bool add_bias = layout_.tp_rank == 0;
  const Storage* x = a.x0;  // (N, C) the layer's input, replicated
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerWeights& lw = w.layers[l];
    LayerActivations& la = a.layers[l];
    be.matmul_forward(la.qkv, x, lw.qkv_w, lw.qkv_b, N, C, C3l);  // (N, 3C/tp) this rank's heads
    attention_forward(la, B, l);                                  // atty (N, C/tp)
    be.matmul_forward(a.branch, la.atty, lw.proj_w, add_bias ? lw.proj_b : nullptr, N, Cl, C);
    all_reduce_tp(a.branch, N * C);  // (N, C) whole: dropout then draws tp = 1's mask
    dropout_forward(a.branch, N * C, config_.hidden_dropout, 3 * l + 2);
    be.residual_layernorm_forward(la.res1, la.ln1, la.ln1_mean, la.ln1_rstd, x, a.branch, lw.ln1_w,
                                  lw.ln1_b, N, C, eps);
    be.matmul_forward(la.fch, la.ln1, lw.fc1_w, lw.fc1_b, N, C, Fl);  // (N, F/tp)
    be.gelu_erf_forward(la.fch_gelu, la.fch, N * Fl);
    be.matmul_forward(a.branch, la.fch_gelu, lw.fc2_w, add_bias ? lw.fc2_b : nullptr, N, Fl, C);
    all_reduce_tp(a.branch, N * C);
    dropout_forward(a.branch, N * C, config_.hidden_dropout, 3 * l + 3);
    be.residual_layernorm_forward(la.res2, la.ln2, la.ln2_mean, la.ln2_rstd, la.ln1, a.branch,
                                  lw.ln2_w, lw.ln2_b, N, C, eps);
    x = la.ln2;
  }

  Loss loss;
  // MLM head on the labelled rows (every row without labels), replicated up to the decoder: the
  // word embedding (tied) plus its bias, both split by vocabulary rows, so each rank computes its
  // Vp/tp logit columns.
  if (M > 0) {
    be.gather_rows(a.picked, x, a.mlm_rows, M, C);
    be.matmul_forward(a.dense, a.picked, w.mlm_dense_w, w.mlm_dense_b, M, C, C);
    be.gelu_erf_forward(a.dense_gelu, a.dense, int64_t{M} * C);
    be.layernorm_forward(a.mlm_ln, a.mlm_mean, a.mlm_rstd, a.dense_gelu, w.mlm_ln_w, w.mlm_ln_b, M,
                         C, eps);
    be.matmul_forward(a.logits, a.mlm_ln, w.word, w.decoder_b, M, C, Vl);  // (M, Vp/tp)
  }
  if (M > 0 && mlm_labels) {
    vocab_parallel_cross_entropy(be, tp_comm_, layout_.tp, a.mlm_losses, a.row_lse, a.row_max,
                                 a.row_sums, a.logits, a.mlm_targets, M, V_, Vl, vocab_begin_);
    loss.mlm_sum = be.sum(a.mlm_losses, M);
    loss.mlm_count = M;
  }
  // NSP head on the [CLS] rows (BERT).
  host_nsp_targets_.clear();
  if (nsp_) {
    if (nsp_labels)
      host_nsp_targets_.assign(batch.next_sentence_labels, batch.next_sentence_labels + B);
    for (size_t b = 0; b < host_nsp_targets_.size(); b++)
      COLLAGE_CHECK(host_nsp_targets_[b] == 0 || host_nsp_targets_[b] == 1,
                    "BERT forward: next_sentence_label {} of sequence {} is not 0 or 1",
                    host_nsp_targets_[b], b);
    be.copy_to_device(a.cls_rows, cls_rows.data(), B * sizeof(int32_t));
    be.gather_rows(a.cls, x, a.cls_rows, B, C);
    be.matmul_forward(a.pooled_pre, a.cls, w.pooler_w, w.pooler_b, B, C, C);
    be.tanh_forward(a.pooled, a.pooled_pre, int64_t{B} * C);
    be.matmul_forward(a.nsp_logits, a.pooled, w.nsp_w, w.nsp_b, B, C, 2);
  }
  if (nsp_labels) {
    be.copy_to_device(a.nsp_targets, host_nsp_targets_.data(), B * sizeof(int32_t));
    be.cross_entropy_forward(a.nsp_losses, a.nsp_logits, a.nsp_targets, B, 2, 2);
    loss.nsp_sum = be.sum(a.nsp_losses, B);
    loss.nsp_count = B;
  }
  last_B_ = B;
  last_rows_ = M;
  last_mlm_labels_ = mlm_labels;
  last_nsp_labels_ = nsp_labels;
  return loss;
}

template <typename Storage>
void BertT<Storage>::backward(float dloss_mlm, float dloss_nsp) {
  COLLAGE_CHECK(last_B_ > 0, "BERT backward: no forward yet");
  COLLAGE_CHECK(last_mlm_labels_ && (!nsp_ || last_nsp_labels_),
                "BERT backward: the last forward had no {} labels, so no loss to differentiate",
                last_mlm_labels_ ? "next-sentence" : "masked-LM");
  const int B = last_B_, T = seq_len_, M = last_rows_, C = C_;
  const int C3l = 3 * C / layout_.tp, Cl = C / layout_.tp, Fl = local_ffn_;
  const int Vl = Vp_ / layout_.tp;
  const int64_t N = int64_t{B} * T;
  const Weights& w = weights_;
  const Weights& g = grad_weights_;
  Activations& a = *acts_;
  BackendT<Storage>& be = backend_;
  const size_t nc_bytes = size_t(N) * C * sizeof(Storage);

  // Each backward op writes its input's gradient, so only the buffers that ops add into are
  // zeroed: those of layernorm_backward and scatter_add_rows (backend.h).
  be.zero(a.dx, nc_bytes);  // gradient of the last layer's output: the heads' rows add into it
  if (M > 0) {
    be.zero(a.ddense_gelu, size_t(M) * C * sizeof(Storage));
    // dlogits from the forward's lse at any tp (vocab_parallel_loss.h).
    be.cross_entropy_shard_backward(a.dlogits, a.logits, a.mlm_targets, a.row_lse, M, V_, Vl,
                                    vocab_begin_, dloss_mlm);
    be.matmul_backward(a.dmlm_ln, g.word, g.decoder_b, a.dlogits, a.mlm_ln, w.word, M, C, Vl);
    all_reduce_tp(a.dmlm_ln, int64_t{M} * C);  // the decoder is column-parallel (vocab rows)
    be.layernorm_backward(a.ddense_gelu, g.mlm_ln_w, g.mlm_ln_b, a.dmlm_ln, a.dense_gelu,
                          w.mlm_ln_w, a.mlm_mean, a.mlm_rstd, M, C);
    be.gelu_backward_bias(a.ddense, g.mlm_dense_b, a.dense, a.ddense_gelu, M, C, /*exact=*/true);
    be.matmul_backward(a.dpicked, g.mlm_dense_w, nullptr, a.ddense, a.picked, w.mlm_dense_w, M, C,
                       C);
    be.scatter_add_rows(a.dx, a.dpicked, a.mlm_rows, M, C);
  }
  if (nsp_) {
    be.cross_entropy_backward(a.dnsp_logits, a.nsp_logits, a.nsp_targets, B, 2, 2, dloss_nsp);
    be.matmul_backward(a.dpooled, g.nsp_w, g.nsp_b, a.dnsp_logits, a.pooled, w.nsp_w, B, C, 2);
    be.tanh_backward(a.dpooled_pre, a.pooled, a.dpooled, int64_t{B} * C);
    be.matmul_backward(a.dcls, g.pooler_w, g.pooler_b, a.dpooled_pre, a.cls, w.pooler_w, B, C, C);
    be.scatter_add_rows(a.dx, a.dcls, a.cls_rows, B, C);
  }

  // Layers, last first. dx: the gradient of the layer's output (its ln2), whole on every rank.
  // The column-parallel layers (fc1, QKV) give partial input gradients: all-reduced before the
  // residual path's gradient is added.
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const LayerWeights& lw = w.layers[l];
    const LayerWeights& lg = g.layers[l];
    const LayerActivations& la = a.layers[l];
    const Storage* x_in = l == 0 ? a.x0 : a.layers[l - 1].ln2;
    be.zero(a.dres, nc_bytes);
    // x_out = LN2(res2), res2 = ln1 + dropout(fc2(gelu(fc1(ln1))))
    be.layernorm_backward(a.dres, lg.ln2_w, lg.ln2_b, a.dx, la.res2, lw.ln2_w, la.ln2_mean,
                          la.ln2_rstd, N, C);
    dropout_backward(a.dbranch, a.dres, N * C, config_.hidden_dropout, 3 * l + 3);
    be.matmul_backward(a.dfch_gelu, lg.fc2_w, lg.fc2_b, a.dbranch, la.fch_gelu, lw.fc2_w, N, Fl, C);
    // fc1's bias gradient (Σ_rows dfch) with the GELU's backward, in its pass over the rows.
    be.gelu_backward_bias(a.dfch, lg.fc1_b, la.fch, a.dfch_gelu, N, Fl, /*exact=*/true);
    be.matmul_backward(a.dln, lg.fc1_w, nullptr, a.dfch, la.ln1, lw.fc1_w, N, C, Fl);
    all_reduce_tp(a.dln, N * C);          // fc1 is column-parallel
    be.accumulate(a.dln, a.dres, N * C);  // the residual path
    // ln1 = LN1(res1), res1 = x_in + dropout(proj(attention(qkv(x_in))))
    be.zero(a.dres, nc_bytes);
    be.layernorm_backward(a.dres, lg.ln1_w, lg.ln1_b, a.dln, la.res1, lw.ln1_w, la.ln1_mean,
                          la.ln1_rstd, N, C);
    dropout_backward(a.dbranch, a.dres, N * C, config_.hidden_dropout, 3 * l + 2);
    be.matmul_backward(a.datty, lg.proj_w, lg.proj_b, a.dbranch, la.atty, lw.proj_w, N, Cl, C);
    attention_backward(la, B, l);  // dqkv (N, 3C/tp)
    be.matmul_backward(a.dx_prev, lg.qkv_w, lg.qkv_b, a.dqkv, x_in, lw.qkv_w, N, C, C3l);
    all_reduce_tp(a.dx_prev, N * C);          // QKV is column-parallel
    be.accumulate(a.dx_prev, a.dres, N * C);  // the residual path
    std::swap(a.dx, a.dx_prev);
  }

  // Embeddings: dx is the gradient of x0 = dropout(LN(emb)), whole on every rank; each rank
  // accumulates its own vocabulary rows of the word embedding.
  be.zero(a.dres, nc_bytes);
  dropout_backward(a.dln, a.dx, N * C, config_.hidden_dropout, 0);
  be.layernorm_backward(a.dres, g.emb_ln_w, g.emb_ln_b, a.dln, a.emb, w.emb_ln_w, a.emb_mean,
                        a.emb_rstd, N, C);
  be.embedding_backward(g.word, nullptr, a.dres, a.ids, B, T, C, vocab_begin_, vocab_end_);
  be.embedding_backward(g.position, nullptr, a.dres, a.positions, B, T, C, 0,
                        config_.max_position_embeddings);
  be.embedding_backward(g.token_type, nullptr, a.dres, a.segments, B, T, C, 0,
                        config_.type_vocab_size);
}

template <typename Storage>
const Storage* BertT<Storage>::mlm_logits() const {
  return acts_->logits;
}

template <typename Storage>
const Storage* BertT<Storage>::nsp_logits() const {
  return nsp_ ? acts_->nsp_logits : nullptr;
}

// argmax over the real vocabulary of each labelled row's logits (host copy), the first column
// of the row's maximum as at tp = 1. Under TP each rank holds some columns: the row maximum is
// all-reduced (max), then the smallest global column holding it (as −column, max-reduced), so
// ties across shards resolve as at tp = 1. Column ids are exact in fp32 (vocabularies < 2^24).
template <typename Storage>
int64_t BertT<Storage>::mlm_correct() const {
  const int M = last_rows_, Vl = Vp_ / layout_.tp;
  // Every TP rank saw the same batch: all throw or none, and no collective is skipped by one.
  COLLAGE_CHECK(last_B_ == 0 || last_mlm_labels_,
                "BERT mlm_correct: the last forward had no masked-LM labels");
  if (M == 0) return 0;
  std::vector<Storage> logits(size_t(M) * Vl);
  backend_.copy_to_host(logits.data(), acts_->logits, logits.size() * sizeof(Storage));
  auto value = [&](int r, int64_t j) {  // j: local column
    const Storage x = logits[size_t(r) * Vl + j];
    if constexpr (std::is_same_v<Storage, bf16>)
      return bf16_to_float(x);
    else
      return float(x);
  };
  // This rank's real columns: global ids [vocab_begin_, min(vocab_end_, V)).
  const int64_t real_columns = std::clamp<int64_t>(V_ - vocab_begin_, 0, Vl);
  std::vector<int64_t> best(M, -1);  // local column of the first maximum, -1 when none
  std::vector<float> row_value(M, -std::numeric_limits<float>::infinity());
  for (int r = 0; r < M; r++) {
    for (int64_t j = 0; j < real_columns; j++)
      if (best[r] < 0 || value(r, j) > value(r, best[r])) best[r] = j;
    if (best[r] >= 0) row_value[r] = value(r, best[r]);
  }
  std::vector<int64_t> argmax(M);
  if (layout_.tp == 1) {
    for (int r = 0; r < M; r++) argmax[r] = best[r];
  } else {
    // The comm works on this backend's memory: reduce through a device buffer.
    float* scratch = acts_->argmax_scratch;
    auto all_reduce_max = [&](std::vector<float>& host) {
      backend_.copy_to_device(scratch, host.data(), size_t(M) * sizeof(float));
      tp_comm_->all_reduce_max(scratch, M);
      backend_.copy_to_host(host.data(), scratch, size_t(M) * sizeof(float));
    };
    all_reduce_max(row_value);  // the row maximum over every shard
    for (int r = 0; r < M; r++) {
      float first = -std::numeric_limits<float>::infinity();  // no column here holds the max
      for (int64_t j = 0; j < real_columns; j++) {
        if (value(r, j) == row_value[r]) {
          first = -float(vocab_begin_ + j);
          break;
        }
      }
      row_value[r] = first;
    }
    all_reduce_max(row_value);  // −(smallest global column holding the maximum)
    for (int r = 0; r < M; r++) argmax[r] = int64_t(-row_value[r]);
  }
  int64_t correct = 0;
  for (int r = 0; r < M; r++) correct += argmax[r] == host_mlm_targets_[r];
  return correct;
}

// The NSP logits are replicated: every TP rank counts the same without communicating.
template <typename Storage>
int64_t BertT<Storage>::nsp_correct() const {
  if (!nsp_ || last_B_ == 0) return 0;
  COLLAGE_CHECK(last_nsp_labels_, "BERT nsp_correct: the last forward had no next-sentence labels");
  std::vector<Storage> logits(size_t(last_B_) * 2);
  backend_.copy_to_host(logits.data(), acts_->nsp_logits, logits.size() * sizeof(Storage));
  int64_t correct = 0;
  for (int b = 0; b < last_B_; b++) {
    float l0, l1;
    if constexpr (std::is_same_v<Storage, bf16>) {
      l0 = bf16_to_float(logits[2 * b]), l1 = bf16_to_float(logits[2 * b + 1]);
    } else {
      l0 = logits[2 * b], l1 = logits[2 * b + 1];
    }
    correct += (l1 > l0 ? 1 : 0) == host_nsp_targets_[b];
  }
  return correct;
}

template class BertT<bf16>;
template class BertT<float>;

}  // namespace collage
