// GPT initialisation: the statistics of every tensor against its intended distribution,
// exact values where the init is deterministic, padding rows, and reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/gpt.h"

namespace collage {
namespace {

ModelConfig stats_config() {
  ModelConfig config;
  config.n_layer = 4;
  config.hidden_size = 256;
  config.n_head = 4;
  config.vocab_size = 1000;  // padded to 1024
  config.max_position_embeddings = 256;
  config.tie_embeddings = false;
  config.init_std = 0.02f;
  return config;
}

std::vector<float> init_and_save(BackendT<bf16>& backend, const ModelConfig& config,
                                 uint64_t seed) {
  GPT model(config, backend, 1, 8);
  model.init_weights(seed);
  std::vector<float> values(model.num_parameters());
  model.save_parameters(values.data());
  return values;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(GptInit, EveryTensorHasItsDistribution) {
  auto backend = make_cpu_backend(2);
  const ModelConfig config = stats_config();
  const std::vector<float> values = init_and_save(*backend, config, 1234);
  const double sigma = config.init_std, residual_sigma = sigma / std::sqrt(2.0 * config.n_layer);
  for (const ParameterInfo& info : GPT::parameter_table(config)) {
    const float* v = values.data() + info.offset;
    const bool is_vocab = info.name == "wte.weight" || info.name == "lm_head.weight";
    if (ends_with(info.name, ".bias")) {
      for (int64_t i = 0; i < info.numel; ++i) ASSERT_EQ(v[i], 0.0f) << info.name;
      continue;
    }
    if (info.shape.size() == 1) {  // layernorm weights
      for (int64_t i = 0; i < info.numel; ++i) ASSERT_EQ(v[i], 1.0f) << info.name;
      continue;
    }
    // Padding rows of the vocab tensors are zero; statistics over the real rows.
    int64_t n = is_vocab ? int64_t{config.vocab_size} * config.hidden_size : info.numel;
    for (int64_t i = n; i < info.numel; ++i) ASSERT_EQ(v[i], 0.0f) << info.name << " padding";
    const bool residual =
        ends_with(info.name, "attn.proj.weight") || ends_with(info.name, "fc2.weight");
    const double want = residual ? residual_sigma : sigma;
    double sum = 0, sum_sq = 0;
    int64_t within_1, within_2;
    within_1 = within_2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(v[i], round_to_bf16(v[i])) << info.name << " not bf16-representable";
      sum += v[i];
      sum_sq += double(v[i]) * v[i];
      within_1 += std::fabs(v[i]) < want;
      within_2 += std::fabs(v[i]) < 2 * want;
    }
    double mean = sum / n, std = std::sqrt(sum_sq / n - mean * mean);
    // n >= 64k: the sample std has relative sd 1/√(2n) < 0.3%, the mean sd σ/√n; the
    // fractions within 1σ and 2σ of a normal (0.6827, 0.9545) have sd < 0.002.
    EXPECT_NEAR(std, want, 0.02 * want) << info.name;
    EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(double(n))) << info.name;
    EXPECT_NEAR(double(within_1) / n, 0.6827, 0.01) << info.name;
    EXPECT_NEAR(double(within_2) / n, 0.9545, 0.006) << info.name;
  }
}

TEST(GptInit, SameSeedSameBitsAcrossRunsAndStorage) {
  auto backend = make_cpu_backend(2);
  auto backend_fp32 = make_cpu_backend_fp32(2);
  ModelConfig config = stats_config();
  config.n_layer = 2;
  config.position_embedding = "rope";
  const std::vector<float> a = init_and_save(*backend, config, 42);
  const std::vector<float> b = init_and_save(*backend, config, 42);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // The fp32 model starts from the very same (bf16-representable) values.
  GptT<float> model_fp32(config, *backend_fp32, 1, 8);
  model_fp32.init_weights(42);
  std::vector<float> c(model_fp32.num_parameters());
  model_fp32.save_parameters(c.data());
  ASSERT_EQ(c.size(), a.size());
  ASSERT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);

  const std::vector<float> d = init_and_save(*backend, config, 43);
  int64_t random_values = 0, equal = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 0.0f || a[i] == 1.0f) continue;  // biases, layernorms, padding
    ++random_values;
    equal += a[i] == d[i];
  }
  EXPECT_GT(random_values, 1000000);
  EXPECT_LT(double(equal) / random_values, 0.01);  // bf16 collisions only
}

TEST(GptInit, TensorsDoNotShareStreams) {
  // Two tensors of the same shape and σ (the qkv weights of layers 0 and 1) differ.
  auto backend = make_cpu_backend(2);
  ModelConfig config = stats_config();
  const std::vector<float> v = init_and_save(*backend, config, 1);
  auto table = GPT::parameter_table(config);
  const ParameterInfo *q0 = nullptr, *q1 = nullptr;
  for (const ParameterInfo& info : table) {
    if (info.name == "h.0.attn.qkv.weight") q0 = &info;
    if (info.name == "h.1.attn.qkv.weight") q1 = &info;
  }
  ASSERT_TRUE(q0 && q1);
  EXPECT_NE(std::memcmp(v.data() + q0->offset, v.data() + q1->offset, q0->numel * sizeof(float)),
            0);
}

}  // namespace
}  // namespace collage
