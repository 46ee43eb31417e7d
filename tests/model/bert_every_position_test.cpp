// BertT's inference mode (bert.h, forward()): without labels the MLM head predicts at every
// position and BERT's NSP head still runs, with no loss. The every-position logits must be the
// labelled forward's, row for row: the encoder is the same, and the head works on each row
// alone. Not always to the bit: the head's GEMMs see the ten labelled rows in one forward and
// every row in the other, and a BLAS may sum a row's products in an order that depends on where
// the row falls in its blocking. OpenBLAS's Haswell kernels do (the ones it runs on a CPU it
// does not know, such as the Zen 5 VM: rows in a last block of fewer than 12 take other
// kernels), and there the fp32 rows differ by up to 3.3e-7 of the row's largest logit, a few
// fp32 ulps. So each row must agree within kRowTolerance of its largest logit, far below what
// any other row differs by (about 0.5 of it; the test checks that too, so a wrong row fails).
// Checked on the fixtures of scripts/reference/bert_reference.py (padded rows, segment B
// tokens, RoBERTa's positions past the padding id) with both cpu storages: BertT<float> is what
// the export tests' dump tool runs, BertT<bf16> what trains.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "../error_of.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "encoder_fixture.h"
#include "model/bert.h"
#include "model/host_values.h"

namespace collage {
namespace {

// How far a row may move, as a share of its largest |logit|: 2^-16 in fp32 (46 times what
// reordered sums of the fixture's 32 products gave); 2^-7 in bf16, one bf16 ulp, for a
// rounding that such a difference tips the other way.
template <typename Storage>
constexpr double kRowTolerance = std::is_same_v<Storage, float> ? 0x1p-16 : 0x1p-7;

// max |a − b| over a row of n, as a share of max |b|.
double row_difference(const float* a, const float* b, int n) {
  double difference = 0, largest = 0;
  for (int c = 0; c < n; c++) {
    difference = std::max(difference, std::fabs(double(a[c]) - double(b[c])));
    largest = std::max(largest, std::fabs(double(b[c])));
  }
  return difference / largest;
}

template <typename Storage>
void check_every_position(BackendT<Storage>& backend, const std::string& arch) {
  SCOPED_TRACE(arch);
  const test::Fixture f = test::read_encoder_fixture(arch);
  const test::EncoderCase k = test::encoder_case(f, arch);
  const int B = k.B, T = k.T, Vp = int(k.config.padded_vocab());
  ASSERT_LT(k.P, T) << "the fixture's labelled model must differ from the every-position one";

  BertT<Storage> labelled(k.config, backend, B, T, k.P);
  const std::vector<float> weights = test::fixture_parameters(f, labelled);
  labelled.load_parameters(weights.data());
  const auto labelled_loss = labelled.forward(k.batch(), B, /*dropout=*/false);
  const int64_t M = labelled_loss.mlm_count;
  ASSERT_GT(M, 0);
  const std::vector<float> want = download_values(backend, labelled.mlm_logits(), M * Vp);

  BertT<Storage> every(k.config, backend, B, T, /*max_predictions=*/T);
  every.load_parameters(weights.data());
  BertInputs inputs;
  inputs.input_ids = k.ids.data();
  inputs.input_mask = k.mask.data();
  inputs.segment_ids = k.segments.data();
  const auto loss = every.forward(inputs, B, /*dropout=*/false);
  EXPECT_EQ(loss.mlm_count, 0);
  EXPECT_EQ(loss.nsp_count, 0);
  EXPECT_EQ(loss.mlm_sum, 0.0);
  const std::vector<float> got = download_values(backend, every.mlm_logits(), int64_t{B} * T * Vp);

  // Labelled row r is (b, masked_lm_positions[b][j]) in batch order, a row's labels ending at
  // its first zero position.
  int64_t r = 0;
  for (int b = 0; b < B; b++) {
    for (int j = 0; j < k.P && k.positions[b * k.P + j] != 0; j++, r++) {
      const int64_t row = int64_t{b} * T + k.positions[b * k.P + j];
      const int64_t neighbour = row > 0 ? row - 1 : row + 1;  // some other row
      const float* labelled_row = want.data() + r * Vp;
      EXPECT_LE(row_difference(got.data() + row * Vp, labelled_row, Vp), kRowTolerance<Storage>)
          << "sequence " << b << " position " << k.positions[b * k.P + j];
      EXPECT_GT(row_difference(got.data() + neighbour * Vp, labelled_row, Vp),
                10 * kRowTolerance<Storage>)
          << "the fixture's rows must differ more than the tolerance, so a wrong row fails";
    }
  }
  EXPECT_EQ(r, M);

  if (arch == "bert") {
    ASSERT_NE(every.nsp_logits(), nullptr);
    EXPECT_EQ(download_values(backend, every.nsp_logits(), 2 * B),
              download_values(backend, labelled.nsp_logits(), 2 * B));
  } else {
    EXPECT_EQ(every.nsp_logits(), nullptr);
  }
  // No labels, no loss to differentiate or count against.
  EXPECT_NE(test::error_of([&] { every.backward(1.0f, 1.0f); }).find("had no masked-LM labels"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { every.mlm_correct(); }).find("no masked-LM labels"),
            std::string::npos);
}

TEST(BertEveryPosition, MatchesTheLabelledRowsFp32) {
  auto backend = make_cpu_backend_fp32(2);
  for (const std::string arch : {"bert", "roberta"}) check_every_position(*backend, arch);
}

TEST(BertEveryPosition, MatchesTheLabelledRowsBf16) {
  auto backend = make_cpu_backend(2);
  for (const std::string arch : {"bert", "roberta"}) check_every_position(*backend, arch);
}

// MLM labels with no NSP labels: the MLM loss alone, BERT's NSP logits as with labels.
TEST(BertEveryPosition, NextSentenceLogitsWithoutLabels) {
  auto backend = make_cpu_backend_fp32(2);
  const test::Fixture f = test::read_encoder_fixture("bert");
  const test::EncoderCase k = test::encoder_case(f, "bert");
  BertT<float> model(k.config, *backend, k.B, k.T, k.P);
  model.load_parameters(test::fixture_parameters(f, model).data());
  const auto with = model.forward(k.batch(), k.B, false);
  const std::vector<float> want = download_values(*backend, model.nsp_logits(), 2 * k.B);
  BertInputs inputs = k.batch();
  inputs.next_sentence_labels = nullptr;
  const auto without = model.forward(inputs, k.B, false);
  EXPECT_EQ(without.mlm_sum, with.mlm_sum);
  EXPECT_EQ(without.mlm_count, with.mlm_count);
  EXPECT_EQ(without.nsp_count, 0);
  EXPECT_EQ(download_values(*backend, model.nsp_logits(), 2 * k.B), want);
  EXPECT_NE(test::error_of([&] { model.backward(1.0f, 1.0f); }).find("no next-sentence labels"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { model.nsp_correct(); }).find("no next-sentence labels"),
            std::string::npos);
}

// Every position needs a row of the head per token: a model built for fewer says so.
TEST(BertEveryPosition, NeedsMaxPredictionsOfSeqLen) {
  auto backend = make_cpu_backend_fp32(2);
  const test::Fixture f = test::read_encoder_fixture("roberta");
  const test::EncoderCase k = test::encoder_case(f, "roberta");
  BertT<float> model(k.config, *backend, k.B, k.T, k.P);
  BertInputs inputs;
  inputs.input_ids = k.ids.data();
  inputs.input_mask = k.mask.data();
  inputs.segment_ids = k.segments.data();
  EXPECT_EQ(test::error_of([&] { model.forward(inputs, k.B, false); }),
            fmt::format("BERT forward: logits at every position (no masked_lm_positions) need the "
                        "model built with max_predictions {} >= seq_len {}",
                        k.P, k.T));
  inputs.masked_lm_positions = k.positions.data();  // without its ids
  EXPECT_NE(test::error_of([&] {
              model.forward(inputs, k.B, false);
            }).find("masked_lm_positions and masked_lm_ids must both be given"),
            std::string::npos);
}

}  // namespace
}  // namespace collage
