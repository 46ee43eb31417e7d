// The GPT against PyTorch: fixtures from scripts/reference/gpt_reference.py (float64 torch,
// an independent implementation with the same parameter layout) hold weights, tokens,
// targets, the mean loss, the logits and the gradient of the mean loss for every
// parameter. Regenerate them with `/usr/bin/python3 scripts/reference/gpt_reference.py`.
//
// Errors are measured relative to the reference tensor's norm, ‖got − want‖ / ‖want‖:
//  - fp32 backend: only fp32 rounding (~6e-8 per op) and summation order differ from the
//    float64 reference; through 2 layers that stays ~1e-6, so 1e-4 leaves margin while
//    still catching any layout or math error (those give O(1) errors).
//  - bf16 backend: every activation and gradient is rounded to 8 significant bits (relative
//    error up to 2^-9 ≈ 0.2% per rounding, rms ≈ 0.06%) and the errors compound through ~30
//    rounded ops forward and ~40 backward. Measured on these fixtures: loss ≤ 3e-4 relative,
//    logits ≤ 7e-3, worst gradient tensor ≤ 1.4e-2 (mostly the layernorm parameters: their
//    gradients are sums over all rows that largely cancel, so the rounding noise of the
//    summands shows). Tolerances are ~3× that: loss 5e-3, logits 2e-2,
//    gradients 4e-2 — a layout or math error gives O(1) errors, far above them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "fixture_reader.h"
#include "model/gpt.h"
#include "model/host_values.h"

namespace collage {
namespace {

using test::entry;
using test::Fixture;
using test::relative_error;

struct Tolerances {
  double loss;    // |loss − ref| / ref
  double logits;  // ‖Δ‖ / ‖ref‖
  double grad;    // ‖Δ‖ / ‖ref‖, per parameter tensor
};

ModelConfig config_from(const Fixture& fixture, int* B, int* T) {
  const std::vector<float>& c = entry(fixture, "config").data;
  ModelConfig config;
  config.n_layer = static_cast<int>(c[0]);
  config.hidden_size = static_cast<int>(c[1]);
  config.n_head = static_cast<int>(c[2]);
  config.ffn_hidden_size = static_cast<int>(c[3]);
  config.vocab_size = static_cast<int>(c[4]);
  config.max_position_embeddings = static_cast<int>(c[5]);
  config.position_embedding = c[6] != 0 ? "rope" : "learned";
  config.tie_embeddings = c[7] != 0;
  *B = static_cast<int>(c[8]);
  *T = static_cast<int>(c[9]);
  config.rope_base = c[10];
  config.layernorm_eps = c[11];
  return config;
}

// Loads the fixture's weights, runs one forward and `backward_passes` backward passes with
// dloss = 1/count (the mean loss) and compares with the reference (times backward_passes:
// gradients accumulate). micro_batch may exceed the fixture's B.
template <typename Storage>
void check_against_fixture(const std::string& variant, BackendT<Storage>& backend,
                           const Tolerances& tol, int extra_micro_batch, int backward_passes) {
  const Fixture fixture =
      test::read_fixture(std::string(COLLAGE_FIXTURES) + "/gpt_" + variant + ".bin");
  int B, T;
  ModelConfig config = config_from(fixture, &B, &T);
  GptT<Storage> model(config, backend, B + extra_micro_batch, T);
  const int64_t Vp = config.padded_vocab();

  // The parameter tables agree name by name, shape by shape.
  std::vector<float> weights(static_cast<size_t>(model.num_parameters()));
  size_t fixture_params = 0;
  for (const auto& [name, tensor] : fixture) fixture_params += name.starts_with("param/");
  ASSERT_EQ(fixture_params, model.parameters().size());
  for (const ParameterInfo& info : model.parameters()) {
    const test::FixtureTensor& w = entry(fixture, "param/" + info.name);
    ASSERT_EQ(w.shape, info.shape) << info.name;
    std::copy(w.data.begin(), w.data.end(), weights.begin() + info.offset);
  }
  model.load_parameters(weights.data());

  std::vector<int32_t> tokens, targets;
  for (float t : entry(fixture, "tokens").data) tokens.push_back(static_cast<int32_t>(t));
  for (float t : entry(fixture, "targets").data) targets.push_back(static_cast<int32_t>(t));

  model.zero_gradients();
  auto loss = model.forward(tokens.data(), targets.data(), B);
  ASSERT_EQ(loss.count, static_cast<int64_t>(entry(fixture, "count").data[0]));
  const double mean_loss = loss.sum / loss.count, want_loss = entry(fixture, "loss").data[0];
  EXPECT_NEAR(mean_loss, want_loss, tol.loss * want_loss) << variant;

  std::vector<float> logits = download_values(backend, model.logits(), int64_t{B} * T * Vp);
  EXPECT_LE(relative_error(logits.data(), entry(fixture, "logits").data.data(), logits.size()),
            tol.logits)
      << variant << " logits";

  for (int pass = 0; pass < backward_passes; ++pass) model.backward(1.0f / loss.count);
  std::vector<float> grads =
      download_values(backend, model.gradient_memory(), model.num_parameters());
  double worst = 0;
  std::string worst_name;
  for (const ParameterInfo& info : model.parameters()) {
    std::vector<float> want = entry(fixture, "grad/" + info.name).data;
    for (float& g : want) g *= backward_passes;
    double err = relative_error(grads.data() + info.offset, want.data(), info.numel);
    if (err > worst) worst = err, worst_name = info.name;
    EXPECT_LE(err, tol.grad) << variant << " gradient of " << info.name;
    if (info.name == "wte.weight" || info.name == "lm_head.weight") {
      // Padding rows: no token and no loss term reaches them.
      for (int64_t i = int64_t{config.vocab_size} * config.hidden_size; i < info.numel; ++i) {
        ASSERT_EQ(grads[info.offset + i], 0.0f) << info.name << " padding element " << i;
      }
    }
  }
  std::printf("%s %s: loss %.6f (ref %.6f), logits err %.2e, worst grad err %.2e (%s)\n",
              backend.name().c_str(), variant.c_str(), mean_loss, want_loss,
              relative_error(logits.data(), entry(fixture, "logits").data.data(), logits.size()),
              worst, worst_name.c_str());
}

class GptReference : public ::testing::TestWithParam<std::string> {};

TEST_P(GptReference, Fp32MatchesTorchTightly) {
  auto backend = make_cpu_backend_fp32(2);
  // Also covers B < micro_batch and two accumulating backward passes (gradients double,
  // so the activation-gradient buffers must start from zero in each backward).
  check_against_fixture<float>(GetParam(), *backend, {1e-5, 1e-4, 1e-4}, 1, 2);
}

TEST_P(GptReference, Bf16MatchesTorch) {
  auto backend = make_cpu_backend(2);
  check_against_fixture<bf16>(GetParam(), *backend, {0.005, 0.02, 0.04}, 0, 1);
}

INSTANTIATE_TEST_SUITE_P(Variants, GptReference,
                         ::testing::Values("learned_tied", "learned_untied", "rope_tied",
                                           "rope_untied"));

}  // namespace
}  // namespace collage
