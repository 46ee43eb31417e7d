// BERT and RoBERTa against PyTorch: fixtures from scripts/reference/bert_reference.py (float64
// torch, an independent implementation of Hugging Face's BertForPreTraining and
// RobertaForMaskedLM with collage's parameter layout) hold weights, a padded batch with
// zero-padded MLM labels, the MLM and NSP losses and logits, and the gradient of their sum for
// every parameter. Regenerate: `/usr/bin/python3 scripts/reference/bert_reference.py`.
//
// Errors relative to the reference tensor's norm. fp32 backend: fp32 rounding and summation
// order only, ~1e-6 through two layers; 1e-4 catches any layout or math error (those are O(1)).
// bf16 backend: every activation rounded to 8 bits (as the GPT's reference test explains);
// post-LayerNorm blocks renormalise after every residual, so errors compound no worse than the
// GPT's: losses 5e-3, logits 2e-2, gradients 5e-2 (measured values in the failure messages).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "encoder_fixture.h"
#include "model/bert.h"
#include "model/host_values.h"

namespace collage {
namespace {

using test::entry;
using test::Fixture;
using test::relative_error;
using Case = test::EncoderCase;

struct Tolerances {
  double loss, logits, grad;
};

template <typename Storage>
void check_against_fixture(BackendT<Storage>& backend, const std::string& arch,
                           const Tolerances& tol) {
  const Fixture f = test::read_encoder_fixture(arch);
  const Case k = test::encoder_case(f, arch);
  BertT<Storage> model(k.config, backend, k.B, k.T, k.P);
  model.load_parameters(test::fixture_parameters(f, model).data());
  model.zero_gradients();
  const auto loss = model.forward(k.batch(), k.B, /*dropout=*/false);
  const double mlm = loss.mlm_sum / double(loss.mlm_count);
  const double want_mlm = entry(f, "out.mlm_loss").data[0];
  EXPECT_LT(std::abs(mlm - want_mlm) / want_mlm, tol.loss)
      << "MLM loss " << mlm << " vs " << want_mlm;
  EXPECT_EQ(loss.mlm_count, entry(f, "out.mlm_logits").shape[0]);
  if (arch == "bert") {
    const double nsp = loss.nsp_sum / double(loss.nsp_count);
    const double want_nsp = entry(f, "out.nsp_loss").data[0];
    EXPECT_LT(std::abs(nsp - want_nsp) / want_nsp, tol.loss)
        << "NSP loss " << nsp << " vs " << want_nsp;
  }
  // The mean losses' gradient: 1 / labelled tokens and 1 / sequences.
  model.backward(float(1.0 / double(loss.mlm_count)),
                 loss.nsp_count ? float(1.0 / double(loss.nsp_count)) : 0.0f);
  const std::vector<float> grads =
      download_values(backend, model.gradient_memory(), model.num_parameters());
  for (const ParameterInfo& p : model.parameters()) {
    const test::FixtureTensor& want = entry(f, "grad." + p.name);
    const double error = relative_error(grads.data() + p.offset, want.data.data(), p.numel);
    EXPECT_LT(error, tol.grad) << p.name << ": relative gradient error " << error;
  }
}

// Accuracy as evaluation reports it: the argmax over the real vocabulary against the labels.
// Labels do not change the logits, so a batch whose labels are the reference logits' argmax in
// every other labelled row must score exactly those rows (plus any the random labels hit).
TEST(BertReference, AccuracyCountsTheArgmax) {
  auto backend = make_cpu_backend_fp32(2);
  for (const std::string arch : {"bert", "roberta"}) {
    SCOPED_TRACE(arch);
    const Fixture f = test::read_encoder_fixture(arch);
    Case k = test::encoder_case(f, arch);
    const test::FixtureTensor& logits = entry(f, "out.mlm_logits");
    const int64_t Vp = logits.shape[1];
    int64_t row = 0, expected = 0;
    for (int b = 0; b < k.B; b++) {
      for (int j = 0; j < k.P && k.positions[b * k.P + j] != 0; j++, row++) {
        const float* x = logits.data.data() + row * Vp;
        const int32_t best = int32_t(std::max_element(x, x + k.config.vocab_size) - x);
        if (row % 2 == 0) k.labels[b * k.P + j] = best;
        expected += k.labels[b * k.P + j] == best;
      }
    }
    ASSERT_GT(expected, 2);
    int64_t nsp_expected = 0;
    if (arch == "bert") {
      const std::vector<float>& nsp = entry(f, "out.nsp_logits").data;
      for (int b = 0; b < k.B; b++)
        nsp_expected += (nsp[2 * b + 1] > nsp[2 * b]) == (k.nsp[b] == 1);
    }
    BertT<float> model(k.config, *backend, k.B, k.T, k.P);
    model.load_parameters(test::fixture_parameters(f, model).data());
    model.forward(k.batch(), k.B, /*dropout=*/false);
    EXPECT_EQ(model.mlm_correct(), expected);
    EXPECT_EQ(model.nsp_correct(), nsp_expected);
  }
}

TEST(BertReference, Fp32MatchesPyTorch) {
  auto backend = make_cpu_backend_fp32(2);
  check_against_fixture(*backend, "bert", {1e-4, 1e-4, 1e-4});
}

TEST(BertReference, RobertaFp32MatchesPyTorch) {
  auto backend = make_cpu_backend_fp32(2);
  check_against_fixture(*backend, "roberta", {1e-4, 1e-4, 1e-4});
}

TEST(BertReference, Bf16MatchesPyTorch) {
  auto backend = make_cpu_backend(2);
  check_against_fixture(*backend, "bert", {5e-3, 2e-2, 5e-2});
}

TEST(BertReference, RobertaBf16MatchesPyTorch) {
  auto backend = make_cpu_backend(2);
  check_against_fixture(*backend, "roberta", {5e-3, 2e-2, 5e-2});
}

}  // namespace
}  // namespace collage
