// attention_forward_dropout / attention_backward_dropout (backend.h) against float64 loops that
// compute dropout(softmax(S))·v and its gradient explicitly, with the mask drawn from the
// independent Philox of philox_reference.h; against finite differences (the mask is fixed by
// (seed, offset), so the dropped-out attention is a smooth function of qkv); and p = 0 against
// the plain attention ops, bit for bit.
//
// On each of the cpu attention's engines (attention_reference.h); the oneDNN engine rounds
// Z = P∘F (not P) to bf16 as the left factor of Z·v and Zᵀ·dout, as the tensor-core kernels do.
// Tolerances as tests/backend/attention_test.cpp (AttentionInputs::expect_matches): lse 1e-5;
// out one rounding plus 1e-5·max|v| (the weights Z sum to at most 1/(1 - p) instead of 1); dqkv
// one rounding plus 1e-5 of each entry's Σ|terms|; for the oneDNN engine plus 2^-8 of the
// Σ|terms| its rounded left factors carry, and D's share.
#include <limits>
#include <tuple>

#include "attention_reference.h"
#include "backend/cpu/cpu_backend.h"

namespace collage::test {
namespace {

const AttentionCase kCases[] = {{2, 5, 2, 6, true, false},
                                {2, 5, 2, 6, false, true},
                                {2, 9, 3, 4, true, true},
                                {1, 70, 2, 4, true, true},  // two query blocks of the cpu kernel
                                {1, 70, 1, 4, false, false}};

template <typename E>
class AttentionDropoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = E::unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};
TYPED_TEST_SUITE(AttentionDropoutTest, AttentionEngines, GemmEngineNames);

TYPED_TEST(AttentionDropoutTest, ForwardAndBackwardMatchFloat64) {
  using S = typename TypeParam::Storage;
  auto backend = TypeParam::make();
  Rng rng(1);
  const uint64_t seed = 0xabcdef0123ull;
  for (const AttentionCase& c : kCases) {
    for (const float p : {0.2f, 0.6f}) {
      const uint64_t offset = uint64_t(rng.integer(0, 1 << 20));
      SCOPED_TRACE(::testing::Message() << "T=" << c.T << " causal=" << c.causal
                                        << " masked=" << c.masked << " p=" << p);
      const AttentionInputs<S> in(*backend, rng, c);
      backend->attention_forward_dropout(in.d_out.get(), in.d_lse.get(), in.d_qkv.get(),
                                         in.key_mask, c.causal, c.B, c.T, c.NH, c.HS, p, seed,
                                         offset);
      backend->attention_backward_dropout(in.d_dqkv.get(), in.d_dout.get(), in.d_out.get(),
                                          in.d_qkv.get(), in.d_lse.get(), in.key_mask, c.causal,
                                          c.B, c.T, c.NH, c.HS, p, seed, offset);
      in.expect_matches(
          reference(c, to_double(in.qkv), in.mask, to_double(in.dout), p, seed, offset),
          rounds_left_factors<TypeParam>);
    }
  }
}

// The mask matters: with dropout the output is not the plain attention's (a test that could
// not tell the two apart would pass a kernel that ignores p). On both bf16 engines.
void expect_dropout_changes_the_output_and_zero_is_the_plain_op(Backend& backend_ref) {
  Backend* backend = &backend_ref;
  Rng rng(2);
  const AttentionCase c{2, 33, 2, 8, true, true};
  const int C = c.NH * c.HS;
  const auto qkv = random_values<bf16>(rng, qkv_size(c));
  const auto mask = random_mask(rng, c);
  const auto dout = random_values<bf16>(rng, size_t(c.B) * c.T * C);
  DeviceBuffer<bf16, Backend> d_qkv(*backend, qkv), d_dout(*backend, dout);
  DeviceBuffer<int32_t, Backend> d_mask(*backend, mask);
  auto run = [&](bool plain, float p) {
    DeviceBuffer<bf16, Backend> out(*backend, dout.size()), dqkv(*backend, qkv.size());
    DeviceBuffer<float, Backend> lse(*backend, size_t(c.B) * c.NH * c.T);
    const int32_t* m = d_mask.get();
    if (plain) {
      backend->attention_forward(out.get(), lse.get(), d_qkv.get(), m, c.causal, c.B, c.T, c.NH,
                                 c.HS);
      backend->attention_backward(dqkv.get(), d_dout.get(), out.get(), d_qkv.get(), lse.get(), m,
                                  c.causal, c.B, c.T, c.NH, c.HS);
    } else {
      backend->attention_forward_dropout(out.get(), lse.get(), d_qkv.get(), m, c.causal, c.B, c.T,
                                         c.NH, c.HS, p, 3, 0);
      backend->attention_backward_dropout(dqkv.get(), d_dout.get(), out.get(), d_qkv.get(),
                                          lse.get(), m, c.causal, c.B, c.T, c.NH, c.HS, p, 3, 0);
    }
    return std::make_tuple(out.download(), lse.download(), dqkv.download());
  };
  const auto [out0, lse0, dqkv0] = run(true, 0.0f);
  const auto [out1, lse1, dqkv1] = run(false, 0.0f);
  EXPECT_TRUE(same_bits(out0, out1));
  EXPECT_TRUE(same_bits(lse0, lse1));
  EXPECT_TRUE(same_bits(dqkv0, dqkv1));
  const auto [out2, lse2, dqkv2] = run(false, 0.3f);
  EXPECT_FALSE(same_bits(out0, out2));
  EXPECT_TRUE(same_bits(lse0, lse2));  // lse is of the undropped scores
  EXPECT_FALSE(same_bits(dqkv0, dqkv2));
}

TEST(AttentionDropout, DropoutChangesTheOutputAndZeroIsThePlainOp) {
  expect_dropout_changes_the_output_and_zero_is_the_plain_op(*GemmEngine<bf16, false>::make());
}
TEST(AttentionDropout, DropoutChangesTheOutputAndZeroIsThePlainOpOnOnednn) {
  if (const std::string why = GemmEngine<bf16, true>::unavailable(); !why.empty())
    GTEST_SKIP() << why;
  expect_dropout_changes_the_output_and_zero_is_the_plain_op(*GemmEngine<bf16, true>::make());
}

TEST(AttentionDropoutGradient, MatchesFiniteDifferencesAtFp32) {
  auto backend = make_cpu_backend_fp32(kFdThreads);
  Rng rng(3);
  const AttentionCase c{1, 6, 2, 4, true, true};
  const float p = 0.4f;
  const uint64_t seed = 11, offset = 5;
  const int C = c.NH * c.HS;
  auto qkv = random_values<float>(rng, qkv_size(c));
  const auto mask = random_mask(rng, c);
  const auto loss_weights = random_weights<float>(rng, size_t(c.B) * c.T * C);
  DeviceBuffer<int32_t, BackendT<float>> d_mask(*backend, mask);
  auto loss = [&](const std::vector<float>& x) {
    DeviceBuffer<float, BackendT<float>> d_x(*backend, x), out(*backend, loss_weights.size()),
        lse(*backend, size_t(c.B) * c.NH * c.T);
    backend->attention_forward_dropout(out.get(), lse.get(), d_x.get(), d_mask.get(), c.causal, c.B,
                                       c.T, c.NH, c.HS, p, seed, offset);
    return weighted_sum(out.download(), loss_weights);
  };
  DeviceBuffer<float, BackendT<float>> d_x(*backend, qkv), out(*backend, loss_weights.size()),
      lse(*backend, size_t(c.B) * c.NH * c.T), d_dout(*backend, from_double<float>(loss_weights)),
      dx(*backend, qkv.size());
  backend->attention_forward_dropout(out.get(), lse.get(), d_x.get(), d_mask.get(), c.causal, c.B,
                                     c.T, c.NH, c.HS, p, seed, offset);
  backend->attention_backward_dropout(dx.get(), d_dout.get(), out.get(), d_x.get(), lse.get(),
                                      d_mask.get(), c.causal, c.B, c.T, c.NH, c.HS, p, seed,
                                      offset);
  expect_gradient_matches_differences(loss, qkv, to_double(dx.download()), "dqkv");
}

}  // namespace
}  // namespace collage::test
