#pragma once
// `collage export CHECKPOINT --output DIR`: a checkpoint's weights as DIR/model.safetensors
// (safetensors.h), for tools outside collage.
//
// Names (model/hf_naming.h): the Hugging Face class that computes exactly what the model does,
// with its tensor names and layouts and a config.json transformers reads:
//   gpt, learned positions  GPT2LMHeadModel     linear weights as Conv1D's (in, out)
//   gpt, rope               GPTNeoXForCausalLM  q, k, v rows grouped by head
//   bert                    BertForPreTraining  attn.qkv split into query, key and value
//   roberta                 RobertaForMaskedLM
// The vocabulary's padding rows (ids >= model.vocab_size) are left out; a tied head is left out
// as save_pretrained leaves it. With `--names collage`, or for a model no class computes,
// collage's own names and shapes at tensor-parallel 1 (gpt.h, bert.h), padding included.
// docs/HUGGING_FACE.md lists every tensor and what was checked.
//
// Values are the trained bf16 weights exactly ("BF16"), or widened exactly to "F32". Every
// safetensors file's metadata holds format "pt", the collage version, the step, the precision
// strategy, the naming (the class, or "collage") and the checkpoint's whole config (YAML, under
// "collage_config"). Files larger than --max-shard-size are split as save_pretrained splits
// them (model-00001-of-0000N.safetensors and model.safetensors.index.json).
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "model/hf_naming.h"
#include "model/parameter_info.h"
#include "numerics/bf16.h"

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

// The naming of an export: the model's Hugging Face class (hf_naming.h), or collage's own names
// (an empty model_class, with the reason) when `collage_names` is asked for or no class
// computes what the model does.
HfNaming export_naming(const ModelConfig& config, bool collage_names = false);
// "GPT2LMHeadModel", ..., or "collage": the metadata's "naming".
std::string export_naming_name(const HfNaming& naming);

// One tensor of an export: its name and shape, and its values, made when the tensor is written
// (an export holds the checkpoint's weights and one tensor, not the model twice).
struct ExportTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<std::vector<bf16>()> values;
};
// The tensors of `weights` under `naming`, in the file's order. Every parameter must be named.
std::vector<ExportTensor> export_tensors(const CheckpointWeights& weights, const HfNaming& naming);
// bf16 values as safetensors bytes of `dtype`: "BF16" as they are, "F32" widened exactly.
std::vector<uint8_t> export_bytes(const std::vector<bf16>& values, const std::string& dtype);
// export_tensors() with their bytes, all at once (for tests and small models).
std::vector<SafetensorsTensor> export_safetensors(const CheckpointWeights& weights,
                                                  const HfNaming& naming, const std::string& dtype);

struct ExportOptions {
  std::string checkpoint;          // as read_checkpoint_weights()
  std::string output;              // the export directory
  std::string dtype = "bfloat16";  // bfloat16 | float32
  bool force = false;              // write into a non-empty directory
  bool collage_names = false;      // --names collage
  // --max-shard-size: larger exports are split as save_pretrained splits them
  uint64_t max_shard_bytes = 5'000'000'000;
};

struct ExportResult {
  std::string naming;  // export_naming_name()
  std::string reason;
  std::string directory;
  std::vector<std::string> files;  // names written into it
  int64_t tensors = 0;
  uint64_t safetensors_bytes = 0;
  int64_t step = 0;
  double seconds = 0;
};

// Writes the export: model.safetensors, with a Hugging Face class config.json (and
// tokenizer_config.json with the tokenizer), and the tokenizer files the checkpoint's config names
// when they exist (GPT: data.vocab_file -> vocab.json, data.merges_file -> merges.txt; encoders:
// vocab.txt). Everything is written into a hidden staging directory beside DIR first and fsynced; a
// DIR that does not exist (or is empty) is then replaced by it in one rename, so a failed export
// leaves no DIR. A non-empty DIR is refused unless `force`: then each file is renamed into
// it, and files an earlier export wrote that this one does not (config.json of a Hugging Face
// export replaced by a collage one, say) are removed; other files stay. Logs what it wrote.
ExportResult export_checkpoint(const ExportOptions& options);

// The files an export may write into its directory, and its shards' names.
const std::vector<std::string>& export_file_names();
bool is_export_shard_name(const std::string& name);

}  // namespace collage
