#pragma once
// `collage export CHECKPOINT --output DIR`: a checkpoint's weights as DIR/model.safetensors
// (safetensors.h), for tools outside collage.
//
// Naming (choose_export_naming):
//  - hf-gpt2: a GPT with learned positions computes what Hugging Face's GPT2LMHeadModel does
//    (pre-LN blocks with biases, GELU-tanh = "gelu_new", causal attention scaled by 1/√HS), so
//    its tensors get GPT-2's names and layouts, and DIR/config.json GPT-2's config:
//      transformer.wte.weight                (V, C)   wte.weight, the padding rows (ids >= V,
//                                                     model.vocab_size) dropped
//      transformer.wpe.weight                (n_positions, C)
//      transformer.h.{l}.ln_1.weight/bias    (C)
//      transformer.h.{l}.attn.c_attn.weight  (C, 3C)  attn.qkv.weightᵀ: GPT-2's Conv1D keeps
//                                                     (in, out), collage (out, in); columns
//                                                     [q | k | v], head h at [h·HS, (h+1)·HS)
//                                                     in each, as in collage's rows
//      transformer.h.{l}.attn.c_attn.bias    (3C)
//      transformer.h.{l}.attn.c_proj.weight  (C, C)   attn.proj.weightᵀ; .bias (C)
//      transformer.h.{l}.ln_2.weight/bias    (C)
//      transformer.h.{l}.mlp.c_fc.weight     (C, F)   mlp.fc1.weightᵀ; .bias (F)
//      transformer.h.{l}.mlp.c_proj.weight   (F, C)   mlp.fc2.weightᵀ; .bias (C)
//      transformer.ln_f.weight/bias          (C)
//      lm_head.weight                        (V, C)   untied only (config.json then says
//                                                     tie_word_embeddings false); tied: left
//                                                     out, as save_pretrained does
//  - collage: anything GPT-2 cannot express (rope positions; BERT and RoBERTa): collage's
//    own names and shapes at tensor-parallel 1 (gpt.h, bert.h), vocabulary padding included.
// Values are the trained bf16 weights exactly ("BF16"), or widened exactly to "F32". The
// safetensors metadata holds format "pt", the collage version, the step, the precision
// strategy, the naming and the checkpoint's whole config (YAML, under "collage_config").
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/parameter_info.h"
#include "numerics/bf16.h"
#include "tools/safetensors.h"

namespace collage {

// A checkpoint's weights, whole (tensor-parallel 1), on the host.
struct CheckpointWeights {
  std::string path;                  // the checkpoint file or set manifest read
  int64_t step = 0;                  // optimizer steps it was saved after
  std::string precision;             // optimizer.precision it was trained with
  Config config;                     // the config saved in it
  std::vector<ParameterInfo> table;  // the model's parameter table at tp = 1
  std::vector<bf16> values;          // every parameter, table order (ParameterInfo::offset)
};

// `checkpoint`: a .ckpt file, a set's manifest (any tensor/data-parallel layout) or a
// checkpoint directory (its newest checkpoint that verifies, as `train --resume`). Loads the
// weights into a tp = 1 model on the cpu backend (load_checkpoint_weights) and reads them back.
// Errors name the path.
CheckpointWeights read_checkpoint_weights(const std::string& checkpoint);

enum class ExportNaming { hf_gpt2, collage };
const char* export_naming_name(ExportNaming naming);  // "hf-gpt2" | "collage"

struct ExportNamingChoice {
  ExportNaming naming;
  std::string reason;  // why, for the log
};
ExportNamingChoice choose_export_naming(const ModelConfig& config);

// The tensors of `weights` under `naming`, as `dtype` ("BF16" or "F32"), in table order.
std::vector<SafetensorsTensor> export_tensors(const CheckpointWeights& weights, ExportNaming naming,
                                              const std::string& dtype);

// GPT-2's config.json (transformers' GPT2Config) for a GPT that choose_export_naming() names
// hf-gpt2; torch_dtype "bfloat16" or "float32".
nlohmann::ordered_json hf_gpt2_config(const ModelConfig& config, const std::string& torch_dtype);

struct ExportOptions {
  std::string checkpoint;          // as read_checkpoint_weights()
  std::string output;              // the export directory
  std::string dtype = "bfloat16";  // bfloat16 | float32
  bool force = false;              // write into a non-empty directory
};

struct ExportResult {
  ExportNaming naming = ExportNaming::collage;
  std::string reason;
  std::string directory;
  std::vector<std::string> files;  // names written into it
  int64_t tensors = 0;
  uint64_t safetensors_bytes = 0;
  int64_t step = 0;
  double seconds = 0;
};

// Writes the export: model.safetensors, for hf-gpt2 config.json (and tokenizer_config.json
// with the tokenizer), and the tokenizer files the checkpoint's config names when they exist
// (GPT: data.vocab_file -> vocab.json, data.merges_file -> merges.txt; encoders: vocab.txt).
// Everything is written into a hidden staging directory beside DIR first and fsynced; a DIR
// that does not exist (or is empty) is then replaced by it in one rename, so a failed export
// leaves no DIR. A non-empty DIR is refused unless `force`: then each file is renamed into
// it, and files an earlier export wrote that this one does not (config.json of an hf-gpt2
// export replaced by a collage one, say) are removed; other files stay. Logs what it wrote.
ExportResult export_checkpoint(const ExportOptions& options);

// The files an export may write into its directory.
const std::vector<std::string>& export_file_names();

}  // namespace collage
