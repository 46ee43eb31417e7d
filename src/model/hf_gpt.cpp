// A GPT under Hugging Face's names (hf_naming.h). collage's GPT block is pre-LN with biases,
// GELU-tanh and causal attention scaled by 1/√HS:
//  - with learned positions it is GPT-2 (GPT2LMHeadModel), whose Conv1D layers keep their
//    weights as (in, out): collage's (out, in) transposed;
//  - with rope it is GPT-NeoX (GPTNeoXForCausalLM) with every dimension of a head rotated
//    (rotary_pct 1), the sequential residual (use_parallel_residual false) and gelu_new. Both
//    rotate "half": the pair (x_i, x_{i+HS/2}) of each head by the angle t·base^(-2i/HS)
//    (numerics/rope_table.h, and GPT-NeoX's rotate_half). NeoX's query_key_value keeps each
//    head's q, k and v rows together ((NH, 3, HS) rows), collage's [q | k | v] ((3, NH, HS)).
#include <fmt/format.h>

#include "model/hf_naming.h"

namespace collage {
namespace {

// GPT-2's BPE vocabulary: its <|endoftext|> (50256) is the bos and eos token.
constexpr int kGpt2VocabSize = 50257;
constexpr int kGpt2EndOfText = 50256;

nlohmann::ordered_json gpt2_token(const ModelConfig& c) {
  return c.vocab_size == kGpt2VocabSize ? nlohmann::ordered_json(kGpt2EndOfText)
                                        : nlohmann::ordered_json();
}

// The naming's tensors, added in the file's order.
struct TensorList {
  std::vector<HfTensor>& out;
  void add(std::string hf, std::string name, std::vector<RowRange> rows = {},
           bool transposed = false) {
    out.push_back({std::move(hf), std::move(name), std::move(rows), transposed});
  }
  // weight and bias of a layernorm or a linear layer (its weight transposed or not).
  void pair(const std::string& hf, const std::string& name, bool transposed = false) {
    add(hf + ".weight", name + ".weight", {}, transposed);
    add(hf + ".bias", name + ".bias");
  }
};

HfNaming gpt2_naming(const ModelConfig& c) {
  HfNaming n;
  n.model_class = "GPT2LMHeadModel";
  n.model_type = "gpt2";
  n.base_prefix = "transformer.";
  n.reason = fmt::format(
      "a GPT with learned positions, pre-LN blocks with biases and GELU-tanh is GPT-2 ({} "
      "embeddings{})",
      c.tie_embeddings ? "tied" : "untied",
      c.tie_embeddings ? "" : ": lm_head.weight, tie_word_embeddings false");
  TensorList t{n.tensors};
  const std::vector<RowRange> vocab = first_rows(c.vocab_size);
  t.add("transformer.wte.weight", "wte.weight", vocab);
  t.add("transformer.wpe.weight", "wpe.weight");
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = fmt::format("h.{}.", l), hf = "transformer." + p;
    t.pair(hf + "ln_1", p + "ln_1");
    t.pair(hf + "attn.c_attn", p + "attn.qkv", true);
    t.pair(hf + "attn.c_proj", p + "attn.proj", true);
    t.pair(hf + "ln_2", p + "ln_2");
    t.pair(hf + "mlp.c_fc", p + "mlp.fc1", true);
    t.pair(hf + "mlp.c_proj", p + "mlp.fc2", true);
  }
  t.pair("transformer.ln_f", "ln_f");
  if (!c.tie_embeddings) t.add("lm_head.weight", "lm_head.weight", vocab);

  const bool default_ffn = c.ffn() == 4 * c.hidden_size;
  n.model_keys = {
      {"vocab_size", c.vocab_size, "model.vocab_size"},
      {"n_positions", c.max_position_embeddings, "model.max_position_embeddings", 1024},
      {"n_embd", c.hidden_size, "model.hidden_size", 768},
      {"n_layer", c.n_layer, "model.n_layer", 12},
      {"n_head", c.n_head, "model.n_head", 12},
      {"n_inner", default_ffn ? nlohmann::ordered_json() : nlohmann::ordered_json(c.ffn()),
       "model.ffn_hidden_size", nullptr, 4 * c.hidden_size},
      {"activation_function", "gelu_new", "", "gelu_new"},  // GELU, tanh approximation
      {"layer_norm_epsilon", shortest_decimal(c.layernorm_eps), "model.layernorm_eps", 1e-5},
      {"scale_attn_weights", true, "", true},  // softmax(q·kᵀ/√HS)
      {"scale_attn_by_inverse_layer_idx", false, "", false},
      {"tie_word_embeddings", c.tie_embeddings, "model.tie_embeddings", true},
  };
  n.other_keys["n_ctx"] = c.max_position_embeddings;
  // collage's GPT has no dropout; transformers' defaults (0.1) would apply in train mode.
  n.other_keys["resid_pdrop"] = 0.0;
  n.other_keys["embd_pdrop"] = 0.0;
  n.other_keys["attn_pdrop"] = 0.0;
  n.other_keys["initializer_range"] = shortest_decimal(c.init_std);
  n.other_keys["reorder_and_upcast_attn"] = false;
  n.other_keys["use_cache"] = true;
  n.other_keys["bos_token_id"] = gpt2_token(c);
  n.other_keys["eos_token_id"] = gpt2_token(c);
  return n;
}

// collage's rows of head h's q (part 0), k (1) or v (2) in attn.qkv: [part·C + h·HS, + HS).
std::vector<RowRange> neox_qkv_rows(const ModelConfig& c) {
  const int64_t C = c.hidden_size, HS = c.head_size();
  std::vector<RowRange> rows;
  for (int64_t h = 0; h < c.n_head; h++)
    for (int64_t part = 0; part < 3; part++) rows.push_back({part * C + h * HS, HS});
  return rows;
}

HfNaming gpt_neox_naming(const ModelConfig& c) {
  HfNaming n;
  n.model_class = "GPTNeoXForCausalLM";
  n.model_type = "gpt_neox";
  n.base_prefix = "gpt_neox.";
  n.reason = fmt::format(
      "a GPT with rope is GPT-NeoX with every head dimension rotated (rotary_pct 1, the same "
      "rotate-half pairs), a sequential residual and gelu_new ({} embeddings)",
      c.tie_embeddings ? "tied" : "untied");
  TensorList t{n.tensors};
  const std::vector<RowRange> vocab = first_rows(c.vocab_size);
  const std::vector<RowRange> qkv = neox_qkv_rows(c);
  t.add("gpt_neox.embed_in.weight", "wte.weight", vocab);
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = fmt::format("h.{}.", l), hf = fmt::format("gpt_neox.layers.{}.", l);
    t.pair(hf + "input_layernorm", p + "ln_1");
    t.pair(hf + "post_attention_layernorm", p + "ln_2");
    t.add(hf + "attention.query_key_value.weight", p + "attn.qkv.weight", qkv);
    t.add(hf + "attention.query_key_value.bias", p + "attn.qkv.bias", qkv);
    t.pair(hf + "attention.dense", p + "attn.proj");
    t.pair(hf + "mlp.dense_h_to_4h", p + "mlp.fc1");
    t.pair(hf + "mlp.dense_4h_to_h", p + "mlp.fc2");
  }
  t.pair("gpt_neox.final_layer_norm", "ln_f");
  if (!c.tie_embeddings) t.add("embed_out.weight", "lm_head.weight", vocab);

  const double base = shortest_decimal(c.rope_base);
  n.model_keys = hf_size_keys(c);
  n.model_keys.insert(
      n.model_keys.end(),
      {
          {"max_position_embeddings", c.max_position_embeddings, "model.max_position_embeddings",
           2048},
          {"hidden_act", "gelu_new", "", "gelu"},  // GELU, tanh approximation
          {"rotary_pct", 1.0, "", 0.25},           // every dimension of a head rotates
          {"rotary_emb_base", base, "model.rope_base", 10000},
          {"layer_norm_eps", shortest_decimal(c.layernorm_eps), "model.layernorm_eps", 1e-5},
          {"use_parallel_residual", false, "", true},  // x += attn(ln_1(x)); x += mlp(ln_2(x))
          {"attention_bias", true, "", true},
          {"tie_word_embeddings", c.tie_embeddings, "model.tie_embeddings", false},
      });
  // transformers 5 reads the rotary settings from these; older versions from the keys above.
  n.other_keys["rope_theta"] = base;
  n.other_keys["partial_rotary_factor"] = 1.0;
  n.other_keys["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", base}, {"partial_rotary_factor", 1.0}};
  n.other_keys["hidden_dropout"] = 0.0;
  n.other_keys["attention_dropout"] = 0.0;
  n.other_keys["initializer_range"] = shortest_decimal(c.init_std);
  n.other_keys["use_cache"] = true;
  n.other_keys["bos_token_id"] = gpt2_token(c);
  n.other_keys["eos_token_id"] = gpt2_token(c);
  return n;
}

}  // namespace

HfNaming gpt_hf_naming(const ModelConfig& c) {
  return c.position_embedding == "rope" ? gpt_neox_naming(c) : gpt2_naming(c);
}

}  // namespace collage
