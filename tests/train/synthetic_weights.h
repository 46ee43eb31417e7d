#pragma once
// The export and import tests' model weights without a training run: a config's parameter
// table filled with distinct bf16 values.
#include <string>

#include "config/config.h"
#include "model/trainable_model.h"
#include "tools/export.h"

namespace collage {

// A model's weights as a checkpoint would give them: every element a different bf16 value
// (its index), so a transposed or misplaced tensor cannot look right.
inline CheckpointWeights synthetic_weights(const std::string& yaml) {
  CheckpointWeights w;
  w.path = "synthetic.ckpt";
  w.step = 5;
  w.precision = "collage-plus";
  const bool has_data = yaml.find("\ndata:") != std::string::npos;  // encoders give theirs
  w.config = parse_config(yaml + (has_data ? "" : "\ndata: {seq_len: 8, datasets: [unused]}\n"),
                          "test.yaml");
  w.table = model_parameter_table(w.config.model);
  int64_t n = 0;
  for (const ParameterInfo& info : w.table) n += info.numel;
  w.values.resize(size_t(n));
  // Bits (40503·i) mod 2^14: finite positive values below 2, distinct over any 16384
  // consecutive elements (40503 is odd), so no two elements of a tensor here look alike.
  for (int64_t i = 0; i < n; i++) w.values[size_t(i)] = bf16{uint16_t((i * 40503) & 0x3fff)};
  return w;
}

// Whether `name` has a row per vocabulary id (the padding rows included).
inline bool is_vocab_parameter(const std::string& name) {
  return name == "wte.weight" || name == "lm_head.weight" || name == "embeddings.word.weight" ||
         name == "mlm.decoder.bias";
}

// One model of each Hugging Face class (model/hf_naming.h): GPT-2, GPT-NeoX, BERT, RoBERTa.
inline const std::string kGpt = R"(
model: {n_layer: 2, hidden_size: 32, n_head: 2, vocab_size: 100, max_position_embeddings: 24,
        position_embedding: learned, tie_embeddings: true}
)";
inline const std::string kRope = R"(
model: {n_layer: 2, hidden_size: 32, n_head: 2, vocab_size: 100, max_position_embeddings: 24,
        position_embedding: rope, tie_embeddings: false, rope_base: 500}
)";
inline const std::string kBert = R"(
model: {arch: bert, n_layer: 1, hidden_size: 32, n_head: 2, vocab_size: 200,
        max_position_embeddings: 24, layernorm_eps: 1.0e-12}
data: {seq_len: 8, hdf5_train: unused, max_predictions: 4}
)";
inline const std::string kRoberta = R"(
model: {arch: roberta, n_layer: 1, hidden_size: 32, n_head: 2, vocab_size: 200,
        max_position_embeddings: 24, layernorm_eps: 1.0e-12, type_vocab_size: 1, pad_token_id: 1}
data: {seq_len: 8, hdf5_train: unused, max_predictions: 4}
)";

}  // namespace collage
