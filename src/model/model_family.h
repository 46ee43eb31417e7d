#pragma once
// The code of each model family. config/architecture.h names every architecture and its
// family; model_family(config) hands out that family's code, so that plan, bench, export,
// generate, eval and the training tasks size, count and build a model without naming its
// class. The families: gpt_family.cpp (GptT) and bert_family.cpp (BertT, for BERT and
// RoBERTa). CONTRIBUTING.md, "Adding an architecture".
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/architecture.h"
#include "config/config.h"
#include "dist/comm.h"
#include "model/hf_naming.h"
#include "model/language_model.h"
#include "model/parameter_info.h"

namespace collage {

// The batch a model is built for.
struct ModelShape {
  int micro_batch = 1;      // the largest B a forward takes
  int seq_len = 1;          // T, every forward's
  int max_predictions = 1;  // P, the labelled positions of a sequence (masked_lm)
};
// training.micro_batch_size, data.seq_len and data.max_predictions.
ModelShape model_shape(const Config& config);

// Where a model sits in a parallel run: its tensor-parallel share (tp > 1 needs the TP group's
// Comm, on the model's backend, outliving it) and its parameter memory rounded up to
// memory_multiple elements (ZeRO-1's equal shards).
struct ModelPlacement {
  ParallelLayout layout;
  Comm* tensor_parallel = nullptr;
  int64_t memory_multiple = 1;
};

// The parameters that multiply a token's hidden state (plan/model_flops.h counts 6 FLOPs each
// in a training step), by how often they run.
struct MultipliedParameters {
  double body = 0;           // at every position: blocks, layernorms, a GPT's head
  double masked_head = 0;    // at the labelled positions: an MLM head
  double sequence_head = 0;  // once per sequence: BERT's pooler and NSP classifier
};

// `times` linear layers of a micro-batch step: (rows, in) · (in, out).
struct LinearShape {
  int64_t rows, in, out, times;
};

struct ModelFamilyCode {
  // The parameter table split tp ways (validates the config; no backend needed).
  std::vector<ParameterInfo> (*parameter_table)(const ModelConfig& config, int tp);
  // The activation arena a model of this shape allocates, without a backend.
  size_t (*planned_activation_bytes)(const ModelConfig& config, const ModelShape& shape, int tp);
  MultipliedParameters (*multiplied_parameters)(const ModelConfig& config);
  // The rows the vocabulary head and its loss see in a micro-batch (tensor-parallel traffic).
  int64_t (*head_rows)(const ModelShape& shape);
  // Every linear layer of one micro-batch (the attention products apart), for bench's GEMMs.
  std::vector<LinearShape> (*linears)(const ModelConfig& config, const ModelShape& shape);
  // "n_layer 12, hidden 768, ..." after the title, for `collage plan`.
  std::string (*describe)(const ModelConfig& config, const ModelShape& shape, int tp);
  // The Hugging Face class computing what the model does, its tensor names and config.json
  // (hf_naming.h).
  HfNaming (*hf_naming)(const ModelConfig& config);
  // The model, weights zero; one of the two, as the architecture's objective says.
  std::unique_ptr<CausalLanguageModel> (*make_causal_lm)(const ModelConfig& config,
                                                         Backend& backend, const ModelShape& shape,
                                                         const ModelPlacement& placement);
  std::unique_ptr<MaskedLanguageModel> (*make_masked_lm)(const ModelConfig& config,
                                                         Backend& backend, const ModelShape& shape,
                                                         const ModelPlacement& placement);
};

// The code of config.arch's family (an unknown arch is an error naming the registered ones).
const ModelFamilyCode& model_family(const ModelConfig& config);

// The families' code (gpt_family.cpp, bert_family.cpp).
const ModelFamilyCode& gpt_family_code();
const ModelFamilyCode& bert_family_code();

// The model of config.arch for its objective: a next_token architecture's causal LM or a
// masked_lm one's masked LM (the other is an error naming the architecture and `what` needs).
std::unique_ptr<CausalLanguageModel> make_causal_lm(const ModelConfig& config, Backend& backend,
                                                    const ModelShape& shape,
                                                    const ModelPlacement& placement = {});
std::unique_ptr<MaskedLanguageModel> make_masked_lm(const ModelConfig& config, Backend& backend,
                                                    const ModelShape& shape,
                                                    const ModelPlacement& placement = {});
// Either, as a TrainableModel (loading and saving weights).
std::unique_ptr<TrainableModel> make_model(const ModelConfig& config, Backend& backend,
                                           const ModelShape& shape,
                                           const ModelPlacement& placement = {});

}  // namespace collage
