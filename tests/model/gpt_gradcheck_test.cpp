// The whole GPT backward against finite differences of its own forward, at fp32
// (GptT<float> on the fp32 cpu backend: the same model code, no bf16 rounding).
//
// Loss: the mean token loss L(w) = forward().sum / count, evaluated in fp32 (per-token
// losses summed in double); L ≈ 4.0–4.6 here. Steps are the exact fp32 differences
// float(w ± h) − w, measured in double. Each evaluation of L carries rounding noise e that
// does not shrink with the step: measured (41 evaluations 1e-6 apart, quadratic fit) rms
// 0.3–0.45 u·|L| and at most 1.05 u·|L|, u = 2⁻²⁴, in release and sanitized builds.
//  - per entry: |fd − g| ≤ 5e-5 + 5e-3·|g| for 16 random entries of every tensor, h = 1e-2:
//    the noise gives 2e/(2h) ≈ 3e-5 absolute, the O(h²) truncation a relative part (measured:
//    at most ~38% of that);
//  - directional derivative along a random direction d ~ N(0, I) through all parameters at
//    once (every weight moves, so the step is large and the plain central difference's h³
//    term matters: Richardson extrapolation removes it). Measured R = (8·M(h/2) − M(h))/3
//    with M(h) = L(w + h·d) − L(w − h·d), predicted P the same combination of g·(w⁺ − w⁻);
//    both ≈ 2h·g·d. |R − P| ≤ A + r·2h·|g|₂ with
//      A = (8·2 + 2)/3 · 4u·|L| ≈ 6.5e-6: the four evaluations' noise through the
//        combination's coefficients, each taken as 4 ulps of |L| (measured ≤ 1.05);
//      r = 1e-4 against 2h·|g|₂, not against |P|: g·d has standard deviation |g|₂, so an
//        error δg in the backward shows as ~2h·|δg|₂, while |g·d| can be accidentally small
//        (rope_untied: g·d = −0.079 with |g|₂ = 5.09, |P| = 4.7e-4, and a former 2e-3·|P|
//        = 9.5e-7 sat below A). r bounds the Richardson remainder, O(h⁴) relative to
//        2h·|g|₂: measured ≤ 1.0e-4 at h = 6e-3 and falling 12–16× per halving of h, so
//        ≲ 1e-5 at h = 3e-3; the fp32 backward's own rounding is ~1e-6.
//    Measured on AVX-512 (Intel Xeon): |R − P| ≤ 6.1e-7 release, ≤ 1.0e-6 sanitized
//    (rope_untied), at most 11% of the tolerance. Scaling one tensor's gradient by 1.01
//    (h.0.attn.proj.weight) fails every variant at 7.6–15× the tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/gpt.h"

namespace collage {
namespace {

constexpr int kB = 2, kT = 8;

struct TinyModel {
  std::unique_ptr<BackendT<float>> backend =
      make_cpu_backend_fp32(1);  // tiny ops: threads would only wait on each other
  ModelConfig config;
  std::unique_ptr<GptT<float>> model;
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;

  TinyModel(bool rope, bool tied) {
    config.n_layer = 2;
    config.hidden_size = 16;
    config.n_head = 2;
    config.vocab_size = 50;  // padded to 128
    config.max_position_embeddings = kT;
    config.position_embedding = rope ? "rope" : "learned";
    config.tie_embeddings = tied;
    config.init_std = 0.3f;  // large enough that the network is far from linear
    model = std::make_unique<GptT<float>>(config, *backend, kB, kT);
    model->init_weights(7);
    // Move off the init's special point (biases 0, layernorm weights 1).
    weights.resize(model->num_parameters());
    model->save_parameters(weights.data());
    std::mt19937 gen(11);
    std::normal_distribution<float> noise(0.0f, 0.1f);
    for (const ParameterInfo& info : model->parameters()) {
      bool padding_rows = info.name == "wte.weight" || info.name == "lm_head.weight";
      int64_t real = padding_rows ? int64_t{config.vocab_size} * config.hidden_size : info.numel;
      for (int64_t i = 0; i < real; ++i) weights[info.offset + i] += noise(gen);
    }
    model->load_parameters(weights.data());
    std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
    for (int i = 0; i < kB * kT; ++i) {
      tokens.push_back(token(gen));
      targets.push_back(token(gen));
    }
    targets[3] = -1;
  }

  double mean_loss() {
    auto loss = model->forward(tokens.data(), targets.data(), kB);
    return loss.sum / loss.count;
  }

  std::vector<float> gradient() {
    model->zero_gradients();
    auto loss = model->forward(tokens.data(), targets.data(), kB);
    model->backward(1.0f / loss.count);
    std::vector<float> g(model->num_parameters());
    backend->copy_to_host(g.data(), model->gradient_memory(), g.size() * sizeof(float));
    return g;
  }

  void set_weight(int64_t index, float value) {
    backend->copy_to_device(model->parameter_memory() + index, &value, sizeof(float));
  }
};

class GptGradcheck : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(GptGradcheck, EntriesOfEveryTensorMatchCentralDifferences) {
  auto [rope, tied] = GetParam();
  TinyModel s(rope, tied);
  const std::vector<float> grad = s.gradient();
  std::mt19937 gen(3);
  // Embedding rows that matter: used tokens (wte: lookup and head) and real ids (lm_head);
  // padding rows have zero gradient, checked exactly by the reference test.
  std::set<int32_t> used(s.tokens.begin(), s.tokens.end());
  const double h = 1e-2;
  double worst = 0;  // largest |g − fd| as a fraction of what is allowed
  for (const ParameterInfo& info : s.model->parameters()) {
    const int64_t cols = info.shape.size() > 1 ? info.shape[1] : 1;
    std::uniform_int_distribution<int64_t> any(0, info.numel - 1);
    std::uniform_int_distribution<int64_t> col(0, cols - 1);
    std::vector<int32_t> rows(used.begin(), used.end());
    std::uniform_int_distribution<size_t> used_row(0, rows.size() - 1);
    std::uniform_int_distribution<int64_t> real_row(0, s.config.vocab_size - 1);
    for (int k = 0; k < 16; ++k) {
      int64_t i = any(gen);
      if (info.name == "wte.weight") i = rows[used_row(gen)] * cols + col(gen);
      if (info.name == "lm_head.weight") i = real_row(gen) * cols + col(gen);
      const float w = s.weights[info.offset + i];
      const float up = w + static_cast<float>(h), down = w - static_cast<float>(h);
      s.set_weight(info.offset + i, up);
      double loss_up = s.mean_loss();
      s.set_weight(info.offset + i, down);
      double loss_down = s.mean_loss();
      s.set_weight(info.offset + i, w);
      double fd = (loss_up - loss_down) / (double(up) - double(down));
      double g = grad[info.offset + i];
      const double allowed = 5e-5 + 5e-3 * std::fabs(g);
      EXPECT_NEAR(g, fd, allowed) << info.name << " element " << i;
      worst = std::max(worst, std::fabs(g - fd) / allowed);
    }
  }
  std::printf("entries: worst error %.2f of the tolerance\n", worst);
}

TEST_P(GptGradcheck, DirectionalDerivativeMatches) {
  auto [rope, tied] = GetParam();
  TinyModel s(rope, tied);
  const std::vector<float> grad = s.gradient();
  std::mt19937 gen(5);
  std::normal_distribution<double> normal;
  std::vector<double> direction(s.weights.size());
  for (double& d : direction) d = normal(gen);
  // M(h) = L(w + h·d) − L(w − h·d) = 2h·g·d + c·h³ + O(h⁵), so (8·M(h/2) − M(h)) / 3 is
  // 2h·g·d + O(h⁵) (Richardson). The steps actually taken are the fp32-rounded weights, so
  // the prediction uses g · (w⁺ − w⁻) over those exact steps with the same combination.
  auto measure = [&](double h, double* predicted) {
    std::vector<float> up(s.weights.size()), down(s.weights.size());
    *predicted = 0;
    for (size_t i = 0; i < s.weights.size(); ++i) {
      up[i] = static_cast<float>(s.weights[i] + h * direction[i]);
      down[i] = static_cast<float>(s.weights[i] - h * direction[i]);
      *predicted += double(grad[i]) * (double(up[i]) - double(down[i]));
    }
    s.model->load_parameters(up.data());
    double loss_up = s.mean_loss();
    s.model->load_parameters(down.data());
    return loss_up - s.mean_loss();
  };
  const double loss = s.mean_loss();  // at w: the scale of each evaluation's rounding noise
  double grad_norm = 0;
  for (float g : grad) grad_norm += double(g) * g;
  grad_norm = std::sqrt(grad_norm);
  const double h = 3e-3;
  double predicted_h, predicted_half;
  double measured_h = measure(h, &predicted_h), measured_half = measure(h / 2, &predicted_half);
  double measured = (8 * measured_half - measured_h) / 3;
  double predicted = (8 * predicted_half - predicted_h) / 3;
  // Tolerance derived in the header: noise of four fp32 evaluations plus a relative part
  // against the signal's natural scale 2h·|g|₂.
  const double u = std::ldexp(1.0, -24);
  const double allowed = (8.0 * 2 + 2) / 3 * 4 * u * std::fabs(loss) + 1e-4 * 2 * h * grad_norm;
  std::printf(
      "directional: L %.6f |g| %.4e measured %.6e predicted %.6e (plain central: %.6e), "
      "|R - P| %.2e = %.3f of the tolerance %.2e\n",
      loss, grad_norm, measured, predicted, measured_h, std::fabs(measured - predicted),
      std::fabs(measured - predicted) / allowed, allowed);
  EXPECT_NEAR(measured, predicted, allowed);
}

INSTANTIATE_TEST_SUITE_P(Variants, GptGradcheck,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "rope" : "learned") +
                                  (std::get<1>(info.param) ? "_tied" : "_untied");
                         });

}  // namespace
}  // namespace collage
