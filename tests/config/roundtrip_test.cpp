// config_to_yaml() writes every key, and parsing what it writes gives back the identical
// Config (every float bit for bit), for hand-picked awkward values and for random ones.
#include <gtest/gtest.h>

#include <random>

#include "config_test_util.h"

namespace collage {
namespace {

Config roundtrip(const Config& c) { return parse_config(config_to_yaml(c), "resolved.yaml"); }

TEST(ConfigRoundTrip, AwkwardValuesSurvive) {
  Config c;
  c.model.n_layer = 3;
  c.model.hidden_size = 96;
  c.model.n_head = 6;
  c.model.ffn_hidden_size = 200;
  c.model.position_embedding = "rope";
  c.model.rope_base = 500000.0f;
  c.model.tie_embeddings = false;
  c.model.init_std = 0.021f;  // not exactly representable: needs the shortest float form
  c.model.layernorm_eps = 1e-12f;
  c.data.datasets = {
      {"data/a b", 0.1}, {"on", 1.0 / 3.0}, {"-dash", 2}, {"quote\"back\\slash", 1e-300}};
  c.data.split = "98/1/1";
  c.data.seed = 18446744073709551615ull;
  c.training.max_steps = int64_t{1} << 40;
  c.training.seed = 0;
  c.optimizer.precision = Precision::collage_plus;
  c.optimizer.adam_order = AdamOrder::hf;
  c.optimizer.collage_plus_reference_quirk = true;
  c.optimizer.edq = true;
  c.optimizer.lr = 0.1 + 0.2;  // 0.30000000000000004
  c.optimizer.min_lr = 1e-7;
  c.optimizer.beta2 = 0.999;
  c.optimizer.eps = 5e-324;  // the smallest subnormal double
  c.optimizer.schedule = "linear";
  c.parallel.backend = "auto";
  c.parallel.tensor_parallel = 2;
  c.logging.dir = "runs/x: y";
  c.logging.progress = "off";
  c.logging.edq_groups = true;
  c.checkpoint.dir = "";
  c.checkpoint.keep = 1;
  EXPECT_EQ(roundtrip(c), c) << config_to_yaml(c);

  // prepare_from needs exactly one dataset, so its awkward strings get a config of their own.
  Config p;
  p.data.datasets = {{"data/cache/x", 1}};
  p.data.prepare_from = {"data/*.txt", "a,b", "#not a comment", "[x]", "tab\there", "*.txt"};
  p.data.vocab_file = "true";
  p.data.merges_file = "null";
  EXPECT_EQ(roundtrip(p), p) << config_to_yaml(p);

  // An encoder's data keys, with a one-element and an empty id list.
  Config e;
  e.model.arch = "roberta";
  e.model.vocab_size = 50265;
  e.data.hdf5_train = "data/roberta train";
  e.data.hdf5_valid = "yes";
  e.data.max_predictions = 80;
  e.data.seq_len = 512;
  e.data.dynamic_masking = true;
  e.data.mask_token_id = 50264;
  e.data.special_token_ids = {50264};
  EXPECT_EQ(roundtrip(e), e) << config_to_yaml(e);
  e.data.special_token_ids = {};
  EXPECT_EQ(roundtrip(e), e) << config_to_yaml(e);
}

TEST(ConfigRoundTrip, WritesEveryKey) {
  Config c;
  c.data.datasets = {{"d", 1}};
  std::string yaml = config_to_yaml(c);
  // A few keys spelled out independently of the key table, one per section.
  for (const char* line : {"model:\n",
                           "  n_layer: 12\n",
                           "  tie_embeddings: true\n",
                           "data:\n",
                           "  datasets:\n    - prefix: d\n      weight: 1\n",
                           "  prepare_from: []\n",
                           "  vocab_file: \"\"\n",
                           "  special_token_ids: [0, 100, 101, 102, 103]\n",
                           "training:\n",
                           "  max_steps: 1000\n",
                           "optimizer:\n",
                           "  precision: fp32-master\n",
                           "  adam_order: torch\n",
                           "  collage_plus_reference_quirk: false\n",
                           "  edq: true\n",
                           "  lr: 0.0006\n",
                           "parallel:\n",
                           "  backend: cpu\n",
                           "  cpu_gemm: auto\n",
                           "logging:\n",
                           "  progress: auto\n",
                           "  edq_groups: false\n",
                           "checkpoint:\n",
                           "  dir: \"\"\n",
                           "  keep: 3\n"})
    EXPECT_NE(yaml.find(line), std::string::npos) << "missing " << line << " in\n" << yaml;
  // 65 keys, each on its own line under its section (datasets takes two more per source).
  size_t key_lines = 0;
  for (size_t pos = 0; (pos = yaml.find("\n  ", pos)) != std::string::npos; pos++)
    if (yaml[pos + 3] != ' ') key_lines++;
  EXPECT_EQ(key_lines, 65u) << yaml;
  EXPECT_EQ(roundtrip(c), c);
}

TEST(ConfigRoundTrip, RandomValuesSurviveBitForBit) {
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto log_uniform = [&](double lo, double hi) {
    return std::exp(std::log(lo) + unit(gen) * (std::log(hi) - std::log(lo)));
  };
  for (int trial = 0; trial < 200; trial++) {
    Config c;
    c.data.datasets = {{"a", log_uniform(1e-3, 1e3)}, {"b", log_uniform(1e-3, 1e3)}};
    c.model.init_std = static_cast<float>(log_uniform(1e-4, 1));
    c.model.layernorm_eps = static_cast<float>(log_uniform(1e-12, 1e-3));
    c.model.rope_base = static_cast<float>(log_uniform(1, 1e7));
    c.optimizer.lr = log_uniform(1e-6, 1e-1);
    c.optimizer.min_lr = c.optimizer.lr * unit(gen);
    c.optimizer.beta1 = unit(gen) * 0.5 + 0.25;
    c.optimizer.beta2 = 1 - log_uniform(1e-6, 0.5);
    c.optimizer.eps = log_uniform(1e-30, 1e-3);
    c.optimizer.weight_decay = unit(gen);
    c.optimizer.grad_clip = log_uniform(1e-3, 1e3);
    c.data.seed = gen();
    c.training.seed = gen();
    ASSERT_EQ(roundtrip(c), c) << config_to_yaml(c);
  }
}

TEST(PrecisionNames, MatchTheDocumentedSpellings) {
  const std::pair<Precision, const char*> documented[] = {
      {Precision::fp32_master, "fp32-master"},
      {Precision::bf16, "bf16"},
      {Precision::collage_light, "collage-light"},
      {Precision::collage_plus, "collage-plus"},
      {Precision::kahan, "kahan"},
      {Precision::stochastic, "stochastic"}};
  for (auto [p, name] : documented) {
    EXPECT_STREQ(precision_name(p), name);
    EXPECT_EQ(parse_precision(name), p);
  }
  EXPECT_EQ(precision_names(), "fp32-master, bf16, collage-light, collage-plus, kahan, stochastic");
  EXPECT_THROW(parse_precision("fp32_master"), Error);
  EXPECT_THROW(parse_precision(""), Error);
}

}  // namespace
}  // namespace collage
