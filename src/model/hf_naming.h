#pragma once
// A model under Hugging Face's names: which transformers class computes exactly what a collage
// model computes, how each of collage's parameters becomes one of that class's tensors, and the
// class's config.json. `collage export` writes through it and `--init-from hf:DIR` /
// `collage import` read through it, so the two are each other's inverse by construction.
//
// The classes (docs/HUGGING_FACE.md has the table and what was checked):
//   gpt, learned positions  GPT2LMHeadModel      (hf_gpt.cpp)
//   gpt, rope               GPTNeoXForCausalLM   (hf_gpt.cpp) rotary_pct 1, sequential residual
//   bert                    BertForPreTraining   (hf_bert.cpp) MLM head with its bias, pooler, NSP
//   roberta                 RobertaForMaskedLM   (hf_bert.cpp)
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "numerics/bf16.h"

namespace collage {

// Rows [begin, begin + count) of a collage parameter (its first dimension; a bias's elements).
struct RowRange {
  int64_t begin, count;
};

// One tensor of the Hugging Face class: `rows` of collage's parameter `name`, concatenated in
// this order (empty: every row; the vocabulary's padding rows are left out this way), then
// transposed for GPT-2's Conv1D, which keeps (in, out) where collage keeps (out, in).
struct HfTensor {
  std::string hf_name;
  std::string name;
  std::vector<RowRange> rows;
  bool transposed = false;
};

// A config.json key the forward depends on: its value for this model, the value transformers
// assumes when a file leaves it out (null: none), what a null value stands for (GPT-2's n_inner:
// 4·n_embd), and the collage key it comes from. Import compares each with the file's.
struct HfConfigKey {
  std::string key;
  nlohmann::ordered_json value;
  std::string collage_key;  // e.g. "model.n_layer"; "" for a fact of collage's blocks
  nlohmann::ordered_json hf_default = nullptr;
  nlohmann::ordered_json null_means = nullptr;
};

// The class that computes what a model computes, or, where none does, an empty model_class
// and the reason (export then keeps collage's names).
struct HfNaming {
  std::string model_class;  // e.g. "GPT2LMHeadModel"; empty: none
  std::string model_type;   // config.json's model_type, e.g. "gpt2"
  // The base model's prefix ("transformer."), which a file saved from the base model (the
  // published GPT-2) leaves out of every name.
  std::string base_prefix;
  std::string reason;             // for the log: why this class, or why none
  std::vector<HfTensor> tensors;  // every parameter in some tensor, in the file's order
  // config.json: the keys that shape the forward (compared on import), then the ones that
  // only describe the model to transformers (dropouts, init, special tokens).
  std::vector<HfConfigKey> model_keys;
  nlohmann::ordered_json other_keys = nlohmann::ordered_json::object();
};

// The Hugging Face naming of a model config (its family's: model_family(config).hf_naming).
HfNaming hf_naming(const ModelConfig& config);

// The classes' namings (hf_gpt.cpp, hf_bert.cpp).
HfNaming gpt_hf_naming(const ModelConfig& config);
HfNaming bert_hf_naming(const ModelConfig& config);

// config.json for a naming that has a class: architectures, model_type, the model keys, the
// other keys, torch_dtype ("bfloat16" | "float32").
nlohmann::ordered_json hf_config_json(const HfNaming& naming, const std::string& torch_dtype);

// The model section a config.json describes, for a class export writes; keys it does not
// set keep `base`'s values (dropouts, init_std). Throws Error naming `path`, the key and the
// value for a class collage does not compute or a value it cannot (GPT-NeoX's partial rotary
// or parallel residual, an activation other than the one collage's blocks use, ...).
ModelConfig model_config_from_hf(const nlohmann::json& config_json, const std::string& path,
                                 const ModelConfig& base = {});

// Every disagreement between `config` and a config.json, one line each naming the config.json
// key with its value and the collage key with its value; empty when they agree.
std::vector<std::string> hf_config_mismatches(const ModelConfig& config,
                                              const nlohmann::json& config_json);

// The shape of `t`, whose parameter has the (tensor-parallel 1) shape `full_shape`: the rows
// chosen (a 1-D parameter's elements), then transposed if it is.
std::vector<int64_t> hf_tensor_shape(const HfTensor& t, const std::vector<int64_t>& full_shape);
// Its values, from the parameter's (row-major, `full_shape`).
std::vector<bf16> hf_tensor_values(const HfTensor& t, const std::vector<int64_t>& full_shape,
                                   const bf16* parameter);
// The inverse: `values` (of hf_tensor_shape) into the parameter's rows they came from.
void scatter_hf_tensor(const HfTensor& t, const std::vector<int64_t>& full_shape,
                       const bf16* values, bf16* parameter);

// Helpers for the class files: the size keys most classes share (vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads, intermediate_size), rows [0, n), and a float as the
// decimal it was written as (1e-5f as 1e-05, not 9.99999974737875e-06).
std::vector<HfConfigKey> hf_size_keys(const ModelConfig& config);
std::vector<RowRange> first_rows(int64_t n);
double shortest_decimal(float value);

}  // namespace collage
