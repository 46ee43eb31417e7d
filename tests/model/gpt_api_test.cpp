// The GPT's contract around forward/backward: inputs checked with clear errors, logits
// without targets, memory accounting, save/load round trip.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/gpt.h"

namespace collage {
namespace {

ModelConfig tiny_config() {
  ModelConfig config;
  config.n_layer = 1;
  config.hidden_size = 16;
  config.n_head = 2;
  config.vocab_size = 40;
  config.max_position_embeddings = 8;
  return config;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GptApi, LogitsWithoutTargetsAndBackwardNeedsTargets) {
  auto backend = make_cpu_backend_fp32(1);
  GptT<float> model(tiny_config(), *backend, 2, 8);
  model.init_weights(1);
  std::vector<int32_t> tokens(16), targets(16);
  for (int i = 0; i < 16; ++i) tokens[i] = (i * 7) % 40, targets[i] = (i * 5) % 40;
  const int64_t n_logits = 16 * 128;
  auto loss = model.forward(tokens.data(), targets.data(), 2);
  EXPECT_EQ(loss.count, 16);
  EXPECT_GT(loss.sum, 0.0);
  std::vector<float> with(n_logits), without(n_logits);
  backend->copy_to_host(with.data(), model.logits(), n_logits * sizeof(float));
  auto none = model.forward(tokens.data(), nullptr, 2);
  EXPECT_EQ(none.count, 0);
  backend->copy_to_host(without.data(), model.logits(), n_logits * sizeof(float));
  EXPECT_EQ(std::memcmp(with.data(), without.data(), n_logits * sizeof(float)), 0);
  // Padding rows of the (tied) embedding are zero, so are the padding logits.
  for (int64_t row = 0; row < 16; ++row) {
    for (int v = 40; v < 128; ++v) ASSERT_EQ(with[row * 128 + v], 0.0f);
  }
  EXPECT_NE(error_of([&] { model.backward(1.0f); }).find("no targets"), std::string::npos);
}

TEST(GptApi, RejectsBadInputsWithTheirPosition) {
  auto backend = make_cpu_backend_fp32(1);
  GptT<float> model(tiny_config(), *backend, 2, 8);
  std::vector<int32_t> tokens(24, 1), targets(24, 1);
  tokens[9] = 40;
  EXPECT_NE(error_of([&] { model.forward(tokens.data(), nullptr, 2); }).find("position 9"),
            std::string::npos);
  tokens[9] = 1;
  targets[3] = 41;
  EXPECT_NE(error_of([&] { model.forward(tokens.data(), targets.data(), 2); }).find("target 41"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model.forward(tokens.data(), nullptr, 3); }).find("batch 3"),
            std::string::npos);
  targets[3] = -1;  // ignored targets are fine
  EXPECT_EQ(model.forward(tokens.data(), targets.data(), 2).count, 15);
}

TEST(GptApi, RejectsUnsupportedShapes) {
  auto backend = make_cpu_backend_fp32(1);
  EXPECT_NE(error_of([&] { GptT<float>(tiny_config(), *backend, 1, 9); }).find("data.seq_len"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              GptT<float>(tiny_config(), *backend, 1, 8, {2, 0});
            }).find("parallel.tensor_parallel"),
            std::string::npos);
  ModelConfig odd = tiny_config();
  odd.position_embedding = "rope";
  odd.hidden_size = 6;  // head size 3
  EXPECT_NE(error_of([&] { GptT<float>(odd, *backend, 1, 8); }).find("even head size"),
            std::string::npos);
}

TEST(GptApi, SaveLoadRoundTripAndMemoryAccounting) {
  auto backend = make_cpu_backend(1);
  GPT model(tiny_config(), *backend, 2, 8);
  model.init_weights(9);
  std::vector<float> saved(model.num_parameters()), again(model.num_parameters());
  model.save_parameters(saved.data());
  GPT other(tiny_config(), *backend, 2, 8);
  other.load_parameters(saved.data());
  other.save_parameters(again.data());
  EXPECT_EQ(saved, again);
  const int64_t C = 16, Vp = 128;
  EXPECT_EQ(model.num_parameters(), Vp * C + 8 * C + 12 * C * C + 13 * C + 2 * C);
  EXPECT_EQ(model.parameter_bytes(), model.num_parameters() * sizeof(bf16));
  // At least the logits, their gradient and the residual streams are in the arena.
  EXPECT_GT(model.activation_bytes(), size_t(2 * 16 * Vp * sizeof(bf16)));
}

}  // namespace
}  // namespace collage
