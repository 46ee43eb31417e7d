// collage generate's library side (tools/generate.h): the sampler's choices, and greedy
// generation equal to an independent argmax over the model's logits, the window sliding once
// the text outgrows data.seq_len.
#include "tools/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "checkpoint/checkpoint_info.h"
#include "checkpoint/training_checkpoint.h"
#include "model/gpt.h"
#include "tiny_run.h"
#include "train/trainer.h"

namespace collage {
namespace {

TEST(SampleToken, GreedyIsTheArgmaxWithTheLowestIdOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  std::mt19937_64 rng(1);
  SamplingOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_token(logits.data(), 5, greedy, rng), 1);
  EXPECT_EQ(sample_token(logits.data(), 1, greedy, rng), 0);  // only the first `vocab` count
  // top-k 1 at any temperature and seed is greedy.
  for (uint64_t seed = 0; seed < 20; seed++) {
    SamplingOptions top1;
    top1.temperature = 1.5;
    top1.top_k = 1;
    std::mt19937_64 r(seed);
    EXPECT_EQ(sample_token(logits.data(), 5, top1, r), 1);
  }
}

TEST(SampleToken, TopKAndTemperatureShapeTheDraws) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  SamplingOptions options;
  options.temperature = 1.0;
  options.top_k = 0;
  std::mt19937_64 rng(7);
  std::map<int, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; i++) counts[sample_token(logits.data(), 5, options, rng)]++;
  double total = 0;
  for (float x : logits) total += std::exp(double(x));
  for (int id = 0; id < 5; id++) {
    const double p = std::exp(double(logits[id])) / total;
    EXPECT_NEAR(counts[id] / double(draws), p, 4 * std::sqrt(p * (1 - p) / draws) + 1e-3) << id;
  }
  // top-k 2: only ids 2 and 0, in the ratio e^(2-1)/T.
  options.top_k = 2;
  options.temperature = 0.5;
  counts.clear();
  for (int i = 0; i < draws; i++) counts[sample_token(logits.data(), 5, options, rng)]++;
  EXPECT_EQ(counts.size(), 2u);
  const double p2 = 1 / (1 + std::exp(-2.0));  // softmax of (2, 1) / 0.5
  EXPECT_NEAR(counts[2] / double(draws), p2, 0.01);
  // The same seed draws the same tokens.
  std::mt19937_64 a(3), b(3);
  options.top_k = 0;
  for (int i = 0; i < 100; i++)
    EXPECT_EQ(sample_token(logits.data(), 5, options, a),
              sample_token(logits.data(), 5, options, b));
}

// The next-token argmax from a model of exactly the context's length (no padding), built and
// loaded here through the model API.
int32_t independent_argmax(const Config& config, Backend& backend, const std::string& checkpoint,
                           const std::vector<int32_t>& context) {
  const int T = int(context.size());
  GPT model(config.model, backend, 1, T);
  load_checkpoint_weights(checkpoint, config, backend, model);
  model.forward(context.data(), nullptr, 1);
  const int Vp = config.model.padded_vocab();
  std::vector<bf16> row(static_cast<size_t>(Vp));
  backend.copy_to_host(row.data(), model.logits() + int64_t(T - 1) * Vp, row.size() * sizeof(bf16));
  int32_t best = 0;
  for (int32_t i = 1; i < config.model.vocab_size; i++)
    if (bf16_to_float(row[size_t(i)]) > bf16_to_float(row[size_t(best)])) best = i;
  return best;
}

TEST_F(TrainerTest, GreedyGenerationIsTheModelsArgmaxAndTheWindowSlides) {
  train(tiny_config("run", {"training.max_steps=3"}), {});
  const std::string checkpoint = (dir_ / "run" / "checkpoints" / "step_00000003.ckpt").string();
  const Config config = read_checkpoint_info(checkpoint).config;
  const int window = config.data.seq_len;  // 16
  std::unique_ptr<Backend> backend = make_cpu_backend(2);
  GptSampler sampler(config.model, *backend, window);
  load_checkpoint_weights(checkpoint, config, *backend, sampler.model());

  const std::vector<int32_t> prompt = {3, 4, 5, 6, 7};
  SamplingOptions greedy;
  greedy.temperature = 0;
  std::vector<int32_t> streamed;
  const int new_tokens = 20;  // 5 + 20 > 16: the last 9 see a sliding window
  const GeneratedTokens out =
      generate_tokens(sampler, prompt, new_tokens, config.model.vocab_size, -1, greedy,
                      [&](int32_t t) { streamed.push_back(t); });
  ASSERT_EQ(out.tokens.size(), size_t(new_tokens));
  EXPECT_EQ(streamed, out.tokens);
  EXPECT_FALSE(out.stopped);

  std::vector<int32_t> context = prompt;
  for (int i = 0; i < new_tokens; i++) {
    const std::vector<int32_t> seen(context.end() - std::min<size_t>(context.size(), window),
                                    context.end());
    const int32_t expected = independent_argmax(config, *backend, checkpoint, seen);
    ASSERT_EQ(out.tokens[size_t(i)], expected) << "token " << i;
    context.push_back(expected);
  }
  // A stop token ends it without being returned; top-k 1 is greedy; seeds change draws.
  size_t first_new = 1;  // the first token that was not generated before it
  while (first_new < out.tokens.size() &&
         std::find(out.tokens.begin(), out.tokens.begin() + first_new, out.tokens[first_new]) !=
             out.tokens.begin() + first_new)
    first_new++;
  ASSERT_LT(first_new, out.tokens.size());
  const GeneratedTokens stopped = generate_tokens(
      sampler, prompt, new_tokens, config.model.vocab_size, out.tokens[first_new], greedy);
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.tokens,
            std::vector<int32_t>(out.tokens.begin(), out.tokens.begin() + first_new));
  SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  EXPECT_EQ(generate_tokens(sampler, prompt, new_tokens, config.model.vocab_size, -1, top1).tokens,
            out.tokens);
  SamplingOptions hot;
  hot.temperature = 2.0;
  hot.top_k = 0;
  std::set<std::vector<int32_t>> texts;
  for (uint64_t seed : {1, 1, 2, 3}) {
    hot.seed = seed;
    texts.insert(
        generate_tokens(sampler, prompt, new_tokens, config.model.vocab_size, -1, hot).tokens);
  }
  EXPECT_EQ(texts.size(), 3u);  // seed 1 twice gives one text
}

}  // namespace
}  // namespace collage
