#pragma once
// Weights from a Hugging Face directory: `collage train --init-from hf:DIR` and `collage import`.
//
// DIR holds config.json and model.safetensors, or model.safetensors.index.json and its shards
// (safetensors_reader.h), of a class `collage export` writes (model/hf_naming.h):
// GPT2LMHeadModel, GPTNeoXForCausalLM, BertForPreTraining, RobertaForMaskedLM. A directory
// `collage export --names collage` wrote (no config.json; collage's names, the config in the
// metadata) is read too. Every tensor goes back to the rows of collage's parameter it came from
// (scatter_hf_tensor, the inverse of export's layout), so export -> import -> export gives the
// same files. What the reader accepts:
//  - names with or without the class's base-model prefix ("transformer.", "gpt_neox.",
//    "bert.", "roberta."), as transformers loads them (the published GPT-2 has none);
//  - buffers transformers keeps beside the weights (GPT-2's attn.bias and attn.masked_bias
//    masks, position_ids, rotary inv_freq) and a tied head saved anyway: skipped, named in the
//    log; any other tensor collage has no place for is an error, never dropped silently;
//  - BF16 as it is; F32, and F16 widened exactly to fp32, rounded to bf16 nearest-even (the
//    training state is bf16; the log counts the values the rounding changed). Other dtypes
//    are an error naming the tensor.
// Errors name DIR and the file, tensor or key: a missing tensor, a wrong shape, an unknown
// class, a config.json that disagrees with the run's config (each key with both values).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/parameter_info.h"
#include "numerics/bf16.h"

namespace collage {

// "hf:DIR" names a Hugging Face directory where a checkpoint is expected.
bool is_hf_source(const std::string& source);
std::string hf_source_directory(const std::string& source);  // DIR of "hf:DIR"

struct HfWeights {
  std::string directory;
  std::string naming;     // the class ("GPT2LMHeadModel", ...) or "collage"
  ModelConfig model;      // the model the files hold
  int64_t step = 0;       // a collage export's step; 0 for other sources
  std::string precision;  // a collage export's precision strategy; "" for other sources
  std::optional<Config> collage_config;  // a collage export's whole config, from its metadata
  std::vector<ParameterInfo> table;      // the model's parameter table at tensor-parallel 1
  std::vector<bf16> values;              // every parameter, table order; padding rows zero
  int64_t tensors_read = 0;
  int64_t values_rounded = 0;        // F32/F16 values that bf16 could not hold exactly
  std::vector<std::string> skipped;  // buffers and tied copies left out
};

// Reads DIR. With `expected` (the run's model section), config.json must agree with it in every
// key that shapes the forward, else an Error listing each disagreement with both values; the
// weights then take the run's model section. Without, the model is config.json's (or the
// collage export's). Holds the model once, plus one tensor.
HfWeights read_hf_weights(const std::string& directory, const ModelConfig* expected = nullptr);

// The checks of read_hf_weights() that need no tensor data (the files' headers and index,
// config.json against `expected`), for refusing a run before its data is prepared.
void check_hf_directory(const std::string& directory, const ModelConfig& expected);

}  // namespace collage
