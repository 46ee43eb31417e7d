// Range, enum and consistency checks: each rejection names the origin, the full key path
// and the reason, compared as the whole message.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace collage {
namespace {

using testing::error_of;
using testing::kMinimalYaml;
using testing::with;

struct Rejection {
  std::string section, body, message;
};

void expect_rejections(const std::vector<Rejection>& cases) {
  for (const Rejection& r : cases)
    EXPECT_EQ(error_of(with(r.section, r.body)), "t.yaml: " + r.message) << r.body;
}

TEST(ConfigValidate, RejectsOutOfRangeValues) {
  expect_rejections({
      {"model", "n_layer: 0", "model.n_layer: must be > 0, got 0"},
      {"model", "hidden_size: -768", "model.hidden_size: must be > 0, got -768"},
      {"model", "n_head: 0", "model.n_head: must be > 0, got 0"},
      {"model", "ffn_hidden_size: -1", "model.ffn_hidden_size: must be >= 0, got -1"},
      {"model", "vocab_size: 0", "model.vocab_size: must be > 0, got 0"},
      {"model", "max_position_embeddings: 0", "model.max_position_embeddings: must be > 0, got 0"},
      {"model", "init_std: 0", "model.init_std: must be > 0, got 0"},
      {"model", "layernorm_eps: -1e-5", "model.layernorm_eps: must be > 0, got -1e-05"},
      {"model", "rope_base: 0", "model.rope_base: must be > 0, got 0"},
      {"training", "micro_batch_size: 0", "training.micro_batch_size: must be > 0, got 0"},
      {"training", "global_batch_size: -32", "training.global_batch_size: must be > 0, got -32"},
      {"training", "max_steps: 0", "training.max_steps: must be > 0, got 0"},
      {"training", "eval_interval: -1", "training.eval_interval: must be >= 0, got -1"},
      {"training", "eval_iters: 0",
       "training.eval_iters: must be > 0 when training.eval_interval is 100"},
      {"training", "log_interval: 0", "training.log_interval: must be > 0, got 0"},
      {"optimizer", "lr: 0", "optimizer.lr: must be > 0, got 0"},
      {"optimizer", "lr: -6e-4", "optimizer.lr: must be > 0, got -0.0006"},
      {"optimizer", "min_lr: -1e-5", "optimizer.min_lr: must be >= 0, got -1e-05"},
      {"optimizer", "min_lr: 1e-3", "optimizer.min_lr: 0.001 is larger than optimizer.lr 0.0006"},
      {"optimizer", "beta1: 1", "optimizer.beta1: must be in (0, 1), got 1"},
      {"optimizer", "beta1: 0", "optimizer.beta1: must be in (0, 1), got 0"},
      {"optimizer", "beta2: 1.5", "optimizer.beta2: must be in (0, 1), got 1.5"},
      {"optimizer", "eps: 0", "optimizer.eps: must be > 0, got 0"},
      {"optimizer", "weight_decay: -0.1", "optimizer.weight_decay: must be >= 0, got -0.1"},
      {"optimizer", "grad_clip: -1", "optimizer.grad_clip: must be >= 0, got -1"},
      {"optimizer", "warmup_steps: -1", "optimizer.warmup_steps: must be >= 0, got -1"},
      {"optimizer", "decay_steps: 0", "optimizer.decay_steps: must be > 0, got 0"},
      {"optimizer", "{warmup_steps: 300, decay_steps: 200}",
       "optimizer.warmup_steps: 300 is larger than optimizer.decay_steps 200"},
      {"parallel", "tensor_parallel: 0", "parallel.tensor_parallel: must be > 0, got 0"},
      {"parallel", "threads: -2", "parallel.threads: must be >= 0, got -2"},
      {"logging", "dir: ''", "logging.dir: empty"},
      {"checkpoint", "interval: -5", "checkpoint.interval: must be >= 0, got -5"},
      {"checkpoint", "keep: 0", "checkpoint.keep: must be > 0, got 0"},
  });
  // Boundaries that are allowed.
  parse_config(with("optimizer", "{weight_decay: 0, grad_clip: 0, min_lr: 6e-4, warmup_steps: 0}"),
               "t.yaml");
  parse_config(with("optimizer", "{schedule: constant, warmup_steps: 300, decay_steps: 200}"),
               "t.yaml");
  parse_config(with("training", "{eval_interval: 0, eval_iters: 0}"), "t.yaml");
}

TEST(ConfigValidate, RejectsUnknownEnumValues) {
  expect_rejections({
      {"model", "arch: llama", "model.arch: expected one of gpt|bert|roberta, got 'llama'"},
      {"model", "position_embedding: alibi",
       "model.position_embedding: expected one of learned|rope, got 'alibi'"},
      {"optimizer", "schedule: step",
       "optimizer.schedule: expected one of cosine|linear|constant, got 'step'"},
      {"parallel", "backend: tpu",
       "parallel.backend: expected one of auto|cpu|cuda|cuda-emulated, got 'tpu'"},
      {"logging", "progress: yes", "logging.progress: expected one of auto|on|off, got 'yes'"},
      {"logging", "level: loud",
       "logging.level: expected one of trace|debug|info|warn|error|critical|off, got 'loud'"},
  });
  for (const char* ok : {"schedule: linear", "schedule: constant"})
    parse_config(with("optimizer", ok), "t.yaml");
  for (const char* ok : {"backend: cuda", "backend: auto"})
    parse_config(with("parallel", ok), "t.yaml");
  for (const char* ok : {"progress: on", "progress: off"})
    parse_config(with("logging", ok), "t.yaml");
}

TEST(ConfigValidate, ReferenceQuirkOnlyWithCollagePlusAndEdqGroupsOnlyWithEdq) {
  // The quirk changes collage-plus's Mult; with any other strategy it would do nothing.
  for (const char* precision : {"fp32-master", "bf16", "collage-light", "kahan", "stochastic"})
    EXPECT_EQ(error_of(with("optimizer", std::string("{precision: ") + precision +
                                             ", collage_plus_reference_quirk: true}")),
              std::string("t.yaml: optimizer.collage_plus_reference_quirk: true only applies to "
                          "optimizer.precision collage-plus, but the precision is '") +
                  precision + "'");
  Config c = parse_config(
      with("optimizer", "{precision: collage-plus, collage_plus_reference_quirk: true}"), "t.yaml");
  EXPECT_TRUE(c.optimizer.collage_plus_reference_quirk);
  // An override naming the quirk is reported as the override.
  EXPECT_EQ(error_of(kMinimalYaml, {"optimizer.collage_plus_reference_quirk=true"}),
            "t.yaml (--set optimizer.collage_plus_reference_quirk=true): "
            "optimizer.collage_plus_reference_quirk: true only applies to optimizer.precision "
            "collage-plus, but the precision is 'fp32-master'");

  EXPECT_EQ(error_of(std::string(kMinimalYaml) +
                     "optimizer:\n  edq: false\nlogging:\n  edq_groups: true\n"),
            "t.yaml: logging.edq_groups: true needs optimizer.edq: true (EDQ is switched off)");
  c = parse_config(std::string(kMinimalYaml) + "optimizer:\n  edq: false\n", "t.yaml");
  EXPECT_FALSE(c.optimizer.edq);
  EXPECT_FALSE(c.logging.edq_groups);
}

TEST(ConfigValidate, RejectsInconsistentModelShapes) {
  expect_rejections({
      {"model", "n_head: 7", "model.n_head: 7 does not divide model.hidden_size 768"},
      {"model", "{hidden_size: 96, n_head: 32, position_embedding: rope}",
       "model.position_embedding: rope needs an even head size, but model.hidden_size 96 / "
       "model.n_head 32 = 3"},
  });
  // The position table caps seq_len, learned or rope (the rope table has as many rows), and
  // RoBERTa's positions start past the padding id: checked before any data is read.
  EXPECT_EQ(error_of("data:\n  datasets: d\n  seq_len: 2049\n"),
            "t.yaml: data.seq_len: 2049 needs 2049 positions, more than "
            "model.max_position_embeddings 2048");
  parse_config("data:\n  datasets: d\n  seq_len: 2048\n", "t.yaml");
  EXPECT_EQ(error_of("data:\n  datasets: d\n  seq_len: 4096\nmodel:\n  position_embedding: rope\n"),
            "t.yaml: data.seq_len: 4096 needs 4096 positions, more than "
            "model.max_position_embeddings 2048");
  EXPECT_EQ(error_of("model: {arch: roberta, vocab_size: 100, pad_token_id: 1, "
                     "max_position_embeddings: 514}\ndata: {hdf5_train: d, seq_len: 513}\n"),
            "t.yaml: data.seq_len: 513 needs 515 positions, more than "
            "model.max_position_embeddings 514");
  parse_config(with("model", "{hidden_size: 96, n_head: 32}"), "t.yaml");  // odd head, learned
}

TEST(ConfigValidate, RejectsShapesThatDoNotSplitOverTensorParallel) {
  EXPECT_EQ(error_of(with("parallel", "tensor_parallel: 8")),
            "t.yaml: model.n_head: 12 heads do not split over parallel.tensor_parallel 8");
  EXPECT_EQ(error_of(std::string(kMinimalYaml) +
                     "parallel:\n  tensor_parallel: 4\nmodel:\n  ffn_hidden_size: 3002\n"),
            "t.yaml: model.ffn_hidden_size: 3002 does not split over parallel.tensor_parallel 4");
  parse_config(with("parallel", "tensor_parallel: 4"), "t.yaml");
}

TEST(ConfigValidate, GlobalBatchIsAMultipleOfMicroBatchTimesDataParallel) {
  EXPECT_EQ(error_of(with("training", "{micro_batch_size: 4, global_batch_size: 30}")),
            "t.yaml: training.global_batch_size: 30 is not a multiple of "
            "training.micro_batch_size 4 * data-parallel size 1");
  Config c =
      parse_config(with("training", "{micro_batch_size: 8, global_batch_size: 16}"), "t.yaml");
  validate_config(c, "t.yaml", 2);
  try {
    validate_config(c, "t.yaml", 4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "t.yaml: training.global_batch_size: 16 is not a multiple of "
                 "training.micro_batch_size 8 * data-parallel size 4");
  }
}

TEST(ConfigValidate, RejectsBadDataSections) {
  auto data = [](const std::string& body) { return error_of("data:\n" + body); };
  EXPECT_EQ(
      data("  datasets: []\n"),
      "t.yaml: data.datasets: empty: give at least one {prefix, weight} (or a prefix string)");
  EXPECT_EQ(
      error_of("model:\n  n_layer: 2\n"),
      "t.yaml: data.datasets: empty: give at least one {prefix, weight} (or a prefix string)");
  EXPECT_EQ(data("  datasets: [a, {prefix: b, weight: 0}]\n"),
            "t.yaml: data.datasets[1].weight: must be > 0, got 0");
  EXPECT_EQ(data("  datasets: [{prefix: b, weight: -2}]\n"),
            "t.yaml: data.datasets[0].weight: must be > 0, got -2");
  EXPECT_EQ(data("  datasets: [{prefix: ''}]\n"), "t.yaml: data.datasets[0].prefix: empty");
  EXPECT_EQ(data("  datasets: a\n  seq_len: 0\n"), "t.yaml: data.seq_len: must be > 0, got 0");
  const std::string usage =
      "expected up to three non-negative numbers separated by ',' like 980,10,10";
  for (const char* split : {"98,x,1", "1,2,3,4", "", "98,,1", "-1,2,3", "inf,1,1"})
    EXPECT_EQ(data(std::string("  datasets: a\n  split: '") + split + "'\n"),
              std::string("t.yaml: data.split: malformed split '") + split + "': " + usage);
  EXPECT_EQ(data("  datasets: a\n  split: 0,5,5\n"),
            "t.yaml: data.split: split '0,5,5' leaves no training data (first part must be > 0)");
  EXPECT_EQ(data("  datasets: a\n  prepare_from: [x.txt]\n  merges_file: m\n"),
            "t.yaml: data.vocab_file: required with data.prepare_from");
  EXPECT_EQ(data("  datasets: a\n  prepare_from: [x.txt]\n  vocab_file: v\n"),
            "t.yaml: data.merges_file: required with data.prepare_from");
  EXPECT_EQ(data("  datasets: [a, b]\n  prepare_from: x.txt\n  vocab_file: v\n  merges_file: m\n"),
            "t.yaml: data.prepare_from: builds a single dataset, but data.datasets lists 2");
}

TEST(ConfigValidate, RejectsBadEncoderDataSections) {
  auto encoder = [](const std::string& data) {
    return error_of("model:\n  arch: bert\n  vocab_size: 1000\ndata:\n  seq_len: 128\n" + data);
  };
  EXPECT_EQ(encoder(""),
            "t.yaml: data.hdf5_train: required for model.arch bert: a .hdf5 file or a directory "
            "of them");
  EXPECT_EQ(encoder("  hdf5_train: d\n  datasets: a\n"),
            "t.yaml: data.datasets: is for GPT (Megatron .bin/.idx); model.arch bert reads "
            "data.hdf5_train and data.hdf5_valid");
  EXPECT_EQ(encoder("  hdf5_train: d\n  max_predictions: 129\n"),
            "t.yaml: data.max_predictions: 129 is not in [1, data.seq_len = 128]");
  EXPECT_EQ(encoder("  hdf5_train: d\n  mask_token_id: 1000\n"),
            "t.yaml: data.mask_token_id: 1000 is not a token id below model.vocab_size 1000");
  EXPECT_EQ(encoder("  hdf5_train: d\n  special_token_ids: [0, -1]\n"),
            "t.yaml: data.special_token_ids[1]: -1 is not a token id below model.vocab_size 1000");
  EXPECT_EQ(encoder("  hdf5_train: d\n  merges_file: m\n"),
            "t.yaml: data.merges_file: is GPT-2 BPE's; model.arch bert prepares text with "
            "WordPiece (data.vocab_file)");
  EXPECT_EQ(encoder("  hdf5_train: d\n  hdf5_valid: v\n  prepare_valid_from: [v.txt]\n"),
            "t.yaml: data.prepare_valid_from: needs data.prepare_from (the training text)");
  EXPECT_EQ(encoder("  hdf5_train: d\n  prepare_from: [t.txt]\n  prepare_valid_from: [v.txt]\n"),
            "t.yaml: data.prepare_valid_from: needs data.hdf5_valid (where to write it)");
  // And the encoders' keys in a GPT config.
  EXPECT_EQ(error_of("data:\n  datasets: a\n  hdf5_train: d\n"),
            "t.yaml: data.hdf5_train: is for the encoders (model.arch bert | roberta); a GPT "
            "reads data.datasets");
  EXPECT_EQ(error_of("data:\n  datasets: a\n  dynamic_masking: true\n"),
            "t.yaml: data.dynamic_masking: is for the encoders (model.arch bert | roberta)");
}

TEST(ConfigValidate, ParseSplitNormalisesLikeMegatron) {
  auto expect_split = [](const std::string& s, double a, double b, double c) {
    std::array<double, 3> got = parse_split(s);
    EXPECT_DOUBLE_EQ(got[0], a) << s;
    EXPECT_DOUBLE_EQ(got[1], b) << s;
    EXPECT_DOUBLE_EQ(got[2], c) << s;
  };
  expect_split("980,10,10", 0.98, 0.01, 0.01);
  expect_split("98/1/1", 0.98, 0.01, 0.01);
  expect_split(" 969, 30 , 1", 0.969, 0.030, 0.001);
  expect_split("0.5,0.5", 0.5, 0.5, 0);
  expect_split("7", 1, 0, 0);
}

}  // namespace
}  // namespace collage
