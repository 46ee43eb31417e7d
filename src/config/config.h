#pragma once
// The typed run configuration. load_config() reads YAML into these structs and rejects
// unknown keys, wrong types, out-of-range values and inconsistent combinations with the
// key path and the reason (e.g. "model.n_head: 7 does not divide model.hidden_size 768").
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/precision.h"

namespace collage {

struct ModelConfig {
  std::string arch = "gpt";  // gpt | bert | roberta (encoders: src/model/bert.h)
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
  // Encoders (bert, roberta) only:
  int type_vocab_size = 2;         // token types (segments); RoBERTa: 1
  int pad_token_id = 0;            // RoBERTa: 1; its positions start past it
  float hidden_dropout = 0.1f;     // on the embeddings and each branch output
  float attention_dropout = 0.1f;  // on the attention probabilities

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int head_size() const { return hidden_size / n_head; }
  // Vocab rounded up to a multiple of 128·tp (Megatron's make-vocab-size-divisible-by).
  int padded_vocab(int tp = 1) const {
    int m = 128 * tp;
    return (vocab_size + m - 1) / m * m;
  }

  bool operator==(const ModelConfig&) const = default;
};

struct DatasetSource {
  std::string prefix;  // path without .bin/.idx
  double weight = 1.0;

  bool operator==(const DatasetSource&) const = default;
};

// Relative paths (datasets prefixes, prepare_from, vocab_file, merges_file) are kept as
// written and so resolve against the current directory of the process, not the directory of
// the YAML file (like Megatron's --data-path): run `collage` from the project root.
struct DataConfig {
  // YAML: a list of {prefix, weight} maps (weight defaults to 1), or a single string, which
  // is shorthand for one source of weight 1: `datasets: data/my-gpt2_text_document`.
  std::vector<DatasetSource> datasets;  // blended by weight
  std::string split = "980,10,10";      // train, valid, test
  int seq_len = 1024;
  uint64_t seed = 1234;
  // Optional: build datasets[0].prefix from raw text/JSONL when missing (the demo does this).
  std::vector<std::string> prepare_from;  // files or globs
  std::string vocab_file;                 // GPT-2 encoder.json (encoders: WordPiece vocab.txt)
  std::string merges_file;                // GPT-2 vocab.bpe

  // Encoders (model.arch bert | roberta) read BERT pretraining HDF5 shards instead
  // (src/data/bert/bert_hdf5.h, docs/DATA.md §8); data.datasets and data.split are GPT-only.
  std::string hdf5_train;    // a .hdf5/.h5 file or a directory of them
  std::string hdf5_valid;    // the same for validation; empty: no validation
  int max_predictions = 20;  // masked positions per sequence: the files' P
  // RoBERTa: masks drawn anew each time a sample is read (src/data/bert/dynamic_masking.h).
  bool dynamic_masking = false;
  int mask_token_id = 103;  // [MASK] (BERT uncased); RoBERTa's <mask> is 50264
  // Never masked dynamically: BERT's [PAD] [UNK] [CLS] [SEP] [MASK]; RoBERTa: 0 1 2 3 50264.
  std::vector<int> special_token_ids = {0, 100, 101, 102, 103};
  // Encoders with data.prepare_from: the text of hdf5_valid, prepared when it is missing.
  std::vector<std::string> prepare_valid_from;

  bool operator==(const DataConfig&) const = default;
};

struct TrainingConfig {
  int micro_batch_size = 4;    // sequences per rank per forward
  int global_batch_size = 32;  // sequences per optimizer step (all ranks, all micro-batches)
  int64_t max_steps = 1000;
  int eval_interval = 100;  // 0: never
  int eval_iters = 10;      // micro-batches per validation
  int log_interval = 1;
  uint64_t seed = 1234;  // model init

  bool operator==(const TrainingConfig&) const = default;
};

struct OptimizerConfig {
  Precision precision = Precision::fp32_master;
  // torch | hf: where bias correction and eps enter the update (optimizer_step.h). GPT
  // configs use torch (NeMo/PyTorch AdamW); hf is HF's AdamW (BERT/RoBERTa).
  AdamOrder adam_order = AdamOrder::torch;
  // Reproduce the published collage-plus code's in-place Mult (docs/PRECISION.md §8) for
  // comparisons with the paper's runs. Only collage-plus has that code path, so validation
  // rejects true with any other precision (silently ignoring it would hide a mistaken config).
  bool collage_plus_reference_quirk = false;
  bool edq = true;  // compute effective descent quality every step (docs/PRECISION.md §7)
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

  bool operator==(const OptimizerConfig&) const = default;
};

struct ParallelConfig {
  // auto (cuda when a GPU can be used, else cpu) | cpu | cuda | cuda-emulated (the cuda
  // backend's kernels run on the CPU by the host SIMT emulator: slow, for checking kernels)
  std::string backend = "cpu";
  // Ranks per tensor-parallel group; the data-parallel size is the mpirun world size / this.
  int tensor_parallel = 1;
  // 1: ZeRO-1, the optimizer state sharded over the data-parallel ranks (docs/PARALLEL.md §4).
  int zero = 0;
  // Seconds a rank may go silent (dead, stopped) before the job is ended, naming it; 0: no
  // watchdog (e.g. to stop a rank in a debugger). docs/PARALLEL.md §6.
  double comm_timeout = 30;
  int threads = 0;  // cpu threads per rank; 0 = all cores
  // The cpu backend's GEMMs: auto (oneDNN's bf16 matmul where oneDNN has one: AVX-512 CPUs,
  // fastest with AMX-BF16 or AVX512-BF16; else OpenBLAS sgemm on widened tiles) | onednn |
  // openblas.
  std::string cpu_gemm = "auto";

  bool operator==(const ParallelConfig&) const = default;
};

struct LoggingConfig {
  std::string dir = "runs/default";  // metrics.jsonl, log, resolved config
  std::string level = "info";
  std::string progress = "auto";  // auto | on | off
  // EDQ per layer group as well as globally: embeddings, h.0 ... h.{L-1}, head (ln_f and
  // an untied lm_head; the encoders: mlm, pooler, nsp), grouped by parameter-name prefix; needs
  // optimizer.edq.
  bool edq_groups = false;
  // Under mpirun: every rank writes <dir>/rank_<r>.log (rank 0 always writes train.log).
  bool all_ranks = false;

  bool operator==(const LoggingConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;   // empty: <logging.dir>/checkpoints
  int interval = 0;  // steps; 0: only at the end
  int keep = 3;      // most recent checkpoints kept

  bool operator==(const CheckpointConfig&) const = default;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  OptimizerConfig optimizer;
  ParallelConfig parallel;
  LoggingConfig logging;
  CheckpointConfig checkpoint;

  bool operator==(const Config&) const = default;
};

// Read and validate a YAML file; `overrides` are "a.b=value" strings applied before
// validation (value parsed as YAML). Throws Error naming the file, key path and reason.
// A file may define phases of one recipe (BERT's phase 1 and 2) under a top-level
// `phases: {NAME: {section: {key: value}}}`: the document is the first phase, and `phase` NAME
// applies that phase's keys on top of it (before the overrides). Every phase's keys are
// checked whichever phase runs.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   const std::string& phase = "");
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {}, const std::string& phase = "");
// Resolved config as YAML (every key, defaults filled in): logged and saved in checkpoints.
std::string config_to_yaml(const Config& config);

// A key whose value differs between two configs, with both values as YAML would write them.
struct ConfigChange {
  std::string key, old_value, new_value;
};
std::vector<ConfigChange> config_changes(const Config& old_config, const Config& new_config);

// precision_name(Precision) is in backend/optimizer_step.h, next to the enum.

// "fp32-master" -> Precision::fp32_master, ...; an unknown name throws Error listing the
// valid ones.
Precision parse_precision(const std::string& name);
// The valid names, comma-separated, for messages and --help.
std::string precision_names();

// optimizer.adam_order names: "torch" | "hf"; an unknown name throws Error listing both.
const char* adam_order_name(AdamOrder order);
AdamOrder parse_adam_order(const std::string& name);

// The checks parse_config() runs, for callers that know more than the file does: the trainer
// re-runs them with the real data-parallel size (global_batch_size must be a multiple of
// micro_batch_size * data_parallel). `origin` prefixes every message.
void validate_config(const Config& config, const std::string& origin, int data_parallel = 1);

// data.split "980,10,10" -> {0.98, 0.01, 0.01}: up to three comma-separated non-negative
// numbers (missing ones are 0), normalised to sum 1, train part > 0. Throws Error otherwise.
std::array<double, 3> parse_split(const std::string& split);

}  // namespace collage
