// The GPT family's code (model_family.h): what plan, bench and the tasks need of a GptT.
#include <fmt/format.h>

#include "model/gpt.h"
#include "model/model_family.h"

namespace collage {
namespace {

size_t gpt_activation_bytes(const ModelConfig& config, const ModelShape& shape, int tp) {
  return GPT::planned_activation_bytes(config, shape.micro_batch, shape.seq_len, tp);
}

MultipliedParameters gpt_multiplied_parameters(const ModelConfig& m) {
  const double C = m.hidden_size, F = m.ffn(), V = m.vocab_size, L = m.n_layer;
  const double layernorm = 2 * C;
  // ln_1, qkv, proj, ln_2, fc1, fc2 with their biases (gpt_parameters.cpp).
  const double block =
      2 * layernorm + (3 * C * C + 3 * C) + (C * C + C) + (C * F + F) + (F * C + C);
  MultipliedParameters p;
  p.body = L * block + layernorm + V * C;  // the blocks, ln_f, the head
  return p;
}

// The head sees every token.
int64_t gpt_head_rows(const ModelShape& s) { return int64_t{s.micro_batch} * s.seq_len; }

std::vector<LinearShape> gpt_linears(const ModelConfig& m, const ModelShape& s) {
  const int64_t N = int64_t{s.micro_batch} * s.seq_len, C = m.hidden_size, F = m.ffn();
  return {{N, C, 3 * C, m.n_layer},
          {N, C, C, m.n_layer},  // qkv, proj
          {N, C, F, m.n_layer},
          {N, F, C, m.n_layer},          // fc1, fc2
          {N, C, m.padded_vocab(), 1}};  // the head
}

std::string gpt_describe(const ModelConfig& m, const ModelShape& s, int tp) {
  return fmt::format(
      "n_layer {}, hidden {}, heads {}, ffn {}, vocab {} (padded to {}), {} positions, {} head, "
      "seq_len {}",
      m.n_layer, m.hidden_size, m.n_head, m.ffn(), m.vocab_size, m.padded_vocab(tp),
      m.position_embedding, m.tie_embeddings ? "tied" : "untied", s.seq_len);
}

std::unique_ptr<CausalLanguageModel> make_gpt(const ModelConfig& config, Backend& backend,
                                              const ModelShape& shape,
                                              const ModelPlacement& placement) {
  return std::make_unique<GPT>(config, backend, shape.micro_batch, shape.seq_len, placement.layout,
                               placement.tensor_parallel, placement.memory_multiple);
}

}  // namespace

const ModelFamilyCode& gpt_family_code() {
  static const ModelFamilyCode code{
      .parameter_table = gpt_parameter_table,
      .planned_activation_bytes = gpt_activation_bytes,
      .multiplied_parameters = gpt_multiplied_parameters,
      .head_rows = gpt_head_rows,
      .linears = gpt_linears,
      .describe = gpt_describe,
      .hf_naming = gpt_hf_naming,
      .make_causal_lm = make_gpt,
      .make_masked_lm = nullptr,
  };
  return code;
}

}  // namespace collage
