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

// A GPT with learned positions, pre-LN blocks with biases and GELU-tanh is GPT-2: its
// GPT2LMHeadModel names, the linear weights as Conv1D's (in, out).
HfNaming gpt_hf_naming(const ModelConfig& c) {
  if (c.position_embedding != "learned")
    return {"",
            fmt::format("model.position_embedding is {}: GPT-2 has learned positions only",
                        c.position_embedding),
            {}};
  HfNaming naming{
      "GPT2LMHeadModel",
      fmt::format("a GPT with learned positions, pre-LN blocks with biases and "
                  "GELU-tanh is GPT-2 ({} embeddings{})",
                  c.tie_embeddings ? "tied" : "untied",
                  c.tie_embeddings ? "" : ": lm_head.weight, tie_word_embeddings false"),
      {}};
  auto add = [&](std::string hf, std::string name, HfLayout layout) {
    naming.tensors.push_back({std::move(hf), std::move(name), layout});
  };
  // weight and bias: a layernorm's as they are, a linear layer's weight as Conv1D's.
  auto pair = [&](const std::string& hf, const std::string& name, HfLayout weight) {
    add(hf + ".weight", name + ".weight", weight);
    add(hf + ".bias", name + ".bias", HfLayout::same);
  };
  using L = HfLayout;
  add("transformer.wte.weight", "wte.weight", L::vocab_rows);
  add("transformer.wpe.weight", "wpe.weight", L::same);
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = fmt::format("h.{}.", l), hf = "transformer." + p;
    pair(hf + "ln_1", p + "ln_1", L::same);
    pair(hf + "attn.c_attn", p + "attn.qkv", L::transposed);
    pair(hf + "attn.c_proj", p + "attn.proj", L::transposed);
    pair(hf + "ln_2", p + "ln_2", L::same);
    pair(hf + "mlp.c_fc", p + "mlp.fc1", L::transposed);
    pair(hf + "mlp.c_proj", p + "mlp.fc2", L::transposed);
  }
  pair("transformer.ln_f", "ln_f", L::same);
  if (!c.tie_embeddings) add("lm_head.weight", "lm_head.weight", L::vocab_rows);
  return naming;
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
