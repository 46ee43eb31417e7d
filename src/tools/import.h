#pragma once
// `collage import DIR --output CKPT`: a Hugging Face directory (checkpoint/hf_weights.h) as a
// collage checkpoint that `eval`, `generate`, `export` and `train --init-from` read.
//
// The checkpoint holds the weights only (metadata "weights_only": true, no optimizer state), at
// tensor-parallel 1, with a whole config:
//  - --config YAML: that config (config.json must agree with its model section);
//  - else a `collage export`'s own config (its safetensors metadata), its step and precision;
//  - else the defaults with the model section config.json describes, and the tokenizer files
//    found in DIR (vocab.json + merges.txt, or vocab.txt) as data.vocab_file/merges_file.
// `train --resume` refuses it (nothing to resume); start from it with --init-from.
#include <cstdint>
#include <string>

namespace collage {

struct ImportOptions {
  std::string source;  // DIR, or hf:DIR
  std::string output;  // the .ckpt file to write
  std::string config;  // optional run config (YAML) whose model section DIR must match
  bool force = false;  // replace an existing output file
};

struct ImportResult {
  std::string path;    // the checkpoint written
  std::string naming;  // the class read, or "collage"
  int64_t tensors = 0;
  int64_t parameters = 0;
  int64_t values_rounded = 0;
};

ImportResult import_hf_directory(const ImportOptions& options);

}  // namespace collage
