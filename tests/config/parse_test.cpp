// Reading YAML into Config: defaults, unknown keys with suggestions, strict types, the
// data.datasets forms, and --set overrides. Messages are compared whole where their wording
// matters, so a change of key path or origin fails the test.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "config_test_util.h"

namespace collage {
namespace {

using testing::error_of;
using testing::kMinimalYaml;
using testing::with;

TEST(ConfigParse, MinimalConfigTakesTheDocumentedDefaults) {
  Config c = parse_config(kMinimalYaml, "t.yaml");
  // The documented defaults (config.h), written out here independently of the structs.
  EXPECT_EQ(c.model.arch, "gpt");
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.hidden_size, 768);
  EXPECT_EQ(c.model.n_head, 12);
  EXPECT_EQ(c.model.ffn(), 3072);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.padded_vocab(), 50304);
  EXPECT_EQ(c.model.position_embedding, "learned");
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_FLOAT_EQ(c.model.layernorm_eps, 1e-5f);
  ASSERT_EQ(c.data.datasets.size(), 1u);
  EXPECT_EQ(c.data.datasets[0].prefix, "data/x");
  EXPECT_EQ(c.data.datasets[0].weight, 1.0);
  EXPECT_EQ(c.data.split, "980,10,10");
  EXPECT_EQ(c.data.seq_len, 1024);
  EXPECT_EQ(c.optimizer.precision, Precision::fp32_master);
  EXPECT_EQ(c.optimizer.adam_order, AdamOrder::torch);
  EXPECT_FALSE(c.optimizer.collage_plus_reference_quirk);
  EXPECT_TRUE(c.optimizer.edq);
  EXPECT_EQ(c.optimizer.schedule, "cosine");
  EXPECT_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.parallel.backend, "cpu");
  EXPECT_EQ(c.logging.progress, "auto");
  EXPECT_FALSE(c.logging.edq_groups);
  EXPECT_EQ(c.checkpoint.keep, 3);
  // And nothing else moved away from the struct defaults.
  Config expected;
  expected.data.datasets = {{"data/x", 1.0}};
  EXPECT_EQ(c, expected);
}

TEST(ConfigParse, ReadsEveryKindOfValue) {
  Config c = parse_config(R"(
model: {n_layer: 2, hidden_size: 64, n_head: 4, tie_embeddings: false, init_std: 0.021,
        position_embedding: rope, rope_base: 500000}
data:
  datasets: [{prefix: a, weight: 0.3}, {prefix: b}, c]
  prepare_from: [x/*.txt, y.txt]
  vocab_file: v.json
  merges_file: m.bpe
  seed: 18446744073709551615
optimizer: {precision: collage-plus, lr: 1e-3, min_lr: +1e-4, warmup_steps: 10, decay_steps: 100}
logging: {progress: off, dir: ""}
checkpoint: {dir: }
)",
                          "t.yaml", {"data.datasets=[{prefix: a, weight: 0.3}]", "logging.dir=r"});
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.init_std, 0.021f);
  EXPECT_EQ(c.model.rope_base, 500000.0f);
  EXPECT_EQ(c.data.datasets, (std::vector<DatasetSource>{{"a", 0.3}}));
  EXPECT_EQ(c.data.prepare_from, (std::vector<std::string>{"x/*.txt", "y.txt"}));
  EXPECT_EQ(c.data.seed, 18446744073709551615ull);
  EXPECT_EQ(c.optimizer.precision, Precision::collage_plus);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.min_lr, 1e-4);
  EXPECT_EQ(c.logging.progress, "off");  // YAML 1.1 would read `off` as a bool
  EXPECT_EQ(c.logging.dir, "r");
  EXPECT_EQ(c.checkpoint.dir, "");
}

TEST(ConfigParse, DatasetsAcceptListsOfMapsAndThePrefixShorthand) {
  auto datasets = [](const std::string& value) {
    return parse_config("data:\n  datasets: " + value + "\n", "t.yaml").data.datasets;
  };
  using List = std::vector<DatasetSource>;
  EXPECT_EQ(datasets("data/my-gpt2_text_document"), (List{{"data/my-gpt2_text_document", 1}}));
  EXPECT_EQ(datasets("[{prefix: a, weight: 2}, {prefix: b, weight: 0.5}]"),
            (List{{"a", 2}, {"b", 0.5}}));
  EXPECT_EQ(datasets("[a, {prefix: b}]"), (List{{"a", 1}, {"b", 1}}));
  EXPECT_EQ(error_of("data:\n  datasets: [{prefx: a}]\n"),
            "t.yaml: unknown key 'data.datasets[0].prefx' (did you mean "
            "'data.datasets[0].prefix'?)");
  EXPECT_EQ(error_of("data:\n  datasets: [a, {weight: 2}]\n"),
            "t.yaml: data.datasets[1]: missing key 'prefix'");
  EXPECT_EQ(error_of("data:\n  datasets: [a, {prefix: b, weight: heavy}]\n"),
            "t.yaml: data.datasets[1].weight: expected a finite number, got 'heavy'");
}

TEST(ConfigParse, UnknownKeysAreRejectedWithASuggestion) {
  EXPECT_EQ(error_of(with("model", "hiden_size: 1024")),
            "t.yaml: unknown key 'model.hiden_size' (did you mean 'model.hidden_size'?)");
  EXPECT_EQ(error_of(with("model", "seq_len: 128")),
            "t.yaml: unknown key 'model.seq_len' (did you mean 'data.seq_len'?)");
  EXPECT_EQ(error_of(with("optimiser", "lr: 1")),
            "t.yaml: unknown key 'optimiser' (did you mean 'optimizer'?)");
  // Nothing close: no suggestion.
  EXPECT_EQ(error_of(with("model", "quantum_flux: 3")), "t.yaml: unknown key 'model.quantum_flux'");
  EXPECT_EQ(error_of(std::string(kMinimalYaml) + "model:\n  n_layer: 2\n  n_layer: 3\n"),
            "t.yaml: duplicate key 'model.n_layer'");
}

TEST(ConfigParse, WrongTypesNameTheKeyAndTheValue) {
  EXPECT_EQ(error_of(with("model", "n_layer: twelve")),
            "t.yaml: model.n_layer: expected an integer, got 'twelve'");
  EXPECT_EQ(error_of(with("model", "n_layer: 12.0")),
            "t.yaml: model.n_layer: expected an integer, got '12.0'");
  EXPECT_EQ(error_of(with("model", "n_layer: [12]")),
            "t.yaml: model.n_layer: expected an integer, got a list");
  EXPECT_EQ(error_of(with("model", "n_layer:")),
            "t.yaml: model.n_layer: expected an integer, got nothing");
  EXPECT_EQ(error_of(with("model", "n_layer: 99999999999")),
            "t.yaml: model.n_layer: 99999999999 is out of range for this field");
  EXPECT_EQ(error_of(with("training", "seed: -1")),
            "t.yaml: training.seed: expected a non-negative integer, got '-1'");
  EXPECT_EQ(error_of(with("optimizer", "lr: fast")),
            "t.yaml: optimizer.lr: expected a finite number, got 'fast'");
  EXPECT_EQ(error_of(with("optimizer", "lr: .nan")),
            "t.yaml: optimizer.lr: expected a finite number, got '.nan'");
  EXPECT_EQ(error_of(with("model", "init_std: 1e-60")),
            "t.yaml: model.init_std: 1e-60 is out of range for this field");
  EXPECT_EQ(error_of(with("model", "tie_embeddings: maybe")),
            "t.yaml: model.tie_embeddings: expected true or false, got 'maybe'");
  EXPECT_EQ(error_of(with("logging", "dir: {a: 1}")),
            "t.yaml: logging.dir: expected a string, got a map");
  EXPECT_EQ(error_of("data:\n  datasets: a\n  prepare_from: [a, [b]]\n"),
            "t.yaml: data.prepare_from[1]: expected a string, got a list");
  EXPECT_EQ(error_of(std::string(kMinimalYaml) + "model: 3\n"),
            "t.yaml: model: expected a map, got '3'");
  EXPECT_EQ(error_of("- a\n- b\n"),
            "t.yaml: expected a map of sections (model, data, ...) at the top level, got a list");
}

TEST(ConfigParse, PrecisionIsAnEnumListingTheValidNames) {
  EXPECT_EQ(error_of(with("optimizer", "precision: fp16")),
            "t.yaml: optimizer.precision: unknown precision 'fp16' (valid: fp32-master, bf16, "
            "collage-light, collage-plus, kahan, stochastic)");
}

TEST(ConfigParse, AdamOrderIsAnEnumListingTheValidNames) {
  EXPECT_EQ(error_of(with("optimizer", "adam_order: pytorch")),
            "t.yaml: optimizer.adam_order: unknown adam order 'pytorch' (valid: torch, hf)");
  EXPECT_EQ(error_of(with("optimizer", "adam_order: [torch]")),
            "t.yaml: optimizer.adam_order: expected torch or hf, got a list");
  EXPECT_EQ(parse_config(with("optimizer", "adam_order: hf"), "t.yaml").optimizer.adam_order,
            AdamOrder::hf);
  EXPECT_EQ(parse_config(with("optimizer", "adam_order: torch"), "t.yaml").optimizer.adam_order,
            AdamOrder::torch);
  EXPECT_STREQ(adam_order_name(AdamOrder::torch), "torch");
  EXPECT_STREQ(adam_order_name(AdamOrder::hf), "hf");
  EXPECT_EQ(error_of(with("optimizer", "edq: sometimes")),
            "t.yaml: optimizer.edq: expected true or false, got 'sometimes'");
  EXPECT_EQ(error_of(with("logging", "edq_groups: 1")),
            "t.yaml: logging.edq_groups: expected true or false, got '1'");
}

TEST(ConfigParse, SyntaxErrorsNameTheFileAndLine) {
  std::string message = error_of("data:\n  datasets: [a\nmodel: {\n");
  EXPECT_EQ(message.rfind("t.yaml: YAML syntax error at line ", 0), 0u) << message;
}

TEST(ConfigOverrides, AreAppliedBeforeValidation) {
  // The file alone is invalid (seq_len 4096 > 2048 learned positions); the override fixes it.
  std::string yaml = "data:\n  datasets: d\n  seq_len: 4096\n";
  EXPECT_EQ(error_of(yaml),
            "t.yaml: data.seq_len: 4096 needs 4096 positions, more than "
            "model.max_position_embeddings 2048");
  Config c = parse_config(yaml, "t.yaml", {"data.seq_len=512", "training.max_steps=7"});
  EXPECT_EQ(c.data.seq_len, 512);
  EXPECT_EQ(c.training.max_steps, 7);
  // Later overrides win; values are YAML (flow lists, quoted strings, enums).
  c = parse_config(kMinimalYaml, "t.yaml",
                   {"training.max_steps=7", "training.max_steps=9", "optimizer.precision=kahan",
                    "data.datasets=[{prefix: p, weight: 3}, q]", "logging.dir='a b'"});
  EXPECT_EQ(c.training.max_steps, 9);
  EXPECT_EQ(c.optimizer.precision, Precision::kahan);
  EXPECT_EQ(c.data.datasets, (std::vector<DatasetSource>{{"p", 3}, {"q", 1}}));
  EXPECT_EQ(c.logging.dir, "a b");
}

TEST(ConfigOverrides, ErrorsNameTheOverride) {
  EXPECT_EQ(error_of(kMinimalYaml, {"model.hiden_size=1024"}),
            "t.yaml: --set model.hiden_size=1024: unknown key 'model.hiden_size' (did you mean "
            "'model.hidden_size'?)");
  EXPECT_EQ(error_of(kMinimalYaml, {"model"}),
            "t.yaml: --set 'model': expected key.path=value, e.g. training.max_steps=100");
  EXPECT_EQ(error_of(kMinimalYaml, {"model.n_layer=twelve"}),
            "t.yaml (--set model.n_layer=twelve): model.n_layer: expected an integer, got "
            "'twelve'");
  // A range error on an overridden key names the override; on other keys only the file.
  EXPECT_EQ(error_of(kMinimalYaml, {"model.n_head=7"}),
            "t.yaml (--set model.n_head=7): model.n_head: 7 does not divide model.hidden_size "
            "768");
  EXPECT_EQ(error_of(kMinimalYaml, {"data.datasets=[a, {prefix: b, weight: 0}]"}),
            "t.yaml (--set data.datasets=[a, {prefix: b, weight: 0}]): data.datasets[1].weight: "
            "must be > 0, got 0");
}

TEST(ConfigLoad, ReadsAFileAndNamesAMissingOne) {
  std::string path = ::testing::TempDir() + "collage_config_load_test.yaml";
  {
    std::ofstream out(path);
    out << "data:\n  datasets: d\nmodel:\n  n_layer: 0\n";
  }
  try {
    load_config(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": model.n_layer: must be > 0, got 0");
  }
  EXPECT_EQ(load_config(path, {"model.n_layer=3"}).model.n_layer, 3);
  std::remove(path.c_str());
  try {
    load_config(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot read config file", 0), 0u) << e.what();
  }
}

// phases: the document is the first phase; --phase NAME applies that phase's keys on top,
// before --set; every phase's keys are checked whichever runs.
TEST(ConfigPhases, APhaseOverridesTheDocumentAndSetOverridesThePhase) {
  const std::string yaml = std::string(kMinimalYaml) +
                           "training: {max_steps: 100, seed: 7}\n"
                           "phases:\n"
                           "  2:\n"
                           "    training: {max_steps: 30}\n"
                           "    data: {seq_len: 512}\n";
  const Config one = parse_config(yaml, "t.yaml");
  EXPECT_EQ(one.training.max_steps, 100);
  EXPECT_EQ(one.data.seq_len, 1024);
  const Config two = parse_config(yaml, "t.yaml", {}, "2");
  EXPECT_EQ(two.training.max_steps, 30);
  EXPECT_EQ(two.data.seq_len, 512);
  EXPECT_EQ(two.training.seed, 7u);  // untouched keys keep the document's value
  EXPECT_EQ(parse_config(yaml, "t.yaml", {"training.max_steps=5"}, "2").training.max_steps, 5);
  EXPECT_EQ(testing::error_of_phase(yaml, "3"),
            "t.yaml: --phase 3: no such phase; the file defines 2");
  EXPECT_EQ(testing::error_of_phase(kMinimalYaml, "2"),
            "t.yaml: --phase 2: the file defines no phases");
  // A typo in phase 2 is caught when phase 1 runs.
  EXPECT_EQ(testing::error_of(yaml + "  3:\n    training: {max_step: 1}\n"),
            "t.yaml (phases.3): unknown key 'training.max_step' (did you mean "
            "'training.max_steps'?)");
  // A phase's value is validated like the document's.
  EXPECT_EQ(testing::error_of_phase(yaml + "  4:\n    training: {max_steps: 0}\n", "4"),
            "t.yaml (phase 4): training.max_steps: must be > 0, got 0");
}

}  // namespace
}  // namespace collage
