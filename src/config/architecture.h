#pragma once
// The registry of architectures: the one place that names every `model.arch` and says what
// each one is. Everything else asks it (architecture(config)) instead of comparing the name:
// the config's checks, the model classes, the training tasks, plan, bench, export, generate
// and eval. docs/ARCHITECTURE.md, "Architectures", and CONTRIBUTING.md, "Adding an
// architecture", show how the pieces meet.
//
// It sits in the config layer because the config's own checks need it (which keys a model
// reads, which data it trains on). The code that computes a model lives above, in src/model:
// each row names its model family, and src/model/model_family.h hands out that family's
// parameter table, activation plan, FLOP counts and constructor.
#include <string>
#include <string_view>

namespace collage {

struct ModelConfig;

// What a model is trained to predict. It fixes the data format, the training task
// (src/train) and the batch fields the task fills (src/model/batch.h).
enum class Objective {
  next_token,  // causal language modelling on Megatron .bin/.idx token windows
  masked_lm,   // masked language modelling on BERT pretraining HDF5 shards
};

// The model class in src/model that computes an architecture (src/model/model_family.h).
enum class ModelFamily {
  gpt,   // GptT (gpt.h): decoder, pre-LN, learned or rotary positions
  bert,  // BertT (bert.h): encoder, post-LN, learned positions, dropout
};

// The tokenizer whose files a model's data and exports use.
enum class TokenizerKind {
  gpt2_bpe,   // data.vocab_file (vocab.json) and data.merges_file (merges.txt)
  wordpiece,  // data.vocab_file (vocab.txt)
};

struct Architecture {
  std::string_view name;   // model.arch
  std::string_view title;  // in logs and tables: "GPT", "BERT", "RoBERTa"
  ModelFamily family;
  Objective objective;
  TokenizerKind tokenizer;
  // A pooler and next-sentence classifier with its loss beside the masked LM (BERT).
  bool next_sentence = false;
  // Positions start past model.pad_token_id (RoBERTa: position = pad_token_id + 1 + index).
  bool positions_past_padding = false;
  // model.position_embedding rope is computed (the GPT family); otherwise learned only.
  bool rotary_positions = false;
  // The encoder keys of model (type_vocab_size, pad_token_id, the dropouts) are read.
  bool encoder_keys = false;
  // plan/kernel_costs.cpp models this architecture's kernels (`collage plan --kernels`).
  bool kernel_cost_model = false;
  // What the heads learn, for bench's table: "" or "masked LM + NSP".
  std::string_view heads;
};

// The registered architecture of `name`, or null.
const Architecture* find_architecture(std::string_view name);
// config.arch's; an unknown name is an error that lists the registered ones.
const Architecture& architecture(const ModelConfig& config);
// "gpt|bert|roberta": the registered names, for errors and --help.
std::string architecture_names();

}  // namespace collage
