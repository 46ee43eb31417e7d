// GPT construction (arenas, activation plan) and one micro-batch's forward and backward.
#include "model/gpt.h"

#include "core/error.h"
#include "model/parameter_table.h"
#include "model/vocab_parallel_loss.h"

namespace collage {

template <typename Storage>
GptT<Storage>::GptT(const ModelConfig& config, BackendT<Storage>& backend, int micro_batch,
                    int seq_len, ParallelLayout layout, Comm* tensor_parallel,
                    int64_t memory_multiple)
    : Base(config, backend, micro_batch, seq_len, layout, tensor_parallel, memory_multiple,
           gpt_parameter_table(config, layout.tp) /* validates the config */, "GPT"),
      rope_(config.position_embedding == "rope") {
  COLLAGE_CHECK(seq_len >= 1 && seq_len <= config.max_position_embeddings,
                "data.seq_len: {} must be in [1, model.max_position_embeddings = {}]", seq_len,
                config.max_position_embeddings);
  weights_ = bind_weights(params_);
  grad_weights_ = bind_weights(grads_);
  // first pass sizes the arena, second pass hands out the pointers
  this->allocate_activations(planned_activation_bytes(config, micro_batch, seq_len, layout.tp));
  acts_ = plan_activations(config, micro_batch, seq_len, layout.tp, *this->act_arena_);
}

template <typename Storage>
size_t GptT<Storage>::planned_activation_bytes(const ModelConfig& config, int micro_batch,
                                               int seq_len, int tp) {
  gpt_parameter_table(config, tp);  // validates the config and tp
  COLLAGE_CHECK(micro_batch >= 1 && seq_len >= 1,
                "GPT activations: micro-batch {} and sequence length {} must be >= 1", micro_batch,
                seq_len);
  Arena counting;
  plan_activations(config, micro_batch, seq_len, tp, counting);
  return counting.used();
}

template <typename Storage>
GptActivations<Storage> GptT<Storage>::plan_activations(const ModelConfig& config, int micro_batch,
                                                        int seq_len, int tp, Arena& arena) {
  const int64_t N = int64_t{micro_batch} * seq_len, C = config.hidden_size;
  const int64_t C3 = 3 * C / tp, Cl = C / tp, Fl = config.ffn() / tp;
  const int64_t Vl = config.padded_vocab(tp) / tp, NHl = config.n_head / tp;
  const bool rope = config.position_embedding == "rope";
  auto take = [&](int64_t count) { return arena.take<Storage>(count); };
  auto take_f32 = [&](int64_t count) { return arena.take<float>(count); };

  GptActivations<Storage> a;
  a.tokens = arena.take<int32_t>(N);
  a.targets = arena.take<int32_t>(N);
  a.encoded = take(N * C);
  a.layers.resize(config.n_layer);
  for (GptLayerActivations<Storage>& l : a.layers) {
    l.ln1 = take(N * C);
    l.ln1_mean = take_f32(N);
    l.ln1_rstd = take_f32(N);
    l.qkv = take(N * C3);
    l.qkv_rope = rope ? take(N * C3) : nullptr;
    l.atty = take(N * Cl);
    l.att_lse = take_f32(N * NHl);
    l.residual2 = take(N * C);
    l.ln2 = take(N * C);
    l.ln2_mean = take_f32(N);
    l.ln2_rstd = take_f32(N);
    l.fch = take(N * Fl);
    l.fch_gelu = take(N * Fl);
    l.residual3 = take(N * C);
  }
  a.branch_out = take(N * C);
  a.lnf = take(N * C);
  a.lnf_mean = take_f32(N);
  a.lnf_rstd = take_f32(N);
  a.logits = take(N * Vl);
  a.losses = take_f32(N);
  a.row_lse = take_f32(N);
  if (tp > 1) {
    a.row_max = take_f32(N);
    a.row_sums = take_f32(2 * N);
  }

  a.dlogits = take(N * Vl);
  a.dlnf = take(N * C);
  a.dresidual = take(N * C);
  GptLayerGradients<Storage>& d = a.layer_grads;
  d.dfch_gelu = take(N * Fl);
  d.dfch = take(N * Fl);
  d.dln2 = take(N * C);
  d.datty = take(N * Cl);
  d.dqkv_rope = rope ? take(N * C3) : nullptr;
  d.dqkv = take(N * C3);
  d.dln1 = take(N * C);
  return a;
}

template <typename Storage>
void GptT<Storage>::check_tokens(const int32_t* tokens, const int32_t* targets, int B) const {
  COLLAGE_CHECK(B >= 1 && B <= micro_batch_, "GPT forward: batch {} outside [1, {}]", B,
                micro_batch_);
  COLLAGE_CHECK(tokens != nullptr, "GPT forward: no tokens");
  for (int64_t i = 0; i < int64_t{B} * seq_len_; ++i) {
    COLLAGE_CHECK(tokens[i] >= 0 && tokens[i] < V_,
                  "GPT forward: token {} at position {} is outside the vocab [0, {})", tokens[i], i,
                  V_);
    COLLAGE_CHECK(!targets || targets[i] < V_,
                  "GPT forward: target {} at position {} is outside the vocab [0, {})", targets[i],
                  i, V_);
  }
}

template <typename Storage>
typename GptT<Storage>::Loss GptT<Storage>::forward(const int32_t* tokens, const int32_t* targets,
                                                    int B) {
  check_tokens(tokens, targets, B);
  const int T = seq_len_, C = C_, HS = HS_, NHl = local_heads_, Fl = local_ffn_;
  const int C3 = 3 * C / layout_.tp, Cl = C / layout_.tp, Vl = Vp_ / layout_.tp;
  const int64_t N = int64_t{B} * T;
  const float eps = config_.layernorm_eps;
  const Weights& w = weights_;
  GptActivations<Storage>& a = acts_;
  BackendT<Storage>& be = backend_;

  be.copy_to_device(a.tokens, tokens, N * sizeof(int32_t));
  if (targets) be.copy_to_device(a.targets, targets, N * sizeof(int32_t));

  // Vocab-parallel: each rank looks up the tokens of its rows (zeros elsewhere), rank 0 adds
  // the positions, and the sum over the TP group is the embedding.
  const Storage* wpe = layout_.tp_rank == 0 ? w.wpe : nullptr;
  be.embedding_forward(a.encoded, a.tokens, w.wte, wpe, B, T, C, vocab_begin_, vocab_end_);
  all_reduce_tp(a.encoded, N * C);
  // Each residual add is fused with the layernorm that reads its result (the next branch's
  // input): the MLP's ln_2, the next layer's ln_1, or ln_f after the last layer.
  be.layernorm_forward(a.layers[0].ln1, a.layers[0].ln1_mean, a.layers[0].ln1_rstd, a.encoded,
                       w.layers[0].ln1_w, w.layers[0].ln1_b, N, C, eps);
  const Storage* x = a.encoded;  // (N, C) residual stream entering the layer
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerWeights& lw = w.layers[l];
    GptLayerActivations<Storage>& la = a.layers[l];
    // attention branch (ln1 = layernorm(x) is already done)
    be.matmul_forward(la.qkv, la.ln1, lw.qkv_w, lw.qkv_b, N, C, C3);  // (N, 3C)
    const Storage* attention_in = la.qkv;
    if (rope_) {
      be.rope_forward(la.qkv_rope, la.qkv, B, T, NHl, HS, config_.rope_base);
      attention_in = la.qkv_rope;
    }
    be.attention_forward(la.atty, la.att_lse, attention_in, nullptr, true, B, T, NHl, HS);
    // Row-parallel: partial sums over this rank's heads, the bias added once (rank 0).
    const bool add_bias = layout_.tp_rank == 0;
    be.matmul_forward(a.branch_out, la.atty, lw.proj_w, add_bias ? lw.proj_b : nullptr, N, Cl, C);
    all_reduce_tp(a.branch_out, N * C);
    // residual2 = x + attention; ln2 = layernorm(residual2)
    be.residual_layernorm_forward(la.residual2, la.ln2, la.ln2_mean, la.ln2_rstd, x, a.branch_out,
                                  lw.ln2_w, lw.ln2_b, N, C, eps);
    // MLP branch
    be.matmul_forward(la.fch, la.ln2, lw.fc1_w, lw.fc1_b, N, C, Fl);  // (N, F)
    be.gelu_forward(la.fch_gelu, la.fch, N * Fl);
    be.matmul_forward(a.branch_out, la.fch_gelu, lw.fc2_w, add_bias ? lw.fc2_b : nullptr, N, Fl, C);
    all_reduce_tp(a.branch_out, N * C);
    // residual3 = residual2 + MLP; then the layernorm that reads it
    const bool last = l + 1 == config_.n_layer;
    Storage* next_ln = last ? a.lnf : a.layers[l + 1].ln1;
    float* next_mean = last ? a.lnf_mean : a.layers[l + 1].ln1_mean;
    float* next_rstd = last ? a.lnf_rstd : a.layers[l + 1].ln1_rstd;
    const Storage* next_w = last ? w.lnf_w : w.layers[l + 1].ln1_w;
    const Storage* next_b = last ? w.lnf_b : w.layers[l + 1].ln1_b;
    be.residual_layernorm_forward(la.residual3, next_ln, next_mean, next_rstd, la.residual2,
                                  a.branch_out, next_w, next_b, N, C, eps);
    x = la.residual3;
  }
  be.matmul_forward(a.logits, a.lnf, w.head, nullptr, N, C, Vl);  // (N, Vp)

  last_B_ = 0;
  Loss loss;
  if (!targets) return loss;
  vocab_parallel_cross_entropy(be, tp_comm_, layout_.tp, a.losses, a.row_lse, a.row_max, a.row_sums,
                               a.logits, a.targets, N, V_, Vl, vocab_begin_);
  loss.sum = be.sum(a.losses, N);
  for (int64_t i = 0; i < N; ++i) loss.count += targets[i] >= 0;
  last_B_ = B;
  return loss;
}

template <typename Storage>
void GptT<Storage>::backward(float dloss) {
  COLLAGE_CHECK(last_B_ > 0, "GPT backward: the last forward had no targets");
  const int B = last_B_, T = seq_len_, C = C_, HS = HS_, NHl = local_heads_, Fl = local_ffn_;
  const int C3 = 3 * C / layout_.tp, Cl = C / layout_.tp, Vl = Vp_ / layout_.tp;
  const int64_t N = int64_t{B} * T;
  const Weights& w = weights_;
  const Weights& g = grad_weights_;
  GptActivations<Storage>& a = acts_;
  BackendT<Storage>& be = backend_;

  GptLayerGradients<Storage>& d = a.layer_grads;

  // head: logits = lnf · headᵀ, then the final layernorm. Each backward op writes its input's
  // gradient (dlogits from the forward's lse at any tp: vocab_parallel_loss.h), so none is
  // zeroed first, except dresidual, which the layernorm backwards add into (backend.h).
  be.cross_entropy_shard_backward(a.dlogits, a.logits, a.targets, a.row_lse, N, V_, Vl,
                                  vocab_begin_, dloss);
  be.matmul_backward(a.dlnf, g.head, nullptr, a.dlogits, a.lnf, w.head, N, C, Vl);
  all_reduce_tp(a.dlnf, N * C);  // the head is column-parallel: its input's gradient sums
  const Storage* x_last = a.layers.back().residual3;
  be.zero(a.dresidual, size_t(N) * C * sizeof(Storage));
  // Each layernorm backward also forms, from the dresidual rows it has just written, the bias
  // gradient of the row-parallel matmul whose output's gradient that dresidual is (Σ_rows
  // dresidual; backend.h): ln_f's and each ln_1's the fc2 bias of the layer below, each ln_2's
  // the proj bias of its layer. Those matmul_backward calls then leave their bias out.
  be.layernorm_backward(a.dresidual, g.lnf_w, g.lnf_b, a.dlnf, x_last, w.lnf_w, a.lnf_mean,
                        a.lnf_rstd, N, C, g.layers.back().fc2_b);

  // dresidual holds the gradient of the current layer's output; both residual adds pass it
  // through unchanged, and each layernorm backward adds its branch's share into it.
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const LayerWeights& lw = w.layers[l];
    const LayerWeights& lg = g.layers[l];
    const GptLayerActivations<Storage>& la = a.layers[l];
    const Storage* x = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    // MLP branch
    be.matmul_backward(d.dfch_gelu, lg.fc2_w, nullptr, a.dresidual, la.fch_gelu, lw.fc2_w, N, Fl,
                       C);  // fc2's bias: by the layernorm backward above
    // fc1's bias gradient (Σ_rows dfch) with the GELU's backward, in its pass over the rows.
    be.gelu_backward_bias(d.dfch, lg.fc1_b, la.fch, d.dfch_gelu, N, Fl, /*exact=*/false);
    be.matmul_backward(d.dln2, lg.fc1_w, nullptr, d.dfch, la.ln2, lw.fc1_w, N, C, Fl);
    all_reduce_tp(d.dln2, N * C);  // fc1 is column-parallel
    be.layernorm_backward(a.dresidual, lg.ln2_w, lg.ln2_b, d.dln2, la.residual2, lw.ln2_w,
                          la.ln2_mean, la.ln2_rstd, N, C, lg.proj_b);
    // attention branch
    be.matmul_backward(d.datty, lg.proj_w, nullptr, a.dresidual, la.atty, lw.proj_w, N, Cl, C);
    const Storage* attention_in = rope_ ? la.qkv_rope : la.qkv;
    Storage* dattention_in = rope_ ? d.dqkv_rope : d.dqkv;
    // Without rope the attention's input gradient is the qkv matmul's output gradient, and the
    // attention backward forms that matmul's bias gradient from the rows it writes.
    be.attention_backward(dattention_in, d.datty, la.atty, attention_in, la.att_lse, nullptr, true,
                          B, T, NHl, HS, rope_ ? nullptr : lg.qkv_b);
    if (rope_) be.rope_backward(d.dqkv, d.dqkv_rope, B, T, NHl, HS, config_.rope_base);
    be.matmul_backward(d.dln1, lg.qkv_w, rope_ ? lg.qkv_b : nullptr, d.dqkv, la.ln1, lw.qkv_w, N, C,
                       C3);
    all_reduce_tp(d.dln1, N * C);  // QKV is column-parallel
    be.layernorm_backward(a.dresidual, lg.ln1_w, lg.ln1_b, d.dln1, x, lw.ln1_w, la.ln1_mean,
                          la.ln1_rstd, N, C, l > 0 ? g.layers[l - 1].fc2_b : nullptr);
  }
  be.embedding_backward(g.wte, g.wpe, a.dresidual, a.tokens, B, T, C, vocab_begin_, vocab_end_);
}

template class GptT<bf16>;
template class GptT<float>;

}  // namespace collage
