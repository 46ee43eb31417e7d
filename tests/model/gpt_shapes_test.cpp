// The GPT parameter table: counts against the published GPT-2 124M figure and the
// per-layer formula, table invariants, tensor-parallel shard shapes and the init's shard
// extraction, config validation. No backend or allocation needed.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "model/gpt.h"
#include "model/weight_init.h"

namespace collage {
namespace {

ModelConfig gpt2_124m() {
  ModelConfig config;  // defaults: L 12, C 768, 12 heads, vocab 50257, tied, learned
  config.max_position_embeddings = 1024;
  return config;
}

int64_t total(const std::vector<ParameterInfo>& table) {
  int64_t n = 0;
  for (const ParameterInfo& info : table) n += info.numel;
  return n;
}

const ParameterInfo& find(const std::vector<ParameterInfo>& table, const std::string& name) {
  for (const ParameterInfo& info : table) {
    if (info.name == name) return info;
  }
  throw std::runtime_error("no parameter " + name);
}

TEST(GptShapes, Gpt2SmallHasTheLlmcParameterCount) {
  const ModelConfig config = gpt2_124m();
  ASSERT_EQ(config.padded_vocab(), 50304);
  const int64_t C = 768, L = 12, Vp = 50304, T = 1024;
  // Per layer: qkv 3C²+3C, proj C²+C, fc1 4C²+4C, fc2 4C²+C, two layernorms 4C.
  const int64_t per_layer = 12 * C * C + 13 * C;
  const int64_t formula = Vp * C + T * C + L * per_layer + 2 * C;
  EXPECT_EQ(formula, 124475904);  // llm.c's GPT-2 (124M) with the padded vocab
  EXPECT_EQ(total(GPT::parameter_table(config)), formula);
  EXPECT_EQ(GPT::parameter_table(config).size(), 2u + 12 * 12 + 2);
}

TEST(GptShapes, UntiedRopeHasAHeadAndNoPositionTable) {
  ModelConfig config = gpt2_124m();
  config.tie_embeddings = false;
  config.position_embedding = "rope";
  const auto table = GPT::parameter_table(config);
  const int64_t C = 768, Vp = 50304;
  EXPECT_EQ(total(table), 2 * Vp * C + 12 * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(find(table, "lm_head.weight").shape, (std::vector<int64_t>{Vp, C}));
  for (const ParameterInfo& info : table) EXPECT_NE(info.name, "wpe.weight");
}

TEST(GptShapes, TableIsContiguousUniqueAndDecaysExactlyTheMatrices) {
  ModelConfig config = gpt2_124m();
  config.tie_embeddings = false;
  const auto table = GPT::parameter_table(config);
  std::set<std::string> names;
  int64_t offset = 0;
  for (const ParameterInfo& info : table) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_EQ(info.offset, offset) << info.name;
    int64_t numel = 1;
    for (int64_t d : info.shape) numel *= d;
    EXPECT_EQ(info.numel, numel) << info.name;
    EXPECT_EQ(info.weight_decay, info.shape.size() == 2) << info.name;
    offset += info.numel;
  }
  EXPECT_EQ(table.front().name, "wte.weight");
  EXPECT_EQ(table.back().name, "lm_head.weight");
}

TEST(GptShapes, TensorParallelShardShapes) {
  ModelConfig config = gpt2_124m();
  config.tie_embeddings = false;
  const int64_t C = 768, F = 3072, Vp2 = 50432;  // vocab padded to a multiple of 256
  const auto t = GPT::parameter_table(config, 2);
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(find(t, "wte.weight").shape, (Shape{Vp2 / 2, C}));
  EXPECT_EQ(find(t, "lm_head.weight").shape, (Shape{Vp2 / 2, C}));
  EXPECT_EQ(find(t, "wpe.weight").shape, (Shape{1024, C}));
  EXPECT_EQ(find(t, "h.5.attn.qkv.weight").shape, (Shape{3 * C / 2, C}));
  EXPECT_EQ(find(t, "h.5.attn.qkv.bias").shape, (Shape{3 * C / 2}));
  EXPECT_EQ(find(t, "h.5.attn.proj.weight").shape, (Shape{C, C / 2}));
  EXPECT_EQ(find(t, "h.5.attn.proj.bias").shape, (Shape{C}));
  EXPECT_EQ(find(t, "h.5.mlp.fc1.weight").shape, (Shape{F / 2, C}));
  EXPECT_EQ(find(t, "h.5.mlp.fc1.bias").shape, (Shape{F / 2}));
  EXPECT_EQ(find(t, "h.5.mlp.fc2.weight").shape, (Shape{C, F / 2}));
  EXPECT_EQ(find(t, "h.5.mlp.fc2.bias").shape, (Shape{C}));
  EXPECT_EQ(find(t, "h.5.ln_2.weight").shape, (Shape{C}));
}

TEST(GptShapes, ShardExtractionTakesTheRanksHeadsRowsAndColumns) {
  ModelConfig config;
  config.n_layer = 1;
  config.hidden_size = 4;
  config.n_head = 2;
  config.vocab_size = 10;
  const auto t = GPT::parameter_table(config, 2);
  auto iota = [](int64_t n) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = float(i);
    return v;
  };
  // qkv (12, 4): rank 1 owns head 1 = rows 2..3 of each of q (0..3), k (4..7), v (8..11).
  const ParameterInfo& qkv = find(t, "h.0.attn.qkv.weight");
  std::vector<float> shard = extract_shard(iota(48), qkv, {2, 1});
  std::vector<float> want;
  for (int row : {2, 3, 6, 7, 10, 11}) {
    for (int col = 0; col < 4; ++col) want.push_back(float(row * 4 + col));
  }
  EXPECT_EQ(shard, want);
  // proj (4, 4) row-parallel: rank 1 owns columns 2..3 of every row.
  shard = extract_shard(iota(16), find(t, "h.0.attn.proj.weight"), {2, 1});
  EXPECT_EQ(shard, (std::vector<float>{2, 3, 6, 7, 10, 11, 14, 15}));
  // fc1 bias (16) column-parallel: rank 0 owns the first half.
  shard = extract_shard(iota(16), find(t, "h.0.mlp.fc1.bias"), {2, 0});
  EXPECT_EQ(shard, iota(8));
}

TEST(GptShapes, InvalidConfigsNameTheKey) {
  ModelConfig config = gpt2_124m();
  config.n_head = 7;
  EXPECT_THROW(GPT::parameter_table(config), Error);
  config = gpt2_124m();
  config.position_embedding = "alibi";
  try {
    GPT::parameter_table(config);
    FAIL() << "accepted position_embedding alibi";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.position_embedding"), std::string::npos);
  }
  EXPECT_THROW(GPT::parameter_table(gpt2_124m(), 5), Error);  // 5 does not divide 12 heads
}

}  // namespace
}  // namespace collage
