#pragma once
// The typed run configuration. load_config() reads YAML into these structs and rejects
// unknown keys, wrong types, out-of-range values and inconsistent combinations with the
// key path and the reason (e.g. "model.n_head: 7 does not divide model.hidden_size 768").
#include <cstdint>
#include <string>
#include <vector>

#include "backend/optimizer_step.h"

namespace collage {

struct ModelConfig {
  std::string arch = "gpt";  // gpt (bert comes later)
  int n_layer = 12;
  int hidden_size = 768;
  int n_head = 12;
  int ffn_hidden_size = 0;  // 0: 4 * hidden_size
  int vocab_size = 50257;   // real vocab; padded to a multiple of 128·tp
  int max_position_embeddings = 2048;
  std::string position_embedding = "learned";  // learned | rope
  float rope_base = 10000.0f;
  bool tie_embeddings = true;
  float init_std = 0.02f;
  float layernorm_eps = 1e-5f;

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int head_size() const { return hidden_size / n_head; }
  // Vocab rounded up to a multiple of 128·tp (Megatron's make-vocab-size-divisible-by).
  int padded_vocab(int tp = 1) const {
    int m = 128 * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

struct DatasetSource {
  std::string prefix;  // path without .bin/.idx
  double weight = 1.0;
};

struct DataConfig {
  std::vector<DatasetSource> datasets;  // blended by weight
  std::string split = "980,10,10";      // train, valid, test
  int seq_len = 1024;
  uint64_t seed = 1234;
  // Optional: build datasets[0].prefix from raw text/JSONL when missing (the demo does this).
  std::vector<std::string> prepare_from;  // files or globs
  std::string vocab_file;                 // GPT-2 encoder.json
  std::string merges_file;                // GPT-2 vocab.bpe
};

struct TrainingConfig {
  int micro_batch_size = 4;    // sequences per rank per forward
  int global_batch_size = 32;  // sequences per optimizer step (all ranks, all micro-batches)
  int64_t max_steps = 1000;
  int eval_interval = 100;  // 0: never
  int eval_iters = 10;      // micro-batches per validation
  int log_interval = 1;
  uint64_t seed = 1234;  // model init
};

struct OptimizerConfig {
  Precision precision = Precision::fp32_master;
  double lr = 6e-4;
  double min_lr = 6e-5;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;           // 0: off
  std::string schedule = "cosine";  // cosine | linear | constant
  int64_t warmup_steps = 200;
  int64_t decay_steps = 20000;  // steps from 0 to the end of the decay; then min_lr
};

struct ParallelConfig {
  std::string backend = "cpu";  // cpu | cuda | auto
  int tensor_parallel = 1;
  int threads = 0;  // cpu threads per rank; 0 = all cores
};

struct LoggingConfig {
  std::string dir = "runs/default";  // metrics.jsonl, log, resolved config
  std::string level = "info";
  std::string progress = "auto";  // auto | on | off
};

struct CheckpointConfig {
  std::string dir;   // empty: <logging.dir>/checkpoints
  int interval = 0;  // steps; 0: only at the end
  int keep = 3;      // most recent checkpoints kept
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  OptimizerConfig optimizer;
  ParallelConfig parallel;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
};

// Read and validate a YAML file; `overrides` are "a.b=value" strings applied before
// validation (value parsed as YAML). Throws Error naming the file, key path and reason.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});
// Resolved config as YAML (every key, defaults filled in): logged and saved in checkpoints.
std::string config_to_yaml(const Config& config);

const char* precision_name(Precision p);

}  // namespace collage
