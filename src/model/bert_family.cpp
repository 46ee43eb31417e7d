// The BERT family's code (model_family.h): what plan, bench and the tasks need of a BertT,
// for BERT and RoBERTa alike (their differences are the registry's facts, config/architecture.h).
#include <fmt/format.h>

#include "model/bert.h"
#include "model/model_family.h"

namespace collage {
namespace {

size_t bert_activation_bytes(const ModelConfig& config, const ModelShape& shape, int tp) {
  return BERT::planned_activation_bytes(config, shape.micro_batch, shape.seq_len,
                                        shape.max_predictions, tp);
}

MultipliedParameters bert_multiplied_parameters(const ModelConfig& m) {
  const double C = m.hidden_size, F = m.ffn(), V = m.vocab_size, L = m.n_layer;
  const double layernorm = 2 * C;
  // qkv, proj, ln_1, fc1, fc2, ln_2 with their biases (bert_parameters.cpp): the GPT's block,
  // post-LN.
  const double block =
      2 * layernorm + (3 * C * C + 3 * C) + (C * C + C) + (C * F + F) + (F * C + C);
  MultipliedParameters p;
  p.body = layernorm + L * block;                         // the embedding layernorm, the blocks
  p.masked_head = (C * C + C) + layernorm + (V * C + V);  // dense, LN, decoder
  if (architecture(m).next_sentence) p.sequence_head = (C * C + C) + (2 * C + 2);  // pooler, NSP
  return p;
}

// The MLM head sees the labelled rows: at most micro_batch × max_predictions (a real step has
// ~15% of the tokens).
int64_t bert_head_rows(const ModelShape& s) { return int64_t{s.micro_batch} * s.max_predictions; }

std::vector<LinearShape> bert_linears(const ModelConfig& m, const ModelShape& s) {
  const int64_t N = int64_t{s.micro_batch} * s.seq_len, C = m.hidden_size, F = m.ffn();
  const int64_t M = int64_t{s.micro_batch} * s.max_predictions;
  std::vector<LinearShape> linears = {
      {N, C, 3 * C, m.n_layer},
      {N, C, C, m.n_layer},  // qkv, proj
      {N, C, F, m.n_layer},
      {N, F, C, m.n_layer},         // fc1, fc2
      {M, C, C, 1},                 // MLM transform
      {M, C, m.padded_vocab(), 1},  // MLM decoder
  };
  if (architecture(m).next_sentence) {
    linears.push_back({s.micro_batch, C, C, 1});  // pooler
    linears.push_back({s.micro_batch, C, 2, 1});  // NSP classifier
  }
  return linears;
}

std::string bert_describe(const ModelConfig& m, const ModelShape& s, int tp) {
  return fmt::format(
      "n_layer {}, hidden {}, heads {}, ffn {}, vocab {} (padded to {}), {} positions, seq_len "
      "{}, {} masked positions",
      m.n_layer, m.hidden_size, m.n_head, m.ffn(), m.vocab_size, m.padded_vocab(tp),
      m.max_position_embeddings, s.seq_len, s.max_predictions);
}

std::unique_ptr<MaskedLanguageModel> make_bert(const ModelConfig& config, Backend& backend,
                                               const ModelShape& shape,
                                               const ModelPlacement& placement) {
  return std::make_unique<BERT>(config, backend, shape.micro_batch, shape.seq_len,
                                shape.max_predictions, placement.layout, placement.tensor_parallel,
                                placement.memory_multiple);
}

}  // namespace

const ModelFamilyCode& bert_family_code() {
  static const ModelFamilyCode code{
      .parameter_table = bert_parameter_table,
      .planned_activation_bytes = bert_activation_bytes,
      .multiplied_parameters = bert_multiplied_parameters,
      .head_rows = bert_head_rows,
      .linears = bert_linears,
      .describe = bert_describe,
      .hf_naming = bert_hf_naming,
      .make_causal_lm = nullptr,
      .make_masked_lm = make_bert,
  };
  return code;
}

}  // namespace collage
